// The libfabric backend's public entry: a factory, an availability probe (both called by the
// backend registry in runtime/transport) and a liveness hook for the layer that runs heartbeats.
//
// Design (docs/transports.md, "UCX and libfabric backends"): one RDM endpoint per Context with an
// address vector of its peers, tagged messages (fi_tsend/fi_trecv) with the sender's rank in the
// tag's high bits, one completion queue whose wait fd the Loop watches (FI_WAIT_FD + fi_trywait).
#pragma once

#include <memory>
#include <string>

#include "runtime/common/status.h"
#include "runtime/transport/transport.h"

namespace grapevine::transport::ofi {

// Creates a libfabric context on `loop`'s thread with provider options.libfabricProvider (e.g.
// "tcp;ofi_rxm", "shm"); the tcp provider binds options.host. Errors: kInvalidArgument for a rank
// outside [0, 2^24); kUnavailable when the provider cannot be opened here. Call on the loop thread.
Result<std::unique_ptr<Context>> makeOfiContext(Loop& loop, const Options& options);

// "usable", or "not usable: <why>" when no RDM endpoint with tagged messages can be opened here
// with the default provider (tcp;ofi_rxm).
BackendInfo ofiBackendInfo();

// An RDM endpoint learns that a peer died only when a send to it fails, and a posted receive never
// does. A peer on the same host is watched through its pid; for others, whoever runs heartbeats
// (the control connection) calls this to fail every pending and later operation of `connection`
// with kUnavailable
// (`why` becomes the message). Returns false if `connection` is not a libfabric connection. Loop
// thread.
bool markPeerFailed(Connection& connection, const std::string& why);

}  // namespace grapevine::transport::ofi
