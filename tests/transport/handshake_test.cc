// The bootstrap's control protocol codec on its own: no sockets, every malformed input named.
#include "runtime/transport/handshake.h"

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "runtime/common/byte_order.h"
#include "runtime/security/auth.h"
#include "runtime/security/key.h"
#include "runtime/transport/handshake_check.h"

using namespace grapevine;
using namespace grapevine::transport;
using namespace grapevine::transport::handshake;

namespace {

Hello sampleHello() {
  Hello h;
  h.sender = 3;
  h.receiver = 5;
  h.incarnation = 0x0102030405060708ull;
  h.backend = "tcp";
  h.address = {'1', '2', '7', '.', '0', '.', '0', '.', '1', ':', '9'};
  h.parts = {{"topology", 0x1111}, {"compression", 0xABCDEF0123456789ull}};
  return h;
}

std::vector<std::uint8_t> encoded(const Hello& h) {
  auto bytes = encodeHello(h);
  REQUIRE(bytes.isOk());
  return std::move(bytes).value();
}

bool contains(const Status& s, const std::string& what) {
  return s.message().find(what) != std::string::npos;
}

}  // namespace

TEST_CASE("handshake: a control frame is length | type | payload, little-endian") {
  const std::vector<std::uint8_t> payload = {9, 8, 7};
  const auto frame = encodeFrame(kUser, payload);
  CHECK(frame == std::vector<std::uint8_t>{3, 0, 0, 0, 4, 0, 9, 8, 7});
  const FrameHeader h = decodeFrameHeader(frame.data());
  CHECK(h.payloadBytes == 3);
  CHECK(h.type == kUser);
  CHECK(encodeFrame(kHeartbeat, {}) == std::vector<std::uint8_t>{0, 0, 0, 0, 3, 0});
}

TEST_CASE("handshake: the hello's bytes are the documented layout") {
  Hello h;
  h.sender = 1;
  h.receiver = 2;
  h.incarnation = 7;
  h.backend = "ab";
  h.address = {0xEE};
  h.parts = {{"m", 0x0807060504030201ull}};
  const std::vector<std::uint8_t> want = {0x47, 0x56, 0x42, 0x53,                 // magic "GVBS"
                                          1,    0,                                // version
                                          0,    0,                                // reserved
                                          1,    0,    0,    0,                    // sender
                                          2,    0,    0,    0,                    // receiver
                                          7,    0,    0,    0,    0,    0, 0, 0,  // incarnation
                                          2,    0,    'a',  'b',                  // backend
                                          1,    0,    0,    0,    0xEE,           // address
                                          1,    0,                                // one part
                                          1,    'm',  1,    2,    3,    4, 5, 6, 7, 8};
  CHECK(encoded(h) == want);
}

TEST_CASE("handshake: hellos round-trip") {
  const Hello h = sampleHello();
  const auto bytes = encoded(h);
  auto back = decodeHello(bytes);
  REQUIRE(back.isOk());
  CHECK(back->version == kControlProtocolVersion);
  CHECK(back->sender == 3);
  CHECK(back->receiver == 5);
  CHECK(back->incarnation == h.incarnation);
  CHECK(back->backend == "tcp");
  CHECK(back->address == h.address);
  REQUIRE(back->parts.size() == 2);
  CHECK(back->parts[1].name == "compression");
  CHECK(back->parts[1].hash == 0xABCDEF0123456789ull);
  CHECK(compareHellos(*back, h).code() == ErrorCode::kFailedPrecondition);  // receiver 5 != 3

  Hello empty;
  empty.sender = 0;
  empty.receiver = 1;
  auto e = decodeHello(encoded(empty));
  REQUIRE(e.isOk());
  CHECK(e->backend.empty());
  CHECK(e->address.empty());
  CHECK(e->parts.empty());

  // Bytes after the last part are room for additions within a version: ignored.
  auto longer = bytes;
  longer.push_back(0x5A);
  CHECK(decodeHello(longer).isOk());
}

