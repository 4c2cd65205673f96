// The UCX backend's only public entry: a factory and an availability probe, which registerUcx()
// (ucx.cc) adds to the backend registry (runtime/transport/registry.h). Everything else lives in
// ucx.cc.
//
// Design (see docs/transports.md, "UCX and libfabric backends"): one UCP context and one UCP worker
// per Grapevine peer process (per Context); one endpoint per Connection, created with
// UCP_ERR_HANDLING_MODE_PEER and an error handler; UCX tagged messages; the worker's event fd is
// watched by the Loop so an idle peer sleeps.
#pragma once

#include <memory>

#include "runtime/common/status.h"
#include "runtime/transport/transport.h"

namespace grapevine::transport::ucx {

// Creates a UCX context owned by `loop`'s thread. options.ucxTls (if not empty) becomes UCX's TLS
// list; empty leaves the choice to UCX (and to a UCX_TLS environment variable). Errors:
// kInvalidArgument for a rank outside [0, 2^24); kUnavailable when UCX cannot initialise. Call on
// the loop thread.
Result<std::unique_ptr<Context>> makeUcxContext(Loop& loop, const Options& options);

// "usable", or "not usable: <why>" when UCX cannot create a context here (probes ucp_init once).
BackendInfo ucxBackendInfo();

}  // namespace grapevine::transport::ucx
