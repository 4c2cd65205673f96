// The emulator's path model on a virtual clock: per-node interface caps
// (network.node_bandwidth_mbit) composed with per-link caps. Rates are measured in bytes per
// emulated second from the model's own delivery times, never on the wall clock. Needs no
// privileges.
#include "runtime/netemu/path_model.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>
#include <map>
#include <vector>

using namespace grapevine::netemu;

namespace {

constexpr std::int64_t kMs = 1000000;
constexpr std::int64_t kSecond = 1000 * kMs;
constexpr std::size_t kPacket = 1500;

PathModel makePaths(int peers, LinkSpec link, double nodeMbit, std::uint64_t seed = 1) {
  PathOptions o;
  o.peers = peers;
  o.link = [link](int, int) { return link; };
  if (nodeMbit > 0) o.nodeBandwidthMbit = [nodeMbit](int) { return nodeMbit; };
  o.seed = seed;
  return PathModel(o);
}

struct Flow {
  int from, to;
};

struct Delivered {
  std::map<std::pair<int, int>, double> bytes;  // per link, delivered within the window
  std::uint64_t drops = 0;
  double total(int node, bool outgoing) const {
    double t = 0;
    for (const auto& [link, b] : bytes) {
      if ((outgoing ? link.first : link.second) == node) t += b;
    }
    return t;
  }
};

// Every flow offers `offerMbit` of back-to-back 1500-byte packets for `seconds` of emulated time
// (more than the caps take: queues fill, tail drop sheds the rest, as for a greedy sender).
// Packets pass send() in time order, then receive() in arrival order, as the emulator's heap
// hands them over. Counts the bytes delivered by the end of the offered period.
Delivered run(PathModel& paths, const std::vector<Flow>& flows, double offerMbit, int seconds) {
  const std::int64_t gapNs = static_cast<std::int64_t>(kPacket * 8 * 1e3 / offerMbit);
  const std::int64_t endNs = seconds * kSecond;
  struct InFlight {
    std::int64_t arriveNs;
    std::uint64_t seq;
    int from, to;
  };
  std::vector<InFlight> arriving;
  Delivered out;
  std::uint64_t seq = 0;
  std::size_t tick = 0;
  for (std::int64_t now = 0; now < endNs; now += gapNs, ++tick) {
    for (std::size_t k = 0; k < flows.size(); ++k) {
      const Flow& f = flows[(tick + k) % flows.size()];  // no flow always first at a full queue
      const Decision d = paths.send(now, f.from, f.to, kPacket);
      if (d.verdict != Verdict::kDeliver) {
        ++out.drops;
        continue;
      }
      arriving.push_back({d.deliverAtNs, seq++, f.from, f.to});
    }
  }
  std::sort(arriving.begin(), arriving.end(), [](const InFlight& a, const InFlight& b) {
    return a.arriveNs != b.arriveNs ? a.arriveNs < b.arriveNs : a.seq < b.seq;
  });
  for (const InFlight& p : arriving) {
    std::int64_t at = p.arriveNs;
    if (paths.ingressLimited(p.to)) {
      const Decision d = paths.receive(p.arriveNs, p.from, p.to, kPacket);
      if (d.verdict != Verdict::kDeliver) {
        ++out.drops;
        continue;
      }
      at = d.deliverAtNs;
    }
    if (at <= endNs) out.bytes[{p.from, p.to}] += kPacket;
  }
  return out;
}

double mbitPerSecond(double bytes, int seconds) { return bytes * 8 / 1e6 / seconds; }

}  // namespace

TEST_CASE("node cap: two 100 Mbit/s links behind a 100 Mbit/s interface send 100 in total") {
  const int seconds = 20;
  const LinkSpec link{100, 10, 0, 0};
  // Links only: node 0 sends 200 Mbit/s in total (100 on each link).
  auto free = makePaths(3, link, 0);
  const Delivered f = run(free, {{0, 1}, {0, 2}}, 150, seconds);
  CHECK(mbitPerSecond(f.total(0, true), seconds) > 190);
  // With the interface capped at 100: at most 100 in total, shared about evenly, and (offered more
  // than it takes) the interface is busy all the time.
  auto capped = makePaths(3, link, 100);
  const Delivered c = run(capped, {{0, 1}, {0, 2}}, 150, seconds);
  const double total = mbitPerSecond(c.total(0, true), seconds);
  WARN("egress: links only " << mbitPerSecond(f.total(0, true), seconds)
                             << " Mbit/s, node cap 100: " << total << " Mbit/s");
  CHECK(total <= 100.0);
  CHECK(total > 98.0);
  CHECK(mbitPerSecond(c.bytes.at({0, 1}), seconds) > 40);
  CHECK(mbitPerSecond(c.bytes.at({0, 2}), seconds) > 40);
  CHECK(c.drops > 0);  // what the interface could not take was shed at its queue
  CHECK(capped.egress(0).queuedBytes(seconds * kSecond) <= capped.egress(0).queueLimit());
}