TEST_CASE("handshake: every truncation of a hello is data loss, naming what is short") {
  const auto bytes = encoded(sampleHello());
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    const std::vector<std::uint8_t> cut(bytes.begin(), bytes.begin() + static_cast<long>(n));
    auto r = decodeHello(cut);
    INFO("length " << n << ": " << r.status().toString());
    REQUIRE_FALSE(r.isOk());
    CHECK(r.status().code() == ErrorCode::kDataLoss);
    if (n < kHelloFixedBytes) {
      CHECK(contains(r.status(), "short hello"));
      CHECK_FALSE(decodeHelloPrefix(cut).isOk());
    } else {
      CHECK(contains(r.status(), "truncated hello from peer 3"));
      CHECK(decodeHelloPrefix(cut).isOk());
    }
  }
}

TEST_CASE("handshake: a bad magic is data loss") {
  const auto bytes = encoded(sampleHello());
  for (std::size_t i = 0; i < 4; ++i) {
    auto bad = bytes;
    bad[i] ^= 0x20;
    for (const Status& s : {decodeHello(bad).status(), decodeHelloPrefix(bad).status()}) {
      INFO("byte " << i << ": " << s.toString());
      CHECK(s.code() == ErrorCode::kDataLoss);
      CHECK(contains(s, "bad magic"));
    }
  }
}

TEST_CASE("handshake: another protocol version is a failed precondition naming both") {
  auto bytes = encoded(sampleHello());
  storeLe16(bytes.data() + 4, 2);
  auto r = decodeHello(bytes);
  REQUIRE_FALSE(r.isOk());
  CHECK(r.status().code() == ErrorCode::kFailedPrecondition);
  CHECK(r.status().message() == "control protocol version mismatch with peer 3: ours 1, theirs 2");
  // The fixed prefix still tells who it was.
  auto prefix = decodeHelloPrefix(bytes);
  REQUIRE(prefix.isOk());
  CHECK(prefix->version == 2);
  CHECK(prefix->sender == 3);
  CHECK(prefix->receiver == 5);
  // Only the fixed prefix of another version need be there.
  bytes.resize(kHelloFixedBytes);
  CHECK(decodeHello(bytes).status().code() == ErrorCode::kFailedPrecondition);
}

TEST_CASE("handshake: a field length running past the end is data loss, naming the field") {
  const auto bytes = encoded(sampleHello());
  const std::size_t addressLengthAt = kHelloFixedBytes + 2 + 3;
  auto bad = bytes;
  storeLe32(bad.data() + addressLengthAt, 0xFFFFFFFFu);
  auto r = decodeHello(bad);
  REQUIRE_FALSE(r.isOk());
  CHECK(r.status().code() == ErrorCode::kDataLoss);
  CHECK(contains(r.status(), "address needs 4294967295 bytes"));

  bad = bytes;
  storeLe16(bad.data() + kHelloFixedBytes, 0xFFFF);  // backend name length
  r = decodeHello(bad);
  REQUIRE_FALSE(r.isOk());
  CHECK(contains(r.status(), "backend name needs 65535 bytes"));

  bad = bytes;
  const std::size_t partsAt = addressLengthAt + 4 + sampleHello().address.size();
  storeLe16(bad.data() + partsAt, 3);  // three parts claimed, two present
  r = decodeHello(bad);
  REQUIRE_FALSE(r.isOk());
  CHECK(contains(r.status(), "config part name length"));
}

TEST_CASE("handshake: a config part named twice is data loss, naming the part") {
  // (Found by fuzz_handshake: with two hashes for one part, comparing a hello with itself failed.)
  Hello h = sampleHello();
  h.parts.push_back({"topology", 0x2222});
  auto r = decodeHello(encoded(h));
  REQUIRE_FALSE(r.isOk());
  CHECK(r.status().code() == ErrorCode::kDataLoss);
  CHECK(contains(r.status(), "config part 'topology' appears twice"));
}

