// The link model on a virtual clock: rate, queue, latency, jitter without reordering, loss, and the
// address scheme. Needs no privileges.
#include "runtime/netemu/link_model.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>

#include "runtime/netemu/emulator.h"

using namespace grapevine::netemu;

namespace {
constexpr std::int64_t kMs = 1000000;
}

TEST_CASE("rate: back-to-back packets leave one serialisation time apart") {
  LinkSpec spec;
  spec.bandwidthMbit = 10;  // 1250 bytes = 10000 bits = 1 ms
  spec.latencyMs = 5;
  LinkModel link(spec, 10 << 20, 1);
  std::int64_t last = 0;
  for (int i = 0; i < 100; ++i) {
    const Decision d = link.admit(0, 1250);
    REQUIRE(d.verdict == Verdict::kDeliver);
    CHECK(d.deliverAtNs == (i + 1) * kMs + 5 * kMs);
    last = d.deliverAtNs;
  }
  CHECK(link.queuedBytes(0) == 100 * 1250);
  CHECK(link.queuedBytes(50 * kMs) == 50 * 1250);
  // An idle link serialises a new packet from "now", not from its old busy time.
  const Decision later = link.admit(last + 100 * kMs, 1250);
  CHECK(later.deliverAtNs == last + 100 * kMs + 1 * kMs + 5 * kMs);
}

TEST_CASE("queue: tail drop beyond the queue, room again once it drains") {
  LinkSpec spec;
  spec.bandwidthMbit = 8;  // 1 byte per microsecond
  LinkModel link(spec, 10000, 1);
  int admitted = 0, dropped = 0;
  for (int i = 0; i < 20; ++i) {
    const Decision d = link.admit(0, 1000);
    (d.verdict == Verdict::kDeliver ? admitted : dropped)++;
    if (d.verdict != Verdict::kDeliver) CHECK(d.verdict == Verdict::kDropQueue);
  }
  CHECK(admitted == 10);
  CHECK(dropped == 10);
  // 3 ms later 3000 bytes have left: three more fit, the fourth does not.
  for (int i = 0; i < 3; ++i) CHECK(link.admit(3 * kMs, 1000).verdict == Verdict::kDeliver);
  CHECK(link.admit(3 * kMs, 1000).verdict == Verdict::kDropQueue);
}

TEST_CASE("auto queue is max(64 KiB, 2 x bandwidth-delay product)") {
  CHECK(autoQueueBytes({0, 50, 0, 0}) == 64 * 1024);
  CHECK(autoQueueBytes({10, 1, 0, 0}) == 64 * 1024);
  // 100 Mbit/s, 40 ms one way: RTT 80 ms, BDP 1 MB, queue 2 MB.
  CHECK(autoQueueBytes({100, 40, 0, 0}) == 2000000);
  LinkModel link({100, 40, 0, 0}, 0, 1);
  CHECK(link.queueLimit() == 2000000);
}

TEST_CASE("unlimited link: pure delay, no queue") {
  LinkModel link({0, 40, 0, 0}, 0, 1);
  for (int i = 0; i < 1000; ++i) {
    const Decision d = link.admit(i, 65000);
    REQUIRE(d.verdict == Verdict::kDeliver);
    CHECK(d.deliverAtNs == i + 40 * kMs);
  }
}

TEST_CASE("jitter spreads delays within bounds and never reorders") {
  LinkModel link({0, 20, 10, 0}, 0, 7);
  std::int64_t prev = 0, minDelay = INT64_MAX, maxDelay = 0;
  for (int i = 0; i < 5000; ++i) {
    const std::int64_t now = i * 25 * kMs;  // further apart than the jitter range: FIFO never binds
    const Decision d = link.admit(now, 100);
    REQUIRE(d.verdict == Verdict::kDeliver);
    REQUIRE(d.deliverAtNs >= prev);
    prev = d.deliverAtNs;
    minDelay = std::min(minDelay, d.deliverAtNs - now);
    maxDelay = std::max(maxDelay, d.deliverAtNs - now);
  }
  // network.jitter_ms adds [0, jitter] to the latency (runtime/common/jitter.h): 20..30 ms.
  CHECK(minDelay >= 20 * kMs);
  CHECK(minDelay < 21 * kMs);
  CHECK(maxDelay <= 30 * kMs);
  CHECK(maxDelay > 29 * kMs);
  // Back to back, FIFO binds: deliveries stay ordered even though draws would reorder them.
  LinkModel burst({0, 20, 10, 0}, 0, 7);
  prev = 0;
  for (int i = 0; i < 1000; ++i) {
    const Decision d = burst.admit(i * 1000, 100);
    REQUIRE(d.deliverAtNs >= prev);
    prev = d.deliverAtNs;
  }
  // Jitter larger than the latency only adds: the latency stays the floor.
  LinkModel floor({0, 1, 5, 0}, 0, 3);
  for (int i = 0; i < 1000; ++i)
    CHECK(floor.admit(i * 100 * kMs, 100).deliverAtNs >= i * 100 * kMs + 1 * kMs);
}

TEST_CASE("loss: the fraction matches and a seed repeats its draws") {
  const std::uint64_t seed = linkSeed(42, 0, 1);
  INFO("seed " << seed);
  LinkModel a({0, 0, 0, 20}, 0, seed), b({0, 0, 0, 20}, 0, seed), c({0, 0, 0, 20}, 0, seed + 1);
  int lost = 0, differ = 0;
  const int n = 100000;
  for (int i = 0; i < n; ++i) {
    const Verdict va = a.admit(i, 100).verdict, vb = b.admit(i, 100).verdict,
                  vc = c.admit(i, 100).verdict;
    REQUIRE(va == vb);
    lost += va == Verdict::kDropLoss;
    differ += va != vc;
  }
  CHECK(std::abs(lost / double(n) - 0.2) < 0.01);
  CHECK(differ > n / 10);
  CHECK(linkSeed(42, 0, 1) != linkSeed(42, 1, 0));
  CHECK(linkSeed(42, 0, 1) != linkSeed(43, 0, 1));
}

TEST_CASE("address scheme: 10.77.<r/250>.<r%250+1>, distinct and invertible") {
  CHECK(rankAddress(0) == "10.77.0.1");
  CHECK(rankAddress(249) == "10.77.0.250");
  CHECK(rankAddress(250) == "10.77.1.1");
  CHECK(rankAddress(999) == "10.77.3.250");
  auto parse = [](const std::string& s) {
    unsigned a, b, c, d;
    REQUIRE(std::sscanf(s.c_str(), "%u.%u.%u.%u", &a, &b, &c, &d) == 4);
    return (a << 24) | (b << 16) | (c << 8) | d;
  };
  for (int r = 0; r < 1000; ++r) REQUIRE(rankOfAddress(parse(rankAddress(r)), 1000) == r);
  CHECK(rankOfAddress(parse("10.77.0.1"), 1) == 0);
  CHECK(rankOfAddress(parse("10.77.0.2"), 1) == -1);  // rank 1 of a 1-peer network
  CHECK(rankOfAddress(parse("10.77.0.0"), 1000) == -1);
  CHECK(rankOfAddress(parse("10.77.0.251"), 1000) == -1);
  CHECK(rankOfAddress(parse("10.78.0.1"), 1000) == -1);
  CHECK(rankOfAddress(parse("127.0.0.1"), 1000) == -1);
}
