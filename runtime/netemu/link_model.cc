#include "runtime/netemu/link_model.h"

#include <algorithm>
#include <cmath>

#include "runtime/common/jitter.h"

namespace grapevine::netemu {
namespace {

std::uint64_t splitmix64(std::uint64_t& x) {
  std::uint64_t z = (x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

std::int64_t msToNs(double ms) { return static_cast<std::int64_t>(std::llround(ms * 1e6)); }

}  // namespace

std::size_t autoQueueBytes(const LinkSpec& spec) {
  constexpr std::size_t kMinQueue = 64 * 1024;
  if (spec.bandwidthMbit <= 0) return kMinQueue;
  const double bdp = spec.bandwidthMbit * 1e6 / 8.0 * (2.0 * spec.latencyMs / 1e3);
  return std::max(kMinQueue, static_cast<std::size_t>(2.0 * bdp));
}

std::uint64_t linkSeed(std::uint64_t seed, int from, int to) {
  std::uint64_t x = seed;
  std::uint64_t h = splitmix64(x);
  x = h ^ (static_cast<std::uint64_t>(static_cast<std::uint32_t>(from)) << 32 |
           static_cast<std::uint32_t>(to));
  return splitmix64(x);
}

LinkModel::LinkModel(const LinkSpec& spec, std::size_t queueBytes, std::uint64_t seed)
    : spec_(spec),
      queueBytes_(queueBytes ? queueBytes : autoQueueBytes(spec)),
      nsPerByte_(spec.bandwidthMbit > 0 ? 8.0 * 1e3 / spec.bandwidthMbit : 0.0),
      latencyNs_(msToNs(std::max(0.0, spec.latencyMs))),
      jitterNs_(msToNs(std::max(0.0, spec.jitterMs))),
      rng_(seed) {}

double LinkModel::uniform() { return unitInterval(splitmix64(rng_)); }

std::size_t LinkModel::queuedBytes(std::int64_t nowNs) const {
  if (nsPerByte_ <= 0 || busyUntilNs_ <= nowNs) return 0;
  return static_cast<std::size_t>(static_cast<double>(busyUntilNs_ - nowNs) / nsPerByte_);
}

Decision LinkModel::admit(std::int64_t nowNs, std::size_t bytes) {
  Decision d;
  if (spec_.lossPercent > 0 && uniform() * 100.0 < spec_.lossPercent) {
    d.verdict = Verdict::kDropLoss;
    return d;
  }
  std::int64_t sentNs = nowNs;  // when the last bit leaves the sender
  if (nsPerByte_ > 0) {
    if (queuedBytes(nowNs) + bytes > queueBytes_) {
      d.verdict = Verdict::kDropQueue;
      return d;
    }
    const std::int64_t start = std::max(nowNs, busyUntilNs_);
    busyUntilNs_ = start + static_cast<std::int64_t>(std::llround(nsPerByte_ * bytes));
    sentNs = busyUntilNs_;
  }
  std::int64_t delay = latencyNs_;
  if (jitterNs_ > 0) {
    // network.jitter_ms: extra delay in [0, jitter], the same draw as the simulator's.
    delay += static_cast<std::int64_t>(
        std::llround(jitterDelay(static_cast<double>(jitterNs_), splitmix64(rng_))));
  }
  d.sentAtNs = sentNs;
  d.deliverAtNs = std::max(sentNs + delay, lastDeliverNs_);
  lastDeliverNs_ = d.deliverAtNs;
  return d;
}

}  // namespace grapevine::netemu
