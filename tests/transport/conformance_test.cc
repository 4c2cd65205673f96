// The transport conformance suite: written once, run against every backend (one ctest entry per
// backend, GRAPEVINE_TEST_BACKEND names it; see tests/transport/CMakeLists.txt). Every case also
// checks that each callback ran exactly once and never inline.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <numeric>
#include <random>
#include <thread>
#include <vector>

#include "tests/test_util/pipes.h"
#include "tests/test_util/skip.h"
#include "tests/transport/bootstrap_test_util.h"
#include "tests/transport/transport_test_util.h"

using namespace grapevine;
using namespace grapevine::transport;
using namespace grapevine::transport::testing;
using Clock = std::chrono::steady_clock;

namespace {

std::vector<std::uint8_t> pattern(std::size_t n, std::uint32_t seed) {
  std::vector<std::uint8_t> v(n);
  std::uint32_t x = seed * 2654435761u + 1;
  for (std::size_t i = 0; i < n; ++i) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    v[i] = static_cast<std::uint8_t>(x);
  }
  return v;
}

void checkProbe(const Probe& p) {
  CHECK(p.allFired());
  CHECK(p.duplicates() == 0);
  CHECK(p.inlineCalls() == 0);
}

// Blocking helpers for the forked-peer test: length-prefixed blobs over a pipe.
using test_util::readBlob;
using test_util::writeBlob;

}  // namespace

TEST_CASE("message sizes 0 B to 64 MiB arrive intact, both directions", "[conformance]") {
  Pair p;
  const std::vector<std::size_t> sizes = {0, 1, 13, 64 << 10, 4 << 20, 64 << 20};
  Probe probe;
  // Buffers are allocated once, before any traffic.
  std::vector<std::vector<std::uint8_t>> out, back, in, inBack;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    out.push_back(pattern(sizes[i], static_cast<std::uint32_t>(i)));
    back.push_back(
        pattern(sizes[i] < (1 << 20) ? sizes[i] : 0, static_cast<std::uint32_t>(100 + i)));
    in.emplace_back(sizes[i] + 1, 0xEE);  // one spare byte: the count must be exact
    inBack.emplace_back(back.back().size() + 1, 0xEE);
  }
  probe.inApi = true;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    const Tag tag = 1000 + i;
    // Even sizes: receive posted first; odd: send first.
    if (i % 2 == 0) p.c10->recv(tag, in[i], probe.recv(static_cast<int>(10 + i)));
    p.c01->send(tag, out[i], probe.send(static_cast<int>(20 + i)));
    if (i % 2 == 1) p.c10->recv(tag, in[i], probe.recv(static_cast<int>(10 + i)));
    p.c10->send(tag, back[i], probe.send(static_cast<int>(30 + i)));
    p.c01->recv(tag, inBack[i], probe.recv(static_cast<int>(40 + i)));
  }
  probe.inApi = false;
  REQUIRE(p.runUntil([&] { return probe.allFired(); }, 20.0));
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    INFO("size " << sizes[i]);
    REQUIRE(probe.at(static_cast<int>(20 + i)).status.isOk());
    REQUIRE(probe.at(static_cast<int>(10 + i)).status.isOk());
    CHECK(probe.at(static_cast<int>(10 + i)).bytes == sizes[i]);
    CHECK(
        std::equal(out[i].begin(), out[i].end(), in[i].begin()));  // memcmp(nullptr, ..., 0) is UB
    CHECK(in[i][sizes[i]] == 0xEE);  // nothing written past the message
    REQUIRE(probe.at(static_cast<int>(40 + i)).status.isOk());
    CHECK(probe.at(static_cast<int>(40 + i)).bytes == back[i].size());
    CHECK(std::equal(back[i].begin(), back[i].end(), inBack[i].begin()));
  }
  checkProbe(probe);
}