TEST_CASE("handshake: fields too long for their length prefix are refused when encoding") {
  Hello h = sampleHello();
  h.backend.assign(kMaxBackendNameBytes, 'b');
  CHECK(encodeHello(h).isOk());
  h.backend.push_back('b');
  auto r = encodeHello(h);
  REQUIRE_FALSE(r.isOk());
  CHECK(r.status().code() == ErrorCode::kInvalidArgument);
  CHECK(contains(r.status(), "backend name of 65536 exceeds its limit of 65535"));

  h = sampleHello();
  h.parts.push_back({std::string(kMaxPartNameBytes, 'p'), 1});
  CHECK(encodeHello(h).isOk());
  h.parts.back().name.push_back('p');
  r = encodeHello(h);
  REQUIRE_FALSE(r.isOk());
  CHECK(r.status().code() == ErrorCode::kInvalidArgument);
  CHECK(contains(r.status(), "of 256 exceeds its limit of 255"));

  h = sampleHello();
  h.parts.assign(kMaxConfigParts + 1, ConfigPart{"x", 0});
  r = encodeHello(h);
  REQUIRE_FALSE(r.isOk());
  CHECK(r.status().code() == ErrorCode::kInvalidArgument);
  CHECK(contains(r.status(), "number of config parts"));
}

TEST_CASE("handshake: compareHellos names every difference, the same from both sides") {
  Hello a = sampleHello();
  Hello b = sampleHello();
  b.sender = a.receiver;
  b.receiver = a.sender;
  CHECK(compareHellos(a, b).isOk());
  CHECK(compareHellos(b, a).isOk());

  Hello wrongReceiver = b;
  wrongReceiver.receiver = 9;
  CHECK(compareHellos(a, wrongReceiver).message() ==
        "peer 5 expected to reach peer 9 but reached peer 3");

  Hello otherBackend = b;
  otherBackend.backend = "ucx";
  CHECK(compareHellos(a, otherBackend).message() ==
        "transport backend mismatch with peer 5: ours 'tcp', theirs 'ucx'");

  Hello parts = b;
  parts.parts = {{"compression", 0x9999}, {"model", 1}};
  const Status s = compareHellos(a, parts);
  CHECK(s.code() == ErrorCode::kFailedPrecondition);
  CHECK(s.message() ==
        "config mismatch with peer 5: part 'compression' differs (ours 0xabcdef0123456789, theirs "
        "0x0000000000009999); part 'topology' missing on peer 5; part 'model' only on peer 5");
}

TEST_CASE("handshake: protocol versions and build ids are compared first, naming the protocol") {
  Hello a = sampleHello();
  a.parts.insert(a.parts.begin(), {{"protocol.envelope", 1}, {"protocol.frame", 1}});
  a.buildId = "0.5.0+gaaaa";
  Hello b = a;
  b.sender = a.receiver;
  b.receiver = a.sender;
  b.buildId = "0.6.0+gbbbb";
  CHECK(compareHellos(a, b).isOk());  // another build with the same protocols works together

  b.parts[0].hash = 2;       // envelope version 2
  b.parts[3].hash = 0x9999;  // and a config part: the version is what is named
  const Status s = compareHellos(a, b);
  CHECK(s.code() == ErrorCode::kFailedPrecondition);
  CHECK(s.message() ==
        "envelope protocol version mismatch with peer 5: ours 1, theirs 2 (builds: ours "
        "0.5.0+gaaaa, theirs 0.6.0+gbbbb)");
  // A reject's text: nothing of ours.
  CHECK(compareHellos(a, b, /*showValues=*/false).message() ==
        "envelope protocol version mismatch with peer 5: theirs 2 (builds: theirs 0.6.0+gbbbb)");
  b.parts[0].hash = 1;
  CHECK(compareHellos(a, b, /*showValues=*/false).message() ==
        "config mismatch with peer 5: part 'compression' differs");

  // An older build without the part.
  Hello old = b;
  old.parts.erase(old.parts.begin() + 1);
  old.parts[2].hash = 0xABCDEF0123456789ull;
  old.buildId.clear();
  CHECK(compareHellos(a, old).message() ==
        "frame protocol version mismatch with peer 5: ours 1, theirs unknown (an older build) "
        "(builds: ours 0.5.0+gaaaa, theirs unknown)");

  // The build id travels in the hello's trailer, with and without a nonce.
  for (bool keyed : {false, true}) {
    Hello h = a;
    if (keyed) h.nonce.emplace().fill(7);
    auto back = decodeHello(encoded(h));
    REQUIRE(back.isOk());
    CHECK(back->buildId == "0.5.0+gaaaa");
    CHECK(back->nonce.has_value() == keyed);
    CHECK(back->runningRound == -1);  // not sent by a peer that is bootstrapping
  }

  // A training peer's hello (a neighbour rejoins it) carries its round; an out-of-range one is
  // malformed.
  Hello running = a;
  running.runningRound = 1234;
  auto back = decodeHello(encoded(running));
  REQUIRE(back.isOk());
  CHECK(back->runningRound == 1234);
  CHECK(back->buildId == "0.5.0+gaaaa");
  running.runningRound = INT64_MAX;
  CHECK(decodeHello(encoded(running)).status().code() == ErrorCode::kDataLoss);
}

