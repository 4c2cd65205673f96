// The simulator's link model: each directed edge has a bandwidth, one-way latency, jitter and loss
// from the `network:` section (defaults, then `network.peers` and `network.edges` overrides). Draws
// are a pure function of (seed, from, to, round), never of a stream's position, so they do not
// depend on which thread asks or in what order: the simulator stays bit-reproducible for a seed
// whatever its thread count.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "runtime/config/config.h"

namespace grapevine::sim {

struct LinkParams {
  double bandwidthBitsPerSecond = 0.0;  // 0: unlimited (no serialisation delay)
  double latencySeconds = 0.0;          // one way
  double jitterSeconds = 0.0;           // extra delay, uniform in [0, jitter] (common/jitter.h)
  double lossProbability = 0.0;         // per message, in [0, 1]
};

LinkParams linkParamsFromConfig(const config::LinkParams& link);

class LinkModel {
 public:
  // Every link the same.
  LinkModel(const LinkParams& params, std::uint64_t seed) : params_(params), seed_(seed) {}
  // Per-link parameters from the config, overrides included.
  LinkModel(const config::NetworkSection& network, std::uint64_t seed);

  // The parameters of the link from -> to.
  LinkParams params(int from, int to) const;

  // Whether the round-`round` message from `from` to `to` is lost (never delivered).
  bool lost(int from, int to, std::int64_t round) const;

  // Seconds from the moment the sender hands `bytes` to the link until the receiver has them all:
  // latency + jitter draw + bytes * 8 / bandwidth.
  double delaySeconds(int from, int to, std::int64_t round, std::size_t bytes) const;

  // The jitter draw alone: jitterDelay() (runtime/common/jitter.h), in [0, jitterSeconds).
  double jitterSeconds(int from, int to, std::int64_t round) const;

  // Rank's interface in bits/s (network.node_bandwidth_mbit or its own; 0: no cap), shared by all
  // of its links, egress and ingress each.
  double nodeBitsPerSecond(int rank) const;
  // Whether any interface is capped (otherwise every message is delaySeconds() alone).
  bool nodeCapped() const { return nodeCapped_; }

 private:
  // 64 random bits from the edge, round and a stream id (0: loss, 1: jitter).
  std::uint64_t randomBits(int from, int to, std::int64_t round, std::uint64_t stream) const;

  LinkParams params_;                              // every link, when network_ is empty
  std::optional<config::NetworkSection> network_;  // set when some link or interface differs
  std::uint64_t seed_;
  double nodeBitsPerSecond_ = 0.0;  // every interface, when network_ is empty
  bool nodeCapped_ = false;
};

// One transfer through a shared interface: it may start at `start` (seconds), carries `bits`,
// and cannot go faster than `maxBitsPerSecond` (its path elsewhere; 0: no limit of its own).
struct Transfer {
  double start = 0.0;
  double bits = 0.0;
  double maxBitsPerSecond = 0.0;
};

// When each transfer has passed an interface of `capacityBitsPerSecond` (0: unlimited) that the
// ones in progress share max-min fairly (each gets an equal share, a transfer capped below its
// share leaves the rest to the others), recomputed whenever one starts or ends: a fluid model of
// TCP flows behind one NIC. Unlimited capacity: start + bits / maxBitsPerSecond (or start).
// Deterministic: pure arithmetic in the order given.
std::vector<double> shareInterface(double capacityBitsPerSecond,
                                   const std::vector<Transfer>& transfers);

}  // namespace grapevine::sim
