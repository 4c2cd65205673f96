#include "runtime/sim/link_model.h"

namespace grapevine::sim {
namespace {

std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

LinkParams linkParamsFromConfig(const config::NetworkSection& n) {
  LinkParams p;
  p.bandwidthBitsPerSecond = n.bandwidthMbit * 1e6;
  p.latencySeconds = n.latencyMs * 1e-3;
  p.jitterSeconds = n.jitterMs * 1e-3;
  p.lossProbability = n.lossPercent / 100.0;
  return p;
}

double LinkModel::uniform(int from, int to, std::int64_t round, std::uint64_t stream) const {
  // Chained mixing of each coordinate: distinct (edge, round, stream) give independent-looking draws.
  std::uint64_t h = splitmix64(seed_ ^ 0x6772617065766e65ull);  // "grapevne"
  h = splitmix64(h ^ static_cast<std::uint32_t>(from));
  h = splitmix64(h ^ static_cast<std::uint32_t>(to));
  h = splitmix64(h ^ static_cast<std::uint64_t>(round));
  h = splitmix64(h ^ stream);
  return static_cast<double>(h >> 11) * 0x1.0p-53;
}

bool LinkModel::lost(int from, int to, std::int64_t round) const {
  if (params_.lossProbability <= 0.0) return false;
  return uniform(from, to, round, 0) < params_.lossProbability;
}

double LinkModel::jitterSeconds(int from, int to, std::int64_t round) const {
  if (params_.jitterSeconds <= 0.0) return 0.0;
  return params_.jitterSeconds * uniform(from, to, round, 1);
}

double LinkModel::delaySeconds(int from, int to, std::int64_t round, std::size_t bytes) const {
  double d = params_.latencySeconds + jitterSeconds(from, to, round);
  if (params_.bandwidthBitsPerSecond > 0.0) {
    d += static_cast<double>(bytes) * 8.0 / params_.bandwidthBitsPerSecond;
  }
  return d;
}

}  // namespace grapevine::sim
