// --emulate (network.emulate: netns): every local peer in its own network namespace behind the link
// emulator (runtime/netemu), and the emulated links' counters for the fault schedule and the
// summary. Main thread only, like the rest of the launcher.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>

#include "runtime/common/status.h"
#include "runtime/launch/plan.h"
#include "runtime/netemu/network.h"

namespace grapevine::launch {

// Creates the emulated network of `plan` (its links from the config's network: section, `mtu` for
// the interfaces) and points every peer at its namespace's address: peer r listens on (and is
// dialled at) that address, on the port it already had (a peers.list override appended to
// plan.peerOverrides). kInvalidArgument when a peer is not local or the prerequisites (root, tun,
// ip) are missing; another code when creating the namespaces or the emulator failed.
Result<std::unique_ptr<netemu::Network>> startEmulatedNetwork(Plan& plan, int mtu);

// Packets delivered on the link between a and b, both directions; 0 without a network.
std::uint64_t linkPackets(const netemu::Network* network, int a, int b);

// Packets the link between a and b dropped while it was down, both directions.
std::uint64_t linkDroppedDown(const netemu::Network& network, int a, int b);

// summary.json's "network_emulation" (mode and the totals of every link), then stops the emulator
// and deletes the namespaces (resets `network`: call it once every peer has exited). null without a
// network.
nlohmann::json stopEmulatedNetwork(std::unique_ptr<netemu::Network>& network);

}  // namespace grapevine::launch