TEST_CASE("bytesArrived counts the messages that arrived, and only on the receiving side",
          "[conformance]") {
  // The engine takes a neighbour's last messages before the close that followed them by watching
  // this count (NeighbourLinks::stillArriving); a backend that left it at 0 lost them at the end of
  // a run (a neighbour declared dead in its last round, seen with inproc).
  Pair p;
  const std::uint64_t before10 = p.c10->bytesArrived();
  const std::uint64_t before01 = p.c01->bytesArrived();
  const std::vector<std::size_t> sizes = {13, 64 << 10, 1 << 20};
  std::vector<std::vector<std::uint8_t>> out, in;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    out.push_back(pattern(sizes[i], static_cast<std::uint32_t>(i)));
    in.emplace_back(sizes[i]);
  }
  Probe probe;
  probe.inApi = true;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    p.c10->recv(500 + i, in[i], probe.recv(static_cast<int>(i)));
    p.c01->send(500 + i, out[i], probe.send(static_cast<int>(10 + i)));
  }
  probe.inApi = false;
  REQUIRE(p.runUntil([&] { return probe.allFired(); }, 20.0));
  std::uint64_t total = 0;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    REQUIRE(probe.at(static_cast<int>(i)).status.isOk());
    total += sizes[i];
  }
  // Framing may add its headers; never fewer than the messages' bytes.
  CHECK(p.c10->bytesArrived() - before10 >= total);
  CHECK(p.c10->bytesArrived() - before10 < total + 4096);
  CHECK(p.c01->bytesArrived() == before01);  // nothing came back
  checkProbe(probe);
}

TEST_CASE("messages with the same tag arrive in send order; tags do not mix", "[conformance]") {
  Pair p;
  constexpr int kTags = 4, kPerTag = 100;
  std::vector<std::uint32_t> sent(kTags * kPerTag), got(kTags * kPerTag, 0xFFFFFFFF);
  Probe probe;
  probe.inApi = true;
  // Half the receives before the sends, half after; sizes vary so frames interleave on the wire.
  for (int t = 0; t < kTags; ++t) {
    for (int i = 0; i < kPerTag / 2; ++i) {
      const int k = t * kPerTag + i;
      p.c10->recv(7 + t, std::span(reinterpret_cast<std::uint8_t*>(&got[k]), 4), probe.recv(k));
    }
  }
  for (int i = 0; i < kPerTag; ++i) {
    for (int t = 0; t < kTags; ++t) {
      const int k = t * kPerTag + i;
      sent[k] = static_cast<std::uint32_t>(t << 16 | i);
      p.c01->send(7 + t, std::span(reinterpret_cast<const std::uint8_t*>(&sent[k]), 4),
                  probe.send(100000 + k));
    }
  }
  for (int t = 0; t < kTags; ++t) {
    for (int i = kPerTag / 2; i < kPerTag; ++i) {
      const int k = t * kPerTag + i;
      p.c10->recv(7 + t, std::span(reinterpret_cast<std::uint8_t*>(&got[k]), 4), probe.recv(k));
    }
  }
  probe.inApi = false;
  REQUIRE(p.runUntil([&] { return probe.allFired(); }));
  for (int k = 0; k < kTags * kPerTag; ++k) {
    INFO("message " << k);
    REQUIRE(probe.at(k).status.isOk());
    REQUIRE(got[k] == sent[k]);
  }
  checkProbe(probe);
}

TEST_CASE("many operations in flight at once", "[conformance]") {
  Pair p;
  constexpr int kOps = 2000;
  constexpr std::size_t kBytes = 1024;
  std::vector<std::uint8_t> out = pattern(kOps * kBytes, 9), in(kOps * kBytes, 0);
  Probe probe;
  probe.inApi = true;
  for (int i = 0; i < kOps; ++i) {
    const Tag tag = static_cast<Tag>(i % 16);
    p.c01->send(tag, std::span(out.data() + i * kBytes, kBytes), probe.send(i));
  }
  // Receives per tag in order: message i of tag t is the (i/16)-th with that tag.
  for (int i = 0; i < kOps; ++i) {
    const Tag tag = static_cast<Tag>(i % 16);
    p.c10->recv(tag, std::span(in.data() + i * kBytes, kBytes), probe.recv(kOps + i));
  }
  probe.inApi = false;
  REQUIRE(p.runUntil([&] { return probe.allFired(); }));
  for (int i = 0; i < 2 * kOps; ++i) REQUIRE(probe.at(i).status.isOk());
  CHECK(in == out);
  checkProbe(probe);
}

