// The bootstrap with a pre-shared key (BootstrapOptions::psk, security.key_file): neighbours
// authenticate each other and share a per-edge session key; a peer with another key fails with
// "authentication failed" while the one it dialed logs, counts and keeps waiting; a forged hello
// that claims rank 0 with the right config hashes but no key, and a stranger's hello of another
// protocol version, are refused without ending the bootstrap, and the real rank 0 still gets in;
// the hello the forger gets back carries keyed config hashes and neither the data address nor the
// build id in clear.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <span>
#include <thread>

#include "runtime/common/byte_order.h"
#include "runtime/transport/handshake.h"
#include "runtime/transport/tcp/framing.h"
#include "tests/test_util/pipes.h"
#include "tests/transport/bootstrap_test_util.h"

using namespace grapevine;
using namespace grapevine::transport;
using namespace grapevine::transport::testing;

namespace {

using test_util::dialRaw;

// A stranger on a tcp data port: dials `port` and sends a data hello claiming rank 0 with `token`
// (random when empty); the socket, kept open, or -1.
int strangerDataHello(std::uint16_t port, std::span<const std::uint8_t> token = {}) {
  const int fd = dialRaw(port);
  if (fd < 0) return -1;
  std::uint8_t hello[tcp::kHelloBytes];
  std::uint8_t claimed[tcp::kBindingBytes];
  if (token.size() == sizeof claimed) {
    std::copy(token.begin(), token.end(), claimed);
  } else {
    security::randomBytes(claimed);
  }
  tcp::encodeHello(hello, 0, claimed);
  test_util::writeAll(fd, hello, sizeof hello);
  return fd;
}

// Reads, without waiting, whatever each socket received, and closes it: the bytes that reached the
// strangers.
std::size_t drainAndClose(const std::vector<int>& fds) {
  std::size_t bytes = 0;
  for (int fd : fds) {
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
    std::uint8_t b[256];
    for (ssize_t r; (r = ::read(fd, b, sizeof b)) > 0;) bytes += static_cast<std::size_t>(r);
    ::close(fd);
  }
  return bytes;
}

Options tcpOptions() {
  Options o;
  o.backend = "tcp";
  o.ioTimeoutSeconds = 5;
  return o;
}

BootstrapOptions keyed(const security::Key& key, double connectTimeout = 10.0) {
  BootstrapOptions b;
  b.psk = key;
  b.connectTimeoutSeconds = connectTimeout;
  return b;
}

// Reads one control frame: (type, payload); type 0 on EOF/timeout.
std::pair<std::uint16_t, std::vector<std::uint8_t>> readFrame(int fd) {
  std::uint8_t h[6];
  if (!test_util::readAll(fd, h, 6)) return {0, {}};
  std::vector<std::uint8_t> body(loadLe32(h));
  if (!test_util::readAll(fd, body.data(), body.size())) return {0, {}};
  return {loadLe16(h + 4), body};
}

bool sendFrame(int fd, std::uint16_t type, std::span<const std::uint8_t> payload) {
  const auto f = handshake::encodeFrame(type, payload);
  return test_util::writeAll(fd, f.data(), f.size());
}

// A real rank 0 started late, in the cluster's loop, dialing rank 1 at `port`.
struct LatePeer {
  std::unique_ptr<Context> data;
  std::shared_ptr<Bootstrap> boot;
  std::optional<Result<std::vector<Neighbour>>> result;

  LatePeer(Cluster& c, std::uint16_t port, const security::Key& key) {
    Options o = tcpOptions();
    o.rank = 0;
    auto ctx = makeContext(c.loop, o);
    REQUIRE(ctx.isOk());
    data = std::move(ctx).value();
    BootstrapOptions b = keyed(key);
    b.rank = 0;
    b.peers = {"127.0.0.1:0", "127.0.0.1:" + std::to_string(port)};
    b.neighbours = {1};
    b.incarnation = 100;
    b.configParts = standardParts();
    auto s = Bootstrap::start(c.loop, b, *data, [this](Result<std::vector<Neighbour>> r) {
      result.emplace(std::move(r));
    });
    REQUIRE(s.isOk());
    boot = *s;
  }
  ~LatePeer() {
    if (result && result->isOk()) {
      for (auto& nb : result->value()) nb.control->close();
    }
    data->close();
  }
};

}  // namespace

