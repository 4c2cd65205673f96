// The process driver: one peer of a real run. Boots its neighbour connections over the configured
// transport (coordinator-free: see runtime/transport/bootstrap.h), then runs rounds with two
// threads: the engine loop thread owns the transports (sends, receives, heartbeats) and the
// training thread (the caller's) computes, hands each round's messages to the loop, and waits for
// its neighbours' with a deadline. Writes DIR/peer-<rank>.jsonl, DIR/peer-<rank>.final.json and
// DIR/model-<rank>.bin.
#pragma once

#include <atomic>
#include <string>

#include "runtime/engine/setup.h"

namespace grapevine::engine {

struct PeerRunOptions {
  int rank = 0;
  std::uint32_t incarnation = 0;
  std::string outDir;  // default: config output.dir
  // Set from a signal handler: finish or abandon the current round within 2 s, flush, exit.
  const std::atomic<bool>* stop = nullptr;
};

// Returns ok when the peer ran all its rounds (or was stopped cleanly), else the first fatal error
// (bootstrap failure, handshake mismatch, bad local state, an output folder or file that cannot be
// written). Losing neighbours is not fatal. The transports are closed on the loop thread and that
// thread joined before it returns, on every path.
Status runPeerProcess(const RunPlan& plan, const PeerRunOptions& options);

}  // namespace grapevine::engine