TEST_CASE("a receive posted before or after its send both work, also after a delay",
          "[conformance]") {
  Pair p;
  std::vector<std::uint8_t> a = pattern(100, 1), b = pattern(100, 2), ra(100), rb(100);
  Probe probe;
  probe.inApi = true;
  p.c10->recv(1, ra, probe.recv(1));
  probe.inApi = false;
  // Let the loop idle with the receive posted and nothing sent.
  p.runUntil([] { return false; }, 0.05);
  CHECK(!probe.fired(1));
  probe.inApi = true;
  p.c01->send(1, a, probe.send(2));
  p.c01->send(2, b, probe.send(3));
  probe.inApi = false;
  // Message on tag 2 arrives unexpected; it is buffered until the receive is posted.
  REQUIRE(p.runUntil([&] { return probe.fired(1) && probe.fired(2) && probe.fired(3); }));
  p.runUntil([] { return false; }, 0.05);
  probe.inApi = true;
  p.c10->recv(2, rb, probe.recv(4));
  probe.inApi = false;
  REQUIRE(p.runUntil([&] { return probe.allFired(); }));
  CHECK(ra == a);
  CHECK(rb == b);
  CHECK(probe.at(4).bytes == 100);
  checkProbe(probe);
}

TEST_CASE("messages of every size that come before their receive arrive intact, in order",
          "[conformance]") {
  // Sizes around the backends' protocol switches (ofi_rxm: eager up to 16 KiB, rendezvous above;
  // ucx: eager, then rendezvous): each waits in the backend's or the library's queue for a
  // receive (tagged/early_queue.h), and a tag's messages still come in send order.
  Pair p;
  const std::vector<std::size_t> sizes = {
      0, 100, 16384, 16385, 65536, 131073, std::size_t{1} << 20};
  const int n = static_cast<int>(sizes.size());
  std::vector<std::vector<std::uint8_t>> out, in;
  for (int i = 0; i < 2 * n; ++i) {
    out.push_back(pattern(sizes[i % n], 50 + i));
    in.emplace_back(sizes[i % n] + 8);  // room to spare: the length received is checked
  }
  Probe probe;
  probe.inApi = true;
  for (int i = 0; i < n; ++i) p.c01->send(3, out[i], probe.send(100 + i));           // tag 3
  for (int i = 2 * n - 1; i >= n; --i) p.c01->send(4, out[i], probe.send(100 + i));  // tag 4
  probe.inApi = false;
  // The small ones complete without a receive; let the rest reach the receiver's side too.
  REQUIRE(p.runUntil([&] { return probe.fired(100) && probe.fired(101); }));
  p.runUntil([] { return false; }, 0.2);
  probe.inApi = true;
  for (int i = 2 * n - 1; i >= n; --i) p.c10->recv(4, in[i], probe.recv(i));
  for (int i = 0; i < n; ++i) p.c10->recv(3, in[i], probe.recv(i));
  probe.inApi = false;
  REQUIRE(p.runUntil([&] { return probe.allFired(); }));
  for (int i = 0; i < 2 * n; ++i) {
    INFO("message " << i << " of " << sizes[i % n] << " bytes");
    REQUIRE(probe.at(i).status.isOk());
    CHECK(probe.at(i).bytes == sizes[i % n]);
    CHECK(std::equal(out[i].begin(), out[i].end(), in[i].begin()));
  }
  CHECK(p.c10->error().isOk());
  checkProbe(probe);
}

TEST_CASE("a message larger than the posted receive fails that receive only", "[conformance]") {
  Pair p;
  std::vector<std::uint8_t> big = pattern(1000, 3), small(10), next = pattern(10, 4), rnext(10);
  Probe probe;
  probe.inApi = true;
  p.c10->recv(5, small, probe.recv(1));
  p.c01->send(5, big, probe.send(2));
  p.c01->send(5, next, probe.send(3));
  p.c10->recv(5, rnext, probe.recv(4));
  probe.inApi = false;
  REQUIRE(p.runUntil([&] { return probe.allFired(); }));
  CHECK(probe.at(1).status.code() == ErrorCode::kResourceExhausted);
  CHECK(probe.at(4).status.isOk());
  CHECK(rnext == next);
  CHECK(p.c10->error().isOk());
  checkProbe(probe);
}