TEST_CASE("bootstrap with a key: neighbours authenticate and share one session key per edge") {
  const security::Key key = security::randomKey();
  Cluster c(tcpOptions(), {{1, 2}, {0, 2}, {0, 1}},
            {standardParts(), standardParts(), standardParts()}, keyed(key));
  REQUIRE(c.run(5.0));
  std::map<std::pair<int, int>, security::Key> keys;
  for (int r = 0; r < 3; ++r) {
    INFO("rank " << r << ": " << c.results[r]->status().toString());
    REQUIRE(c.results[r]->isOk());
    for (const Neighbour& n : c.results[r]->value()) {
      REQUIRE(n.sessionKey.has_value());
      CHECK(*n.sessionKey != key);
      keys[{r, n.peer}] = *n.sessionKey;
    }
    CHECK(c.boots[r]->rejected().empty());
  }
  CHECK(keys.at({0, 1}) == keys.at({1, 0}));
  CHECK(keys.at({0, 2}) == keys.at({2, 0}));
  CHECK(keys.at({1, 2}) == keys.at({2, 1}));
  CHECK(keys.at({0, 1}) != keys.at({0, 2}));
}

TEST_CASE("bootstrap with a key: without a key, neighbours get no session key") {
  Cluster c(tcpOptions(), {{1}, {0}}, {standardParts(), standardParts()});
  REQUIRE(c.run(5.0));
  for (int r = 0; r < 2; ++r) {
    REQUIRE(c.results[r]->isOk());
    CHECK(!c.results[r]->value()[0].sessionKey.has_value());
  }
}

TEST_CASE("bootstrap with a key: a peer with another key fails; its neighbour logs and waits") {
  const security::Key key = security::randomKey();
  const security::Key other = security::randomKey();
  // Rank 0 (the dialer) has the other key.
  Cluster c(tcpOptions(), {{1}, {0}}, {standardParts(), standardParts()}, keyed(key),
            [&](int r, BootstrapOptions& b) {
              if (r == 0) b.psk = other;
            });
  REQUIRE(c.loop.runUntil([&] { return c.results[0].has_value(); }, std::chrono::seconds(5)));
  REQUIRE(!c.results[0]->isOk());
  const std::string m = c.results[0]->status().message();
  INFO(m);
  CHECK(m.find("authentication failed with neighbour 1") != std::string::npos);
  // Rank 1 logged and counted the attempt, and still waits for the real rank 0.
  REQUIRE(c.loop.runUntil([&] { return c.boots[1]->rejected().count("auth_failed") == 1; },
                          std::chrono::seconds(5)));
  CHECK(!c.results[1].has_value());
  c.boots[1]->cancel();
  REQUIRE(c.run(1.0));
  CHECK(c.results[1]->status().code() == ErrorCode::kCancelled);
}

TEST_CASE("bootstrap with a key: a key on one side only is refused, naming security.key_file") {
  Cluster c(tcpOptions(), {{1}, {0}}, {standardParts(), standardParts()}, {},
            [&](int r, BootstrapOptions& b) {
              if (r == 0) b.psk = security::randomKey();
              b.connectTimeoutSeconds = 2;
            });
  REQUIRE(c.loop.runUntil([&] { return c.results[0].has_value(); }, std::chrono::seconds(5)));
  REQUIRE(!c.results[0]->isOk());
  INFO(c.results[0]->status().message());
  CHECK(c.results[0]->status().message().find("security.key_file") != std::string::npos);
}

