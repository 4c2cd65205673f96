#include "runtime/config/config.h"

namespace grapevine::config {

std::vector<PeerAddress> PeersSection::addresses() const {
  if (!list.empty()) return list;
  std::vector<PeerAddress> out;
  out.reserve(count);
  for (int r = 0; r < count; ++r) out.push_back({host, basePort + r});
  return out;
}

topology::Spec Config::topologySpec() const {
  topology::Spec s;
  s.kind = topology::parseKind(topology.kind).value_or(topology::Kind::kRing);
  s.peers = peers.count;
  s.dims = topology.dims;
  s.degree = topology.degree;
  s.probability = topology.probability;
  s.seed = topology.seed.value_or(run.seed);
  s.weights = topology::parseWeights(topology.weights).value_or(topology::WeightsKind::kMetropolis);
  s.edges = topology.edges;
  return s;
}

}  // namespace grapevine::config
