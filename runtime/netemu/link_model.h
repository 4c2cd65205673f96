// The model of one directed emulated link: loss, a rate-limited bottleneck with a bounded tail-drop
// queue, and a propagation delay with jitter that never reorders. Pure arithmetic on a caller-given
// clock (nanoseconds), so the emulator runs it on CLOCK_MONOTONIC and tests run it on a virtual
// one.
#pragma once

#include <cstddef>
#include <cstdint>

namespace grapevine::netemu {

// Parameters of one directed link. 0 bandwidth = unlimited; jitter is an extra one-way delay,
// uniform in [0, jitter] (runtime/common/jitter.h: the simulator's meaning and draw).
struct LinkSpec {
  double bandwidthMbit = 0;
  double latencyMs = 0;
  double jitterMs = 0;
  double lossPercent = 0;
};

// The default queue of a link: max(64 KiB, 2 x bandwidth-delay product), the product taken over a
// round trip of 2 x latency. Big enough for TCP to fill the link, small enough that congestion
// control sees a bottleneck instead of an unbounded buffer.
std::size_t autoQueueBytes(const LinkSpec& spec);

enum class Verdict { kDeliver, kDropLoss, kDropQueue };

struct Decision {
  Verdict verdict = Verdict::kDeliver;
  std::int64_t deliverAtNs = 0;  // meaningful for kDeliver only
  std::int64_t sentAtNs = 0;     // kDeliver: when the last bit left the rate limit (no delay yet)
};

// State of one directed link. Not thread-safe (one emulator loop owns every link).
// Deterministic: the same seed and the same sequence of admit() calls give the same decisions.
class LinkModel {
 public:
  // queueBytes 0 means autoQueueBytes(spec). The queue only exists on rate-limited links.
  LinkModel(const LinkSpec& spec, std::size_t queueBytes, std::uint64_t seed);

  // A packet of `bytes` enters the link at `nowNs` (non-decreasing across calls). Returns whether
  // it is lost, tail-dropped (the bytes still waiting for serialisation plus this one exceed the
  // queue), or delivered at deliverAtNs = serialisation end + latency + jitter, never before the
  // previous packet's delivery on this link (FIFO).
  Decision admit(std::int64_t nowNs, std::size_t bytes);

  // Bytes admitted but not yet serialised at nowNs (the bottleneck queue's occupancy).
  std::size_t queuedBytes(std::int64_t nowNs) const;
  std::size_t queueLimit() const { return queueBytes_; }

 private:
  double uniform();  // [0, 1)

  LinkSpec spec_;
  std::size_t queueBytes_;
  double nsPerByte_;  // 0 when unlimited
  std::int64_t latencyNs_;
  std::int64_t jitterNs_;
  std::uint64_t rng_;
  std::int64_t busyUntilNs_ = 0;
  std::int64_t lastDeliverNs_ = 0;
};

// Seed of link from -> to derived from the network seed (splitmix64 of the three), so each link has
// its own deterministic stream regardless of how packets of different links interleave.
std::uint64_t linkSeed(std::uint64_t seed, int from, int to);

}  // namespace grapevine::netemu