TEST_CASE("bootstrap with a key: a forged hello as rank 0 is refused; the real rank 0 gets in") {
  const security::Key key = security::randomKey();
  // Rank 1 waits for neighbour 0; rank 0 of the cluster has no neighbours (the forger plays it).
  Cluster c(tcpOptions(), {{}, {0}}, {standardParts(), standardParts()}, keyed(key));
  const std::uint16_t port = c.boots[1]->listenPort();
  std::atomic<bool> clientDone{false};
  std::vector<std::uint16_t> replies;
  Result<handshake::Hello> rank1Hello = internalError("no hello");
  std::vector<std::uint8_t> rank1HelloBytes;
  std::thread forger([&] {
    const int fd = dialRaw(port);
    REQUIRE(fd >= 0);
    handshake::Hello h;  // the right config hashes (public values), a nonce, but no key
    h.sender = 0;
    h.receiver = 1;
    h.incarnation = 100;
    h.backend = "tcp";
    h.address = {1, 2, 3};
    h.parts = standardParts();
    h.nonce = security::randomNonce();
    REQUIRE(sendFrame(fd, handshake::kHello, *handshake::encodeHello(h)));
    // Rank 1 answers with its hello and its proof; nothing it sends names a config hash of ours
    // in a reject.
    auto hello = readFrame(fd);
    auto proof = readFrame(fd);
    replies = {hello.first, proof.first};
    rank1Hello = handshake::decodeHello(hello.second);
    rank1HelloBytes = hello.second;
    // Replaying rank 1's own proof, or any guess, fails.
    REQUIRE(sendFrame(fd, handshake::kAuth, proof.second));
    auto last = readFrame(fd);
    replies.push_back(last.first);
    ::close(fd);
    clientDone = true;
    c.loop.post([] {});
  });
  REQUIRE(c.loop.runUntil([&] { return clientDone.load(); }, std::chrono::seconds(5)));
  forger.join();
  REQUIRE(replies.size() == 3);
  CHECK(replies[0] == handshake::kHello);
  // Rank 1's hello, sent before any proof, carries its config hashes keyed: the forger cannot
  // confirm a guess of the config from them. Protocol versions stay plain.
  REQUIRE(rank1Hello.isOk());
  const auto plain = standardParts();
  REQUIRE(rank1Hello->parts.size() == plain.size());
  int keyedParts = 0;
  for (std::size_t k = 0; k < plain.size(); ++k) {
    INFO(plain[k].name);
    CHECK(rank1Hello->parts[k].name == plain[k].name);
    if (plain[k].name.starts_with(handshake::kProtocolPartPrefix)) {
      CHECK(rank1Hello->parts[k].hash == plain[k].hash);
      continue;
    }
    ++keyedParts;
    CHECK(rank1Hello->parts[k].hash != plain[k].hash);
    CHECK(rank1Hello->parts[k].hash == security::configPartHash(key, plain[k].name, plain[k].hash));
    CHECK(rank1Hello->parts[k].hash !=
          security::configPartHash(security::randomKey(), plain[k].name, plain[k].hash));
  }
  CHECK(keyedParts > 0);
  // Nor does it tell where rank 1's data port is, or its build: both are sealed under the key.
  const std::vector<std::uint8_t> dataAddress = c.data[1]->localAddress();
  REQUIRE(!dataAddress.empty());
  CHECK(std::search(rank1HelloBytes.begin(), rank1HelloBytes.end(), dataAddress.begin(),
                    dataAddress.end()) == rank1HelloBytes.end());
  const std::string build(buildId());
  CHECK(std::search(rank1HelloBytes.begin(), rank1HelloBytes.end(), build.begin(), build.end()) ==
        rank1HelloBytes.end());
  CHECK(rank1Hello->address.empty());
  CHECK(rank1Hello->buildId.empty());
  CHECK(!handshake::openSealedFields(*rank1Hello, rank1HelloBytes, security::randomKey()).isOk());
  REQUIRE(handshake::openSealedFields(*rank1Hello, rank1HelloBytes, key).isOk());
  CHECK(rank1Hello->address == dataAddress);
  CHECK(rank1Hello->buildId == build);
  CHECK(replies[1] == handshake::kAuth);
  CHECK(replies[2] == handshake::kReject);
  REQUIRE(c.loop.runUntil([&] { return c.boots[1]->rejected().count("auth_failed") == 1; },
                          std::chrono::seconds(5)));
  CHECK(!c.results[1].has_value());  // refused, never fatal
  // The real rank 0 now bootstraps with rank 1.
  LatePeer real(c, port, key);
  REQUIRE(c.loop.runUntil([&] { return real.result.has_value() && c.results[1].has_value(); },
                          std::chrono::seconds(5)));
  INFO(real.result->status().toString() << " / " << c.results[1]->status().toString());
  REQUIRE(real.result->isOk());
  REQUIRE(c.results[1]->isOk());
  CHECK(*real.result->value()[0].sessionKey == *c.results[1]->value()[0].sessionKey);
}