TEST_CASE("node cap: two senders into one capped interface deliver 100 in total") {
  const int seconds = 20;
  const LinkSpec link{100, 10, 0, 0};
  auto free = makePaths(3, link, 0);
  const Delivered f = run(free, {{1, 0}, {2, 0}}, 100, seconds);
  CHECK(mbitPerSecond(f.total(0, false), seconds) > 190);
  auto capped = makePaths(3, link, 100);
  const Delivered c = run(capped, {{1, 0}, {2, 0}}, 100, seconds);
  const double total = mbitPerSecond(c.total(0, false), seconds);
  WARN("ingress: links only " << mbitPerSecond(f.total(0, false), seconds)
                              << " Mbit/s, node cap 100: " << total << " Mbit/s");
  CHECK(total <= 100.0);
  CHECK(total > 98.0);
  CHECK(c.drops > 0);  // the senders' interfaces pass 100 each: the receiver's queue sheds half
  // A sender alone gets the receiver's whole interface.
  auto alone = makePaths(3, link, 100);
  const Delivered a = run(alone, {{1, 0}}, 100, seconds);
  CHECK(mbitPerSecond(a.total(0, false), seconds) > 98.0);
}

TEST_CASE("node cap below the link: the interface is the bottleneck; above it: the link is") {
  const int seconds = 10;
  auto narrow = makePaths(2, {100, 5, 0, 0}, 30);
  CHECK(mbitPerSecond(run(narrow, {{0, 1}}, 200, seconds).total(0, true), seconds) ==
        Approx(30).epsilon(0.02));
  auto wide = makePaths(2, {100, 5, 0, 0}, 400);
  CHECK(mbitPerSecond(run(wide, {{0, 1}}, 200, seconds).total(0, true), seconds) ==
        Approx(100).epsilon(0.02));
}

TEST_CASE("without node caps the path is exactly the link model") {
  const LinkSpec spec{50, 20, 5, 2};
  auto paths = makePaths(4, spec, 0, 9);
  LinkModel l01(spec, 0, linkSeed(9, 0, 1)), l32(spec, 0, linkSeed(9, 3, 2));
  for (int i = 0; i < 5000; ++i) {
    const std::int64_t now = i * 100000;
    const std::size_t bytes = 200 + (i * 37) % 1300;
    const Decision a = paths.send(now, 0, 1, bytes), b = l01.admit(now, bytes);
    REQUIRE(a.verdict == b.verdict);
    REQUIRE(a.deliverAtNs == b.deliverAtNs);
    const Decision c = paths.send(now, 3, 2, bytes), d = l32.admit(now, bytes);
    REQUIRE(c.verdict == d.verdict);
    REQUIRE(c.deliverAtNs == d.deliverAtNs);
  }
  CHECK_FALSE(paths.ingressLimited(1));
  CHECK_FALSE(paths.egressLimited(0));
}

TEST_CASE("stages cut through: an idle path costs one serialisation time, not three") {
  // 1250 bytes at 10 Mbit/s = 1 ms on the link, on each interface too.
  auto paths = makePaths(2, {10, 5, 0, 0}, 10);
  const Decision d = paths.send(0, 0, 1, 1250);
  REQUIRE(d.verdict == Verdict::kDeliver);
  CHECK(d.deliverAtNs == 1 * kMs + 5 * kMs);
  const Decision r = paths.receive(d.deliverAtNs, 0, 1, 1250);
  REQUIRE(r.verdict == Verdict::kDeliver);
  CHECK(r.deliverAtNs == 6 * kMs);
  // A slower interface than the link sets the pace: 2 ms per packet at 5 Mbit/s.
  auto slow = makePaths(2, {10, 5, 0, 0}, 5);
  std::int64_t prev = 0;
  for (int i = 0; i < 10; ++i) {
    const Decision s = slow.send(0, 0, 1, 1250);
    REQUIRE(s.verdict == Verdict::kDeliver);
    CHECK(s.deliverAtNs == (i + 1) * 2 * kMs + 5 * kMs);
    const Decision in = slow.receive(s.deliverAtNs, 0, 1, 1250);
    REQUIRE(in.verdict == Verdict::kDeliver);
    CHECK(in.deliverAtNs >= s.deliverAtNs);
    CHECK(in.deliverAtNs >= prev + 2 * kMs);  // the receiver's interface keeps the same pace
    prev = in.deliverAtNs;
  }
}

TEST_CASE("node cap with jitter never reorders a link; interface queues are bounded") {
  auto paths = makePaths(3, {0, 20, 10, 0}, 50, 5);
  std::int64_t last01 = 0, last02 = 0;
  std::uint64_t dropped = 0;
  for (int i = 0; i < 20000; ++i) {
    const std::int64_t now = i * 50000;  // 1500 bytes per 50 us per link: 480 Mbit/s offered
    for (int to : {1, 2}) {
      const Decision d = paths.send(now, 0, to, kPacket);
      if (d.verdict != Verdict::kDeliver) {
        CHECK(d.verdict == Verdict::kDropQueue);
        ++dropped;
        continue;
      }
      std::int64_t& last = to == 1 ? last01 : last02;
      REQUIRE(d.deliverAtNs >= last);
      last = d.deliverAtNs;
    }
    REQUIRE(paths.egress(0).queuedBytes(now) <= paths.egress(0).queueLimit());
  }
  CHECK(dropped > 0);
  // The interface's queue: 2 x its bandwidth-delay product over the 20 ms link.
  CHECK(paths.egress(0).queueLimit() == autoQueueBytes({50, 20, 0, 0}));
}