TEST_CASE("a message above maxMessageBytes is refused at send", "[conformance]") {
  Options o = testOptions();
  o.maxMessageBytes = 1024;
  Pair p(o);
  std::vector<std::uint8_t> big(2048), ok = pattern(1024, 5), r(1024);
  Probe probe;
  probe.inApi = true;
  p.c01->send(1, big, probe.send(1));
  p.c01->send(1, ok, probe.send(2));
  p.c10->recv(1, r, probe.recv(3));
  probe.inApi = false;
  REQUIRE(p.runUntil([&] { return probe.allFired(); }));
  CHECK(probe.at(1).status.code() == ErrorCode::kResourceExhausted);
  CHECK(probe.at(2).status.isOk());
  CHECK(probe.at(3).bytes == 1024);
  CHECK(r == ok);
  checkProbe(probe);
}

TEST_CASE("close() completes pending operations with cancelled; the peer sees unavailable",
          "[conformance]") {
  Pair p;
  p.warmUp();
  std::vector<std::uint8_t> r1(64), r2(64), r3(64), s(64), big(8 << 20);
  Probe probe;
  probe.inApi = true;
  p.c01->recv(1, r1, probe.recv(1));
  p.c01->recv(2, r2, probe.recv(2));
  p.c01->send(3, big, probe.send(3));  // may or may not have left: ok or cancelled, exactly once
  p.c10->recv(4, r3, probe.recv(4));   // the peer's pending receive
  p.c01->close();
  p.c01->close();                    // idempotent
  p.c01->send(5, s, probe.send(5));  // after close
  p.c01->recv(6, r1, probe.recv(6));
  probe.inApi = false;
  const auto t0 = Clock::now();
  REQUIRE(p.runUntil([&] { return probe.allFired(); }, 5.0));
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  CHECK(probe.at(1).status.code() == ErrorCode::kCancelled);
  CHECK(probe.at(2).status.code() == ErrorCode::kCancelled);
  CHECK((probe.at(3).status.isOk() || probe.at(3).status.code() == ErrorCode::kCancelled));
  CHECK(probe.at(5).status.code() == ErrorCode::kCancelled);
  CHECK(probe.at(6).status.code() == ErrorCode::kCancelled);
  CHECK(p.c01->error().code() == ErrorCode::kCancelled);
  // The peer learns the link is gone; its pending receive fails with "unavailable".
  CHECK(probe.at(4).status.code() == ErrorCode::kUnavailable);
  CHECK(seconds < 2.0);
  checkProbe(probe);
}

TEST_CASE("closing the context fails pending operations of every connection", "[conformance]") {
  Pair p;
  p.warmUp();
  std::vector<std::uint8_t> r(16), r2(16);
  Probe probe;
  probe.inApi = true;
  p.c01->recv(1, r, probe.recv(1));
  p.c10->recv(1, r2, probe.recv(2));
  p.ctx0->close();
  probe.inApi = false;
  REQUIRE(p.runUntil([&] { return probe.allFired(); }, 5.0));
  CHECK(probe.at(1).status.code() == ErrorCode::kCancelled);
  CHECK(probe.at(2).status.code() == ErrorCode::kUnavailable);
  checkProbe(probe);
}

