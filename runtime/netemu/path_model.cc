#include "runtime/netemu/path_model.h"

#include <algorithm>
#include <cmath>
#include <utility>

namespace grapevine::netemu {

NodeShaper::NodeShaper(double bandwidthMbit)
    : bandwidthMbit_(std::max(0.0, bandwidthMbit)),
      nsPerByte_(bandwidthMbit > 0 ? 8.0 * 1e3 / bandwidthMbit : 0.0),
      queueBytes_(autoQueueBytes({bandwidthMbit, 0, 0, 0})) {}

void NodeShaper::growQueue(std::size_t bytes) { queueBytes_ = std::max(queueBytes_, bytes); }

std::size_t NodeShaper::queuedBytes(std::int64_t nowNs) const {
  if (nsPerByte_ <= 0 || busyUntilNs_ <= nowNs) return 0;
  return static_cast<std::size_t>(static_cast<double>(busyUntilNs_ - nowNs) / nsPerByte_);
}

std::int64_t NodeShaper::serialisationNs(std::size_t bytes) const {
  return static_cast<std::int64_t>(std::llround(nsPerByte_ * static_cast<double>(bytes)));
}

bool NodeShaper::admit(std::int64_t startNs, std::int64_t readyNs, std::size_t bytes,
                       std::int64_t& startedNs, std::int64_t& doneNs) {
  if (nsPerByte_ <= 0) {
    startedNs = startNs;
    doneNs = readyNs;
    return true;
  }
  if (queuedBytes(readyNs) + bytes > queueBytes_) return false;
  startedNs = std::max(startNs, busyUntilNs_);
  const std::int64_t serialised = startedNs + serialisationNs(bytes);
  doneNs = std::max(readyNs, serialised);
  busyUntilNs_ = doneNs;
  return true;
}

PathModel::PathModel(PathOptions options) : o_(std::move(options)) {
  if (!o_.link) o_.link = [](int, int) { return LinkSpec{}; };
  egress_.reserve(static_cast<std::size_t>(o_.peers));
  ingress_.reserve(static_cast<std::size_t>(o_.peers));
  for (int r = 0; r < o_.peers; ++r) {
    const double mbit = o_.nodeBandwidthMbit ? o_.nodeBandwidthMbit(r) : 0.0;
    egress_.emplace_back(mbit);
    ingress_.emplace_back(mbit);
    if (o_.queueBytes) {
      egress_.back().growQueue(o_.queueBytes);
      ingress_.back().growQueue(o_.queueBytes);
    }
  }
}

PathModel::Link& PathModel::linkOf(int from, int to) {
  const std::uint64_t key =
      static_cast<std::uint64_t>(from) * static_cast<std::uint64_t>(o_.peers) +
      static_cast<std::uint64_t>(to);
  auto it = links_.find(key);
  if (it == links_.end()) {
    const LinkSpec spec = o_.link(from, to);
    it = links_.emplace(key, Link{LinkModel(spec, o_.queueBytes, linkSeed(o_.seed, from, to))})
             .first;
    if (!o_.queueBytes) {
      // An interface's queue: 2 x its bandwidth-delay product over the longest link seen so far
      // (what lets TCP fill the interface on that link), as autoQueueBytes sizes a link's.
      NodeShaper& out = egress_[static_cast<std::size_t>(from)];
      NodeShaper& in = ingress_[static_cast<std::size_t>(to)];
      out.growQueue(autoQueueBytes({out.bandwidthMbit(), spec.latencyMs, 0, 0}));
      in.growQueue(autoQueueBytes({in.bandwidthMbit(), spec.latencyMs, 0, 0}));
    }
  }
  return it->second;
}

Decision PathModel::send(std::int64_t nowNs, int from, int to, std::size_t bytes) {
  Link& link = linkOf(from, to);
  NodeShaper& out = egress_[static_cast<std::size_t>(from)];
  if (!out.limited()) return link.model.admit(nowNs, bytes);  // exactly the link alone

  Decision d;
  std::int64_t started = 0, done = 0;
  if (!out.admit(nowNs, nowNs, bytes, started, done)) {
    d.verdict = Verdict::kDropQueue;
    return d;
  }
  // The link takes the packet's first bit when the interface starts sending it (cut-through):
  // its queue and its rate count from there; the last bit cannot leave the link before it left
  // the interface, which shifts the delivery by the difference.
  d = link.model.admit(started, bytes);
  if (d.verdict != Verdict::kDeliver) return d;
  if (done > d.sentAtNs) {
    d.deliverAtNs += done - d.sentAtNs;
    d.sentAtNs = done;
  }
  d.deliverAtNs = std::max(d.deliverAtNs, link.lastArriveNs);  // the shift must not reorder
  link.lastArriveNs = d.deliverAtNs;
  return d;
}

Decision PathModel::receive(std::int64_t arriveNs, int /*from*/, int to, std::size_t bytes) {
  Decision d;
  NodeShaper& in = ingress_[static_cast<std::size_t>(to)];
  std::int64_t started = 0, done = 0;
  // Cut-through again: the interface began on the packet while its bits were arriving, so it
  // finishes at max(arrival of the last bit, its own serialisation after the queue). Taking the
  // first bit to have come one serialisation time (at this interface's rate) earlier assumes the
  // upstream was no faster than this interface; a lone packet from a faster upstream is then early
  // by at most its own serialisation time. The rate (bytes per second over any busy period) is
  // exact either way.
  if (!in.admit(arriveNs - in.serialisationNs(bytes), arriveNs, bytes, started, done)) {
    d.verdict = Verdict::kDropQueue;
    return d;
  }
  d.sentAtNs = done;
  d.deliverAtNs = done;
  return d;
}

}  // namespace grapevine::netemu
