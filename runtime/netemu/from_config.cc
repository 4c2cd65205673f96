#include "runtime/netemu/from_config.h"

namespace grapevine::netemu {

LinkSpec linkSpecOf(const config::LinkParams& p) {
  return {p.bandwidthMbit, p.latencyMs, p.jitterMs, p.lossPercent};
}

Options optionsFromConfig(const config::Config& c, int mtu) {
  Options o;
  o.peers = c.peers.count;
  o.seed = c.run.seed;
  o.mtu = mtu;
  o.link = [network = c.network](int from, int to) { return linkSpecOf(network.link(from, to)); };
  if (c.network.anyNodeCap()) {
    o.nodeBandwidthMbit = [network = c.network](int rank) { return network.nodeBandwidthOf(rank); };
  }
  return o;
}

}  // namespace grapevine::netemu