TEST_CASE(
    "handshake: with a key the address, build id and round are sealed, only a key opens them") {
  const security::Key key = security::randomKey();
  Hello h = sampleHello();
  h.buildId = "0.5.0+gaaaa";
  h.runningRound = 1234;
  h.nonce = security::randomNonce();
  // Without the nonce a hello cannot be sealed.
  Hello noNonce = sampleHello();
  CHECK(encodeHello(noNonce, key).status().code() == ErrorCode::kInvalidArgument);

  const auto bytes = encodeHello(h, key);
  REQUIRE(bytes.isOk());
  const std::string raw(bytes->begin(), bytes->end());
  const std::string address(h.address.begin(), h.address.end());
  CHECK(raw.find(address) == std::string::npos);  // no address, no build id in clear
  CHECK(raw.find("0.5.0+g") == std::string::npos);
  // Every encoding draws a fresh box nonce: two encodings of one hello differ.
  CHECK(*encodeHello(h, key) != *bytes);

  // Decoding needs no key: a stranger sees the routing fields, the keyed parts and the nonce.
  auto seen = decodeHello(*bytes);
  REQUIRE(seen.isOk());
  CHECK(seen->sender == 3);
  CHECK(seen->nonce == h.nonce);
  CHECK(seen->address.empty());
  CHECK(seen->buildId.empty());
  CHECK(seen->runningRound == -1);
  CHECK(!seen->sealed.empty());
  CHECK(seen->parts.size() == h.parts.size());

  SECTION("the key opens them") {
    REQUIRE(openSealedFields(*seen, *bytes, key).isOk());
    CHECK(seen->address == h.address);
    CHECK(seen->buildId == "0.5.0+gaaaa");
    CHECK(seen->runningRound == 1234);
    CHECK(seen->sealed.empty());
    // A bootstrapping peer's hello (no round) round-trips as -1.
    Hello boot = h;
    boot.runningRound = -1;
    const auto b = *encodeHello(boot, key);
    auto back = decodeHello(b);
    REQUIRE(back.isOk());
    REQUIRE(openSealedFields(*back, b, key).isOk());
    CHECK(back->runningRound == -1);
    CHECK(back->address == h.address);
    // The seal capabilities travel in the box; the edge's cipher is AES-256-GCM only when both
    // hellos offer it (a sealed field: only key holders learn it, and nobody can strip it).
    CHECK(back->capabilities == 0);
    Hello aes = h;
    aes.capabilities = kCapabilityAesGcm;
    const auto a = *encodeHello(aes, key);
    auto aesBack = decodeHello(a);
    REQUIRE(aesBack.isOk());
    CHECK(aesBack->capabilities == 0);  // not in clear
    REQUIRE(openSealedFields(*aesBack, a, key).isOk());
    CHECK(aesBack->capabilities == kCapabilityAesGcm);
    CHECK(negotiatedCipher(aes, *aesBack) == security::Cipher::kAes256Gcm);
    CHECK(negotiatedCipher(aes, *back) == security::Cipher::kChaCha20Poly1305);
    CHECK(negotiatedCipher(*back, *aesBack) == security::Cipher::kChaCha20Poly1305);
  }
  SECTION("another key does not") {
    const Status st = openSealedFields(*seen, *bytes, security::randomKey());
    CHECK(st.code() == ErrorCode::kFailedPrecondition);
    CHECK(contains(st, "authentication failed with peer 3"));
    CHECK(contains(st, "security.key_file"));
    CHECK(seen->address.empty());
  }
  SECTION("a changed byte before the box, or in it, does not") {
    for (std::size_t at : {std::size_t{8}, seen->sealedAt - 3, bytes->size() - 20}) {
      INFO(at);
      std::vector<std::uint8_t> altered = *bytes;
      altered[at] ^= 0x01;
      auto d = decodeHello(altered);
      REQUIRE(d.isOk());
      CHECK(!openSealedFields(*d, altered, key).isOk());
    }
  }
  SECTION("a hello with the address in clear is refused under a key") {
    const auto clear = encoded(h);
    auto d = decodeHello(clear);
    REQUIRE(d.isOk());
    CHECK(d->address == h.address);
    const Status st = openSealedFields(*d, clear, key);
    CHECK(st.code() == ErrorCode::kFailedPrecondition);
    CHECK(contains(st, "data address in clear"));
  }
  SECTION("two boxes are malformed") {
    std::vector<std::uint8_t> twice = *bytes;
    twice.insert(twice.end(), bytes->begin() + static_cast<std::ptrdiff_t>(seen->sealedAt),
                 bytes->end());
    const auto d = decodeHello(twice);
    CHECK(d.status().code() == ErrorCode::kDataLoss);
    CHECK(contains(d.status(), "sealed fields appear twice"));
  }
}

