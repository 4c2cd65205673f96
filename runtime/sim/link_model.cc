#include "runtime/sim/link_model.h"

#include <algorithm>
#include <limits>
#include <numeric>

#include "runtime/common/jitter.h"

namespace grapevine::sim {
namespace {

std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

LinkParams linkParamsFromConfig(const config::LinkParams& n) {
  LinkParams p;
  p.bandwidthBitsPerSecond = n.bandwidthMbit * 1e6;
  p.latencySeconds = n.latencyMs * 1e-3;
  p.jitterSeconds = n.jitterMs * 1e-3;
  p.lossProbability = n.lossPercent / 100.0;
  return p;
}

LinkModel::LinkModel(const config::NetworkSection& network, std::uint64_t seed)
    : params_(linkParamsFromConfig(network.link(0, 0))),
      seed_(seed),
      nodeBitsPerSecond_(network.nodeBandwidthMbit * 1e6),
      nodeCapped_(network.anyNodeCap()) {
  if (!network.uniform()) network_ = network;
}

double LinkModel::nodeBitsPerSecond(int rank) const {
  if (!network_) return nodeBitsPerSecond_;
  return network_->nodeBandwidthOf(rank) * 1e6;
}

LinkParams LinkModel::params(int from, int to) const {
  if (!network_) return params_;
  return linkParamsFromConfig(network_->link(from, to));
}

std::uint64_t LinkModel::randomBits(int from, int to, std::int64_t round,
                                    std::uint64_t stream) const {
  // Chained mixing of each coordinate: distinct (edge, round, stream) give independent-looking
  // draws.
  std::uint64_t h = splitmix64(seed_ ^ 0x6772617065766e65ull);  // "grapevne"
  h = splitmix64(h ^ static_cast<std::uint32_t>(from));
  h = splitmix64(h ^ static_cast<std::uint32_t>(to));
  h = splitmix64(h ^ static_cast<std::uint64_t>(round));
  return splitmix64(h ^ stream);
}

bool LinkModel::lost(int from, int to, std::int64_t round) const {
  const double p = network_ ? params(from, to).lossProbability : params_.lossProbability;
  if (p <= 0.0) return false;
  return unitInterval(randomBits(from, to, round, 0)) < p;
}

double LinkModel::jitterSeconds(int from, int to, std::int64_t round) const {
  const double j = network_ ? params(from, to).jitterSeconds : params_.jitterSeconds;
  return jitterDelay(j, randomBits(from, to, round, 1));
}

double LinkModel::delaySeconds(int from, int to, std::int64_t round, std::size_t bytes) const {
  const LinkParams p = params(from, to);
  double d = p.latencySeconds + jitterSeconds(from, to, round);
  if (p.bandwidthBitsPerSecond > 0.0)
    d += static_cast<double>(bytes) * 8.0 / p.bandwidthBitsPerSecond;
  return d;
}

std::vector<double> shareInterface(double capacity, const std::vector<Transfer>& transfers) {
  const std::size_t n = transfers.size();
  std::vector<double> done(n, 0.0);
  constexpr double kInf = std::numeric_limits<double>::infinity();
  auto ownRate = [](const Transfer& t) {
    return t.maxBitsPerSecond > 0.0 ? t.maxBitsPerSecond : kInf;
  };
  if (capacity <= 0.0) {
    for (std::size_t k = 0; k < n; ++k) {
      const Transfer& t = transfers[k];
      done[k] = t.maxBitsPerSecond > 0.0 ? t.start + t.bits / t.maxBitsPerSecond : t.start;
    }
    return done;
  }
  // Event by event: starts and completions. Between events the rates are constant.
  std::vector<std::size_t> order(n);  // by start, ties by index
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return transfers[a].start < transfers[b].start;
  });
  std::vector<double> left(n), rate(n, 0.0);
  for (std::size_t k = 0; k < n; ++k) left[k] = std::max(0.0, transfers[k].bits);
  std::vector<std::size_t> active;
  std::size_t next = 0;  // into order
  double now = n ? transfers[order[0]].start : 0.0;
  while (next < n || !active.empty()) {
    while (next < n && transfers[order[next]].start <= now) {
      const std::size_t k = order[next++];
      if (left[k] <= 0.0) {
        done[k] = transfers[k].start;
      } else {
        active.push_back(k);
      }
    }
    if (active.empty()) {
      now = transfers[order[next]].start;
      continue;
    }
    // Max-min fair rates: the transfers capped below an equal share take their cap; the others
    // split what remains equally (water-filling in increasing cap, ties by index).
    std::vector<std::size_t> byCap = active;
    std::stable_sort(byCap.begin(), byCap.end(), [&](std::size_t a, std::size_t b) {
      return ownRate(transfers[a]) < ownRate(transfers[b]);
    });
    double remaining = capacity;
    for (std::size_t i = 0; i < byCap.size(); ++i) {
      const double share = remaining / static_cast<double>(byCap.size() - i);
      const double cap = ownRate(transfers[byCap[i]]);
      rate[byCap[i]] = std::min(cap, share);
      remaining -= rate[byCap[i]];
    }
    // The next event: the first completion at these rates, or the next start.
    double step = kInf;
    for (std::size_t k : active) step = std::min(step, left[k] / rate[k]);
    const bool startFirst = next < n && transfers[order[next]].start < now + step;
    if (startFirst) step = transfers[order[next]].start - now;
    now += step;
    std::vector<std::size_t> still;
    for (std::size_t k : active) {
      // Finished: what is left would take no longer than the step (rounding included).
      if (!startFirst && left[k] <= rate[k] * step * (1.0 + 1e-12)) {
        left[k] = 0.0;
        done[k] = now;
      } else {
        left[k] = std::max(0.0, left[k] - rate[k] * step);
        if (left[k] <= 0.0) {
          done[k] = now;
        } else {
          still.push_back(k);
        }
      }
    }
    active.swap(still);
  }
  return done;
}

}  // namespace grapevine::sim