TEST_CASE("a peer process killed with SIGKILL: pending operations fail with unavailable within 2 s",
          "[conformance]") {
  const Options base = testOptions();
  if (base.backend == "inproc") {
    // inproc peers share one process by definition; the closest thing (peer context gone) is
    // covered by the close tests above. Say so instead of passing silently.
    GV_SKIP("inproc: a peer in another process does not apply; covered by the close/context tests");
  }
  int toChild[2], toParent[2];
  REQUIRE(::pipe(toChild) == 0);
  REQUIRE(::pipe(toParent) == 0);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    // The peer: rank 1. Connects, sends one message, then idles on its loop until killed.
    ::close(toChild[1]);
    ::close(toParent[0]);
    Loop loop;
    Options o = base;
    o.rank = 1;
    auto ctx = makeContext(loop, o);
    if (!ctx.isOk()) ::_exit(3);
    if (!writeBlob(toParent[1], (*ctx)->localAddress())) ::_exit(4);
    const std::vector<std::uint8_t> theirs = readBlob(toChild[0]);
    if (theirs.empty()) ::_exit(5);
    auto conn = (*ctx)->connect(0, theirs);
    if (!conn.isOk()) ::_exit(7);
    static const std::uint8_t hello[5] = {'h', 'e', 'l', 'l', 'o'};
    (*conn)->send(1, hello, [](Status) {});
    loop.runUntil([] { return false; }, std::chrono::seconds(30));
    ::_exit(0);
  }
  ::close(toChild[0]);
  ::close(toParent[1]);
  Loop loop;
  Options o = base;
  o.rank = 0;
  auto ctx = makeContext(loop, o);
  REQUIRE(ctx.isOk());
  const auto theirs = readBlob(toParent[0]);
  REQUIRE(!theirs.empty());
  REQUIRE(writeBlob(toChild[1], (*ctx)->localAddress()));
  auto conn = (*ctx)->connect(1, theirs);
  REQUIRE(conn.isOk());
  Probe probe;
  std::vector<std::uint8_t> hello(5), r(64), r2(64);
  probe.inApi = true;
  (*conn)->recv(1, hello, probe.recv(1));
  probe.inApi = false;
  REQUIRE(loop.runUntil([&] { return probe.fired(1); }, std::chrono::seconds(10)));
  REQUIRE(probe.at(1).status.isOk());
  probe.inApi = true;
  (*conn)->recv(2, r, probe.recv(2));
  (*conn)->recv(3, r2, probe.recv(3));
  probe.inApi = false;
  loop.runUntil([] { return false; }, std::chrono::milliseconds(50));
  REQUIRE(::kill(child, SIGKILL) == 0);
  const auto t0 = Clock::now();
  REQUIRE(loop.runUntil([&] { return probe.allFired(); }, std::chrono::seconds(5)));
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  int status = 0;
  ::waitpid(child, &status, 0);
  CHECK(WIFSIGNALED(status));
  CHECK(probe.at(2).status.code() == ErrorCode::kUnavailable);
  CHECK(probe.at(3).status.code() == ErrorCode::kUnavailable);
  CHECK((*conn)->error().code() == ErrorCode::kUnavailable);
  CHECK(seconds < 2.0);
  // Later operations fail at once with the sticky error.
  probe.inApi = true;
  (*conn)->send(4, r, probe.send(4));
  probe.inApi = false;
  REQUIRE(loop.runUntil([&] { return probe.allFired(); }, std::chrono::seconds(1)));
  CHECK(probe.at(4).status.code() == ErrorCode::kUnavailable);
  checkProbe(probe);
  (*ctx)->close();
  ::close(toChild[1]);
  ::close(toParent[0]);
  loop.runUntil([] { return false; }, std::chrono::milliseconds(10));
}

TEST_CASE("an idle loop sleeps instead of spinning", "[conformance]") {
  Pair p;
  // Once the link is up: the tagged backends announce each connection (goodbye.h), and libfabric's
  // rxm progresses its connection setup by polling until the first message got through.
  p.warmUp();
  std::vector<std::uint8_t> r(8);
  Probe probe;
  p.c10->recv(1, r, probe.recv(1));  // pending: the loop has something to wait for
  std::clock_t c0 = std::clock();
  const auto t0 = Clock::now();
  p.runUntil([] { return false; }, 0.3);
  const double cpu = double(std::clock() - c0) / CLOCKS_PER_SEC;
  const double wall = std::chrono::duration<double>(Clock::now() - t0).count();
  INFO("cpu " << cpu << " s over " << wall << " s");
  CHECK(cpu < 0.1 * wall);
  p.c10->close();
  REQUIRE(p.runUntil([&] { return probe.allFired(); }));
}