TEST_CASE("bootstrap with a key: a stranger's hello of another version does not abort it") {
  const security::Key key = security::randomKey();
  Cluster c(tcpOptions(), {{}, {0}}, {standardParts(), standardParts()}, keyed(key));
  const std::uint16_t port = c.boots[1]->listenPort();
  std::atomic<bool> clientDone{false};
  std::thread client([&] {
    const int fd = dialRaw(port);
    REQUIRE(fd >= 0);
    std::uint8_t frame[6 + 24] = {};
    storeLe32(frame, 24);
    storeLe16(frame + 4, 1);  // hello
    storeLe32(frame + 6, kControlMagic);
    storeLe16(frame + 10, 2);  // version 2
    storeLe32(frame + 14, 0);  // claims rank 0
    storeLe32(frame + 18, 1);
    REQUIRE(test_util::writeAll(fd, frame, sizeof frame));
    readFrame(fd);  // the reject
    ::close(fd);
    clientDone = true;
    c.loop.post([] {});
  });
  REQUIRE(c.loop.runUntil([&] { return clientDone.load(); }, std::chrono::seconds(5)));
  client.join();
  c.loop.runUntil([] { return false; }, std::chrono::milliseconds(50));
  CHECK(c.boots[1]->rejected().count("version") == 1);
  CHECK(!c.results[1].has_value());
  LatePeer real(c, port, key);
  REQUIRE(c.loop.runUntil([&] { return real.result.has_value() && c.results[1].has_value(); },
                          std::chrono::seconds(5)));
  REQUIRE(real.result->isOk());
  REQUIRE(c.results[1]->isOk());
}

