// The libfabric backend's only public entry: a factory and an availability probe, which
// registerOfi() (ofi.cc) adds to the backend registry (runtime/transport/registry.h) as
// "libfabric". Everything else lives in ofi.cc.
//
// Design (docs/transports.md, "UCX and libfabric backends"): one RDM endpoint per Context with an
// address vector of its peers, tagged messages (fi_tsend/fi_trecv) with the sender's rank in the
// tag's high bits, one completion queue whose wait fd the Loop watches (FI_WAIT_FD + fi_trywait).
#pragma once

#include <memory>

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

}  // namespace grapevine::transport::ofi