// ---- bootstrap over this backend ----------------------------------------------------------------

TEST_CASE("bootstrap: a ring of three peers handshakes and connects the data backend",
          "[conformance]") {
  Cluster c(testOptions(), {{1, 2}, {0, 2}, {0, 1}},
            {standardParts(), standardParts(), standardParts()});
  REQUIRE(c.run(10.0));
  for (int r = 0; r < 3; ++r) {
    INFO("rank " << r);
    REQUIRE(c.results[r]->isOk());
    const auto& nbs = c.results[r]->value();
    REQUIRE(nbs.size() == 2);
    for (const Neighbour& nb : nbs) {
      CHECK(nb.incarnation == 100u + nb.peer);
      CHECK(nb.data->peer() == nb.peer);
      CHECK(nb.control->peer() == nb.peer);
    }
  }
  // Data flows over every edge of the data backend, both directions.
  Probe probe;
  std::vector<std::vector<std::uint8_t>> in(6, std::vector<std::uint8_t>(4));
  std::vector<std::vector<std::uint8_t>> out;
  int id = 0;
  for (int r = 0; r < 3; ++r) {
    for (const Neighbour& nb : c.results[r]->value()) {
      out.push_back({std::uint8_t(r), std::uint8_t(nb.peer), 7, 7});
    }
  }
  int k = 0;
  for (int r = 0; r < 3; ++r) {
    for (const Neighbour& nb : c.results[r]->value()) {
      nb.data->send(9, out[k], probe.send(100 + id++));
      nb.data->recv(9, in[k], probe.recv(100 + id++));
      ++k;
    }
  }
  REQUIRE(c.loop.runUntil([&] { return probe.allFired(); }, std::chrono::seconds(10)));
  k = 0;
  for (int r = 0; r < 3; ++r) {
    for (const Neighbour& nb : c.results[r]->value()) {
      CHECK(in[k][0] == nb.peer);  // sent by the neighbour
      CHECK(in[k][1] == r);        // to us
      ++k;
    }
  }
  checkProbe(probe);
  // Control messages reach the neighbour's onMessage.
  const std::uint8_t note[3] = {1, 2, 3};
  REQUIRE(c.results[0]->value()[0].control->send(42, note).isOk());
  REQUIRE(c.loop.runUntil([&] { return !c.messages.empty(); }, std::chrono::seconds(5)));
  CHECK(std::get<0>(c.messages[0]) == 1);
  CHECK(std::get<1>(c.messages[0]) == 0);
  CHECK(std::get<2>(c.messages[0]) == 42);
  CHECK(std::get<3>(c.messages[0]) == std::vector<std::uint8_t>{1, 2, 3});
  CHECK(c.events.empty());
}

TEST_CASE("bootstrap: a config-hash mismatch is an explicit error on both sides, naming the part",
          "[conformance]") {
  auto other = standardParts();
  other[2].hash = 0x9999;  // compression differs
  const auto t0 = Clock::now();
  Cluster c(testOptions(), {{1}, {0}}, {standardParts(), other});
  REQUIRE(c.run(5.0));
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  for (int r = 0; r < 2; ++r) {
    INFO("rank " << r);
    REQUIRE(!c.results[r]->isOk());
    const std::string m = c.results[r]->status().message();
    INFO(m);
    CHECK(m.find("config mismatch") != std::string::npos);
    CHECK(m.find("'compression'") != std::string::npos);
    CHECK(m.find("'topology'") == std::string::npos);
  }
  CHECK(seconds < 1.0);
}