TEST_CASE(
    "bootstrap with a key: control frames after the handshake are sealed; forged, plain and "
    "replayed ones are dropped, and an altered one does not stop the next") {
  const security::Key key = security::randomKey();
  // Rank 1 waits for neighbour 0, which this test plays by hand with the right key.
  BootstrapOptions base = keyed(key);
  base.heartbeatIntervalSeconds = 0.05;
  Cluster c(tcpOptions(), {{}, {0}}, {standardParts(), standardParts()}, base);
  const std::uint16_t port = c.boots[1]->listenPort();
  std::atomic<bool> clientDone{false};
  bool heartbeatVerified = false, plainHeartbeatRefused = false;
  std::thread dialer([&] {
    const int fd = dialRaw(port);
    REQUIRE(fd >= 0);
    handshake::Hello h;
    h.sender = 0;
    h.receiver = 1;
    h.incarnation = 100;
    h.backend = "tcp";
    const std::string address = "127.0.0.1:1";  // never dialed: rank 1 waits for our data dial
    h.address.assign(address.begin(), address.end());
    h.parts = standardParts();  // as a peer with the key sends them: keyed
    for (auto& part : h.parts) part.hash = security::configPartHash(key, part.name, part.hash);
    h.nonce = security::randomNonce();
    const auto ours = *handshake::encodeHello(h, key);  // as a key holder: sealed
    REQUIRE(sendFrame(fd, handshake::kHello, ours));
    const auto hello = readFrame(fd);
    const auto proof = readFrame(fd);
    REQUIRE(hello.first == handshake::kHello);
    REQUIRE(proof.first == handshake::kAuth);
    const auto theirs = handshake::decodeHello(hello.second);
    REQUIRE(theirs.isOk());
    const security::Transcript t = handshake::transcriptOf(h, ours, *theirs, hello.second);
    REQUIRE(security::verifyHandshakeProof(key, t, t.acceptor, proof.second));
    const security::Proof mine = security::handshakeProof(key, t, t.dialer);
    REQUIRE(sendFrame(fd, handshake::kAuth, mine));
    const security::Key control = security::controlKey(security::sessionKey(key, t));

    // Rank 1's frames are sealed with its own count: its first heartbeat opens with sequence 0,
    // and not as a plain frame.
    std::uint8_t header[handshake::kFrameHeaderBytes];
    REQUIRE(test_util::readAll(fd, header, sizeof header));
    std::vector<std::uint8_t> body(loadLe32(header));
    REQUIRE(test_util::readAll(fd, body.data(), body.size()));
    heartbeatVerified = loadLe16(header + 4) == handshake::kHeartbeat &&
                        handshake::openSealedFrame(control, 1, 0, header, body).has_value();
    plainHeartbeatRefused = !handshake::openSealedFrame(control, 1, 1, header, body).has_value() &&
                            body.size() == security::kSealTagBytes;

    const auto user = [](const std::string& text) {
      return handshake::encodeUserMessage(
          7, std::span<const std::uint8_t>(reinterpret_cast<const std::uint8_t*>(text.data()),
                                           text.size()));
    };
    const auto write = [&](const std::vector<std::uint8_t>& f) {
      REQUIRE(test_util::writeAll(fd, f.data(), f.size()));
    };
    write(handshake::encodeSealedFrame(security::randomKey(), 0, 0, handshake::kUser,
                                       user("forged")));             // another key
    write(handshake::encodeFrame(handshake::kUser, user("plain")));  // not sealed
    const auto one = handshake::encodeSealedFrame(control, 0, 0, handshake::kUser, user("one"));
    write(one);
    write(one);  // replayed
    auto altered = handshake::encodeSealedFrame(control, 0, 1, handshake::kUser, user("tw0"));
    altered[handshake::kFrameHeaderBytes + 4] ^= 1;  // one bit of the payload
    write(altered);
    write(handshake::encodeSealedFrame(control, 0, 1, handshake::kUser, user("two")));
    // A frame of ours altered on the way (count 2): the next one (count 3) still verifies, so
    // one bad frame does not cut the link for the rest of the run (issue 41).
    auto lost = handshake::encodeSealedFrame(control, 0, 2, handshake::kUser, user("three"));
    lost[handshake::kFrameHeaderBytes + 4] ^= 1;
    write(lost);
    write(handshake::encodeSealedFrame(control, 0, 3, handshake::kUser, user("four")));
    // Keep the connection open until rank 1 has taken both.
    c.loop.post([] {});
    while (!clientDone.load()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    ::close(fd);
  });
  const auto texts = [&] {
    std::vector<std::string> out;
    for (const auto& [at, from, type, bytes] : c.messages) {
      if (at == 1 && from == 0 && type == 7) out.emplace_back(bytes.begin(), bytes.end());
    }
    return out;
  };
  const bool got = c.loop.runUntil([&] { return texts().size() >= 3; }, std::chrono::seconds(10));
  // A little longer: nothing else may arrive.
  c.loop.runUntil([] { return false; }, std::chrono::milliseconds(200));
  clientDone = true;
  dialer.join();
  REQUIRE(got);
  CHECK(texts() == std::vector<std::string>{"one", "two", "four"});
  CHECK(heartbeatVerified);
  CHECK(plainHeartbeatRefused);
  REQUIRE(c.results[1].has_value());
  CHECK(c.results[1]->isOk());
}

TEST_CASE(
    "bootstrap with a key: tcp data connections are bound to the handshake; a stranger claiming "
    "the dialer's rank gets nothing and takes nothing") {
  // Issue 41: the tcp data listener took any hello claiming a rank (the newest replacing the
  // parked one), so a stranger without the key could take over a keyed edge and read its models.
  const security::Key key = security::randomKey();
  Cluster c(tcpOptions(), {{1}, {0}}, {standardParts(), standardParts()}, keyed(key));
  const auto address = c.data[1]->localAddress();
  const std::string text(address.begin(), address.end());
  const auto port = static_cast<std::uint16_t>(std::stoi(text.substr(text.rfind(':') + 1)));
  // Strangers dial rank 1's data port all through the bootstrap, each claiming to be rank 0 with
  // a token of its own, and keep their sockets open.
  // Strangers dial rank 1's data port before the bootstrap runs (their hellos are read first) and
  // all through it, each claiming to be rank 0 with a token of its own, and keep their sockets
  // open.
  std::vector<int> strangers;
  const auto dialStranger = [&] {
    if (const int fd = strangerDataHello(port); fd >= 0) strangers.push_back(fd);
  };
  for (int i = 0; i < 20; ++i) dialStranger();
  std::atomic<bool> stop{false};
  std::thread flood([&] {
    while (!stop.load() && strangers.size() < 200) {
      dialStranger();
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
  const bool done = c.run(10.0);
  // The edge carries the real peers' messages both ways.
  REQUIRE(done);
  REQUIRE(c.results[0]->isOk());
  REQUIRE(c.results[1]->isOk());
  auto& at0 = c.results[0]->value().at(0).data;  // rank 0's connection to rank 1
  auto& at1 = c.results[1]->value().at(0).data;  // rank 1's connection to rank 0
  const std::vector<std::uint8_t> m01{1, 2, 3, 4}, m10{5, 6, 7};
  std::vector<std::uint8_t> in1(16), in0(16);  // what rank 1 and rank 0 receive
  std::size_t got1 = 0, got0 = 0;
  bool ok1 = false, ok0 = false;
  at1->recv(9, in1, [&](Status st, std::size_t n) { ok1 = st.isOk(), got1 = n; });
  at0->recv(9, in0, [&](Status st, std::size_t n) { ok0 = st.isOk(), got0 = n; });
  at0->send(9, m01, [](Status) {});
  at1->send(9, m10, [](Status) {});
  c.loop.runUntil([&] { return ok0 && ok1; }, std::chrono::seconds(10));
  stop = true;
  flood.join();
  CHECK(ok1);
  CHECK(std::vector<std::uint8_t>(in1.begin(), in1.begin() + got1) == m01);
  CHECK(ok0);
  CHECK(std::vector<std::uint8_t>(in0.begin(), in0.begin() + got0) == m10);
  // Not one byte went to a stranger: its socket was closed unread, or is still parked.
  const std::size_t leaked = drainAndClose(strangers);
  INFO(strangers.size() << " strangers dialed rank 1's data port " << port);
  CHECK(!strangers.empty());
  CHECK(leaked == 0);

  SECTION("and at a rejoin: new tokens, a stranger parked before the real dialer gets nothing") {
    // A rejoin connects the edge again with the new handshake's tokens. Strangers claiming rank 0
    // park their hellos first (with random tokens, and one with the old edge's tokens: a replay
    // of the previous incarnation); the new connection adopts the real dialer's socket only.
    const security::Key oldSession = *c.results[0]->value().at(0).sessionKey;
    std::vector<int> early;
    const auto oldToken = security::dataBindingToken(oldSession, /*lower=*/true);
    for (int i = 0; i < 4; ++i) {
      const int fd = i == 0 ? strangerDataHello(port, oldToken) : strangerDataHello(port);
      if (fd >= 0) early.push_back(fd);
    }
    c.loop.runUntil([] { return false; }, std::chrono::milliseconds(200));  // they are parked
    const security::Key session = security::randomKey();
    DataBinding binding;
    binding.lower = security::dataBindingToken(session, true);
    binding.higher = security::dataBindingToken(session, false);
    auto again1 = c.data[1]->connectBound(0, c.data[0]->localAddress(), binding);
    auto again0 = c.data[0]->connectBound(1, c.data[1]->localAddress(), binding);
    REQUIRE(again1.isOk());
    REQUIRE(again0.isOk());
    std::vector<std::uint8_t> in(16);
    std::size_t n = 0;
    bool ok = false;
    (*again1)->recv(11, in, [&](Status st, std::size_t k) { ok = st.isOk(), n = k; });
    (*again0)->send(11, m01, [](Status) {});
    c.loop.runUntil([&] { return ok; }, std::chrono::seconds(10));
    CHECK(ok);
    CHECK(std::vector<std::uint8_t>(in.begin(), in.begin() + n) == m01);
    const std::size_t leakedAtRejoin = drainAndClose(early);
    CHECK(early.size() == 4);
    CHECK(leakedAtRejoin == 0);
  }
}
