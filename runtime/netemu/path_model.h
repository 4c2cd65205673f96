// The path of a packet from rank `from` to rank `to` through the emulated network: the sender's
// interface (egress), the directed link from -> to (LinkModel: loss, rate, queue, latency, jitter)
// and the receiver's interface (ingress). Each interface is a rate limit with a tail-drop queue
// shared by every link of its node (network.node_bandwidth_mbit: one NIC per peer, as a cloud
// instance has), so a ring peer with two 100 Mbit/s links and a 100 Mbit/s interface sends 100
// Mbit/s in total, not 200. Pure arithmetic on a caller-given clock (nanoseconds), like LinkModel:
// the emulator runs it on CLOCK_MONOTONIC, tests on a virtual clock.
//
// Stages are cut-through, not store-and-forward: a stage finishes a packet no sooner than the stage
// before it did, and no sooner than its own serialisation allows, so chaining three equal rates
// costs one packet time, not three. Without node caps the path is exactly the LinkModel.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <unordered_map>
#include <vector>

#include "runtime/netemu/link_model.h"

namespace grapevine::netemu {

// One node's interface in one direction: a FIFO serialising at `bandwidthMbit` (0 = unlimited)
// with a bounded queue. Not thread-safe.
class NodeShaper {
 public:
  NodeShaper() = default;
  explicit NodeShaper(double bandwidthMbit);

  bool limited() const { return nsPerByte_ > 0; }
  double bandwidthMbit() const { return bandwidthMbit_; }
  // The queue holds at least `bytes` from now on (a node's queue is sized for its longest link).
  void growQueue(std::size_t bytes);
  std::size_t queueLimit() const { return queueBytes_; }
  // Time to serialise `bytes` at this rate (0 when unlimited).
  std::int64_t serialisationNs(std::size_t bytes) const;
  // Bytes admitted but not yet serialised at nowNs.
  std::size_t queuedBytes(std::int64_t nowNs) const;

  // A packet of `bytes` whose last bit reaches the interface at `readyNs` and whose first bit may
  // start at `startNs` (<= readyNs; equal for a packet handed over whole). Returns false on tail
  // drop (the queue at readyNs plus this packet exceeds the limit); else sets `startedNs` (when
  // this interface began sending it) and `doneNs` (when its last bit has passed, >= readyNs).
  bool admit(std::int64_t startNs, std::int64_t readyNs, std::size_t bytes, std::int64_t& startedNs,
             std::int64_t& doneNs);

 private:
  double bandwidthMbit_ = 0;
  double nsPerByte_ = 0;  // 0 when unlimited
  std::size_t queueBytes_ = 0;
  std::int64_t busyUntilNs_ = 0;
};

struct PathOptions {
  int peers = 0;
  std::function<LinkSpec(int from, int to)> link;  // asked once per directed link, when first used
  std::function<double(int rank)> nodeBandwidthMbit;  // each rank's interface; empty: no caps
  std::size_t queueBytes = 0;  // every queue (links and interfaces); 0: sized automatically
  std::uint64_t seed = 1;      // link seeds: linkSeed(seed, from, to)
};

// Not thread-safe (the emulator loop owns it). Deterministic: the same options and the same calls
// give the same decisions.
class PathModel {
 public:
  explicit PathModel(PathOptions options);

  // Stage 1: the sender's interface, then the link. `nowNs` is non-decreasing across calls.
  // kDeliver: deliverAtNs is when the packet's last bit reaches the receiver's interface (per link
  // never before the previous packet's: no reordering). Drops: kDropQueue (the interface's or the
  // link's queue), kDropLoss (the link's random loss; the packet used the interface all the same).
  Decision send(std::int64_t nowNs, int from, int to, std::size_t bytes);

  // Stage 2, only where ingressLimited(to): the receiver's interface, for a packet that send()
  // gave arriveNs. Calls for one receiver come in non-decreasing arriveNs (the emulator's delivery
  // heap order). kDeliver: deliverAtNs is when the receiver has the whole packet; or kDropQueue.
  Decision receive(std::int64_t arriveNs, int from, int to, std::size_t bytes);

  bool ingressLimited(int rank) const { return ingress_[static_cast<std::size_t>(rank)].limited(); }
  bool egressLimited(int rank) const { return egress_[static_cast<std::size_t>(rank)].limited(); }
  const NodeShaper& egress(int rank) const { return egress_[static_cast<std::size_t>(rank)]; }
  const NodeShaper& ingress(int rank) const { return ingress_[static_cast<std::size_t>(rank)]; }

 private:
  struct Link {
    LinkModel model;
    std::int64_t lastArriveNs = 0;
  };
  Link& linkOf(int from, int to);

  PathOptions o_;
  std::vector<NodeShaper> egress_, ingress_;
  std::unordered_map<std::uint64_t, Link> links_;
};

}  // namespace grapevine::netemu