TEST_CASE("streaming with a window of sends and receives in flight", "[conformance]") {
  Pair p;
  const std::size_t sizes[] = {13, 64 << 10, 100 << 10, 1 << 20};
  for (std::size_t size : sizes) {
    INFO("size " << size);
    const int count =
        static_cast<int>(std::clamp<std::size_t>((std::size_t{32} << 20) / size, 16, 20000));
    constexpr int kWindow = 4;
    std::vector<std::uint8_t> out = pattern(size, 77);
    std::vector<std::vector<std::uint8_t>> in(kWindow, std::vector<std::uint8_t>(size));
    int sent = 0, completed = 0, posted = 0, got = 0, errors = 0, mismatches = 0;
    std::function<void()> pump = [&] {
      while (sent < count && sent - completed < kWindow) {
        ++sent;
        p.c01->send(50, out, [&](Status s) {
          errors += !s.isOk();
          ++completed;
          pump();
        });
      }
    };
    std::function<void()> postOne = [&] {
      auto& buf = in[static_cast<std::size_t>(posted++) % kWindow];
      p.c10->recv(50, buf, [&](Status s, std::size_t n) {
        errors += !s.isOk();
        mismatches += (n != size || buf != out);
        ++got;
        if (posted < count) postOne();
      });
    };
    for (int i = 0; i < kWindow; ++i) postOne();
    pump();
    REQUIRE(p.runUntil([&] { return got == count && completed == count; }, 20.0));
    CHECK(errors == 0);
    CHECK(mismatches == 0);
  }
}

TEST_CASE("receives posted at random moments while large messages are arriving", "[conformance]") {
  // Regression: a receive posted while an unexpected message was still arriving used to wait
  // forever behind it (tcp). The sender runs on its own loop thread so bodies arrive in pieces, and
  // receives are posted after random small delays, so every interleaving is likely.
  const Options base = testOptions();
  Loop sendLoop, recvLoop;
  Options o = base;
  o.rank = 0;
  auto ctx0 = makeContext(sendLoop, o);
  o.rank = 1;
  auto ctx1 = makeContext(recvLoop, o);
  REQUIRE((ctx0.isOk() && ctx1.isOk()));
  auto c01 = (*ctx0)->connect(1, (*ctx1)->localAddress());
  auto c10 = (*ctx1)->connect(0, (*ctx0)->localAddress());
  REQUIRE((c01.isOk() && c10.isOk()));
  constexpr int kCount = 400;
  constexpr int kWindow = 2;  // a short backlog: the unexpected queue often runs empty
  constexpr std::size_t kSize = 256 << 10;
  // Message k carries k in its first bytes: order and content are both checked.
  std::vector<std::vector<std::uint8_t>> out(kCount, pattern(kSize, 11));
  for (int k = 0; k < kCount; ++k) std::memcpy(out[k].data(), &k, sizeof k);
  std::vector<std::uint8_t> in(kSize);
  std::atomic<int> completed{0}, sendErrors{0};
  int sent = 0;
  std::function<void()> pump = [&] {
    while (sent < kCount && sent - completed.load() < kWindow) {
      ++sent;
      (*c01)->send(3, out[static_cast<std::size_t>(sent - 1)], [&](Status s) {
        sendErrors += !s.isOk();
        ++completed;
        pump();
      });
    }
  };
  pump();
  std::thread sender([&] {
    sendLoop.runUntil([&] { return completed.load() == kCount; }, std::chrono::seconds(20));
  });
  std::mt19937 rng(1234);
  std::uniform_int_distribution<int> delayUs(0, 300);
  int got = 0, errors = 0, mismatches = 0;
  std::function<void()> postLater = [&] {
    recvLoop.after(std::chrono::microseconds(delayUs(rng)), [&] {
      (*c10)->recv(3, in, [&](Status s, std::size_t n) {
        errors += !s.isOk();
        mismatches += (n != kSize || in != out[static_cast<std::size_t>(got)]);
        if (++got < kCount) postLater();
      });
    });
  };
  postLater();
  const bool ok = recvLoop.runUntil([&] { return got == kCount; }, std::chrono::seconds(20));
  sender.join();
  CHECK(ok);
  CHECK(completed.load() == kCount);
  CHECK(sendErrors.load() == 0);
  CHECK(errors == 0);
  CHECK(mismatches == 0);
  (*ctx1)->close();
  recvLoop.runUntil([] { return false; }, std::chrono::milliseconds(10));
  (*ctx0)->close();
  sendLoop.runUntil([] { return false; }, std::chrono::milliseconds(10));
}
