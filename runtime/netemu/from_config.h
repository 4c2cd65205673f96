// A Network's options from a Grapevine config: peers.count ranks, network.link(from, to) for every
// directed link (defaults < per-peer < per-edge overrides), network.node_bandwidth_mbit (or the
// peer's own) for every rank's interface, run.seed for loss and jitter.
#pragma once

#include "runtime/config/config.h"
#include "runtime/netemu/network.h"

namespace grapevine::netemu {

LinkSpec linkSpecOf(const config::LinkParams& p);
// The link function holds a copy of the network section (it runs in the emulator process).
Options optionsFromConfig(const config::Config& c, int mtu = 9000);

}  // namespace grapevine::netemu
