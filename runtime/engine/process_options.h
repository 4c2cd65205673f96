// The transport settings of one peer process: the data Context's options and the bootstrap's, from
// the config and the peer's core. Used by the process driver (runtime/engine/driver.cc); pure
// functions, no I/O.
#pragma once

#include <cstdint>

#include "runtime/engine/peer_core.h"
#include "runtime/engine/setup.h"
#include "runtime/transport/bootstrap.h"
#include "runtime/transport/transport.h"

namespace grapevine::engine {

// The config's part of the data Context's options for peer `rank`: the transport.* settings and
// this peer's host from peers.*; the other fields keep transport::Options' defaults.
transport::Options transportOptions(const config::Config& config, int rank);

// The data Context of peer `rank`: the config's part (above), a message limit of the core's
// largest wire message (at least 4 KiB) and the count of neighbours that dial it.
transport::Options transportOptions(const config::Config& config, int rank, const PeerCore& core);

// The bootstrap of peer `rank`: every peer's control address (host:port by rank), the core's
// neighbours, the config parts compared in the handshake (configParts), the connect timeout, and
// heartbeats every peers.heartbeat_interval with peers.dead_after of silence (at least one
// interval) counted as missed. The callbacks (onEvent, onMessage) are left for the caller to set.
transport::BootstrapOptions bootstrapOptions(const RunPlan& plan, int rank,
                                             std::uint32_t incarnation, const PeerCore& core);

}  // namespace grapevine::engine
