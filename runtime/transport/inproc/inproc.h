// The in-process backend: peers in one process exchange messages through queues ("pipes") held in a
// process-wide fabric keyed by address. The address blob is "inproc:<slot>", where the slot is
// unique to one Context for the life of the process. Peers may live on different Loops (threads): a
// pipe is the only shared object, guarded by its own mutex, and the reader is woken by posting to
// its loop.
//
// Cost: a send copies the message once into a pooled buffer (the sender's span is then free at
// once) and the receiver copies it once into the posted buffer (or keeps the pooled buffer while it
// is unexpected). No thread, fd or timer per peer, so hundreds of peers are cheap.
#pragma once

#include <memory>

#include "runtime/transport/transport.h"

namespace grapevine::transport::inproc {

// Call on the loop thread. Never fails today (Result for the common factory shape).
Result<std::unique_ptr<Context>> makeInprocContext(Loop& loop, const Options& options);

// Always "usable". Any thread.
BackendInfo inprocBackendInfo();

}  // namespace grapevine::transport::inproc
