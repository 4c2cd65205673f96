#include "runtime/sim/link_model.h"

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
    : params_(linkParamsFromConfig(network.link(0, 0))), seed_(seed) {
  if (!network.uniform()) network_ = network;
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

}  // namespace grapevine::sim