TEST_CASE("handshake: user messages and rejects round-trip") {
  const std::vector<std::uint8_t> bytes = {1, 2, 3};
  const auto body = encodeUserMessage(0x1234, bytes);
  CHECK(body == std::vector<std::uint8_t>{0x34, 0x12, 1, 2, 3});
  auto m = decodeUserMessage(body);
  REQUIRE(m.isOk());
  CHECK(m->type == 0x1234);
  CHECK(std::vector<std::uint8_t>(m->bytes.begin(), m->bytes.end()) == bytes);
  auto empty = decodeUserMessage(encodeUserMessage(7, {}));
  REQUIRE(empty.isOk());
  CHECK(empty->bytes.empty());
  const std::vector<std::uint8_t> one = {7};
  CHECK(decodeUserMessage(one).status().code() == ErrorCode::kDataLoss);

  CHECK(decodeReject(encodeReject("config mismatch")) == "config mismatch");
}

// The handshake's decisions without a socket (handshake_check.h): bootstrap_auth_test runs the
// same checks through real control links.
TEST_CASE("handshake check: each verdict of a dialer's frames") {
  using Kind = HandshakeCheck::Verdict::Kind;
  Hello ours = sampleHello();
  ours.sender = 5;
  ours.receiver = 3;
  const Hello theirs = sampleHello();  // sender 3
  SECTION("without a key: an agreeing hello, another sender, another config, a reject") {
    const auto oursBytes = encoded(ours);
    HandshakeCheck check(3, std::nullopt);
    auto v = check.onFrame(kHello, encoded(theirs), ours, oursBytes, false, "e");
    CHECK(v.kind == Kind::kAgreed);
    CHECK(v.theirs.sender == 3);
    CHECK_FALSE(v.proof);
    Hello stranger = theirs;
    stranger.sender = 4;
    v = check.onFrame(kHello, encoded(stranger), ours, oursBytes, false, "e");
    CHECK(v.kind == Kind::kFailed);
    CHECK(v.tellPeer);
    CHECK(contains(v.status, "expected peer 3, but peer 4 answered"));
    Hello other = theirs;
    other.parts[1].hash ^= 1;
    v = check.onFrame(kHello, encoded(other), ours, oursBytes, false, "e");
    CHECK(v.kind == Kind::kFailed);
    CHECK(v.tellPeer);
    CHECK(v.tell.find("compression") != std::string::npos);
    v = check.onFrame(kHeartbeat, {}, ours, oursBytes, false, "e");
    CHECK(v.kind == Kind::kFailed);
    CHECK(contains(v.status, "before its hello"));
    v = check.onFrame(kReject, encodeReject("no"), ours, oursBytes, false, "e");
    CHECK(v.kind == Kind::kFailed);
    CHECK_FALSE(v.tellPeer);
    CHECK(contains(v.status, "rejected the handshake: no"));
  }
  SECTION("with a key: no nonce, a frame instead of the proof, a forged proof") {
    REQUIRE(security::initialize().isOk());
    const security::Key psk = security::randomKey();
    security::Nonce nonce{};
    security::randomBytes(nonce);
    ours.nonce = nonce;
    auto oursBytes = encodeHello(ours, psk);
    REQUIRE(oursBytes.isOk());
    HandshakeCheck check(3, psk);
    // A hello without a nonce: the other end has no key; nothing is compared or echoed.
    auto v = check.onFrame(kHello, encoded(theirs), ours, *oursBytes, false, "10.0.0.3:9");
    CHECK(v.kind == Kind::kFailed);
    CHECK(v.authFailed);
    CHECK_FALSE(v.tellPeer);
    CHECK(contains(v.status, "at 10.0.0.3:9: it sent no key proof"));
    // A keyed hello is held until its proof.
    Hello keyed = theirs;
    keyed.nonce = nonce;
    keyed.nonce->at(0) ^= 1;
    auto keyedBytes = encodeHello(keyed, psk);
    REQUIRE(keyedBytes.isOk());
    HandshakeCheck waiting(3, psk);
    CHECK(waiting.onFrame(kHello, *keyedBytes, ours, *oursBytes, false, "e").kind == Kind::kWait);
    v = waiting.onFrame(kHello, *keyedBytes, ours, *oursBytes, false, "e");
    CHECK(v.kind == Kind::kFailed);
    CHECK(contains(v.status, "instead of its key proof"));
    HandshakeCheck forged(3, psk);
    CHECK(forged.onFrame(kHello, *keyedBytes, ours, *oursBytes, false, "e").kind == Kind::kWait);
    const security::Proof wrong{};
    v = forged.onFrame(kAuth, wrong, ours, *oursBytes, false, "e");
    CHECK(v.kind == Kind::kFailed);
    CHECK(v.authFailed);
    CHECK(contains(v.status, "did not prove knowledge of the key"));
    // The right proof: agreed, with our proof to send and the session key.
    HandshakeCheck proven(3, psk);
    CHECK(proven.onFrame(kHello, *keyedBytes, ours, *oursBytes, false, "e").kind == Kind::kWait);
    auto decodedKeyed = decodeHello(*keyedBytes);
    REQUIRE(decodedKeyed.isOk());
    const security::Transcript t = transcriptOf(ours, *oursBytes, *decodedKeyed, *keyedBytes);
    v = proven.onFrame(kAuth, security::handshakeProof(psk, t, t.acceptor), ours, *oursBytes, false,
                       "e");
    CHECK(v.kind == Kind::kAgreed);
    REQUIRE(v.proof);
    CHECK(security::verifyHandshakeProof(psk, t, t.dialer, *v.proof));
    REQUIRE(v.sessionKey);
    CHECK(*v.sessionKey == security::sessionKey(psk, t));
  }
}
