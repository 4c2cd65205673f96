// Runs every peer of a run inside one process, in lockstep, delivering messages directly (no
// transport). Bit-reproducible for a seed. Used by tests (oracles, limits) and as the core of the
// simulator. The messages are the same bytes a real run puts on the wire.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "runtime/engine/peer_core.h"

namespace grapevine::engine {

struct LockstepHooks {
  // Called after every round with the round index (all peers have mixed).
  std::function<void(std::int64_t round)> afterRound;
  // Decides whether a message from `from` to `to` in `round` is delivered (fault injection); null:
  // always. An undelivered message is never delivered later.
  std::function<bool(int from, int to, std::int64_t round)> deliver;
};

// A divergence (PeerCore::divergence()) stops the run with kAborted and divergenceMessage().
Status runLockstep(std::vector<std::unique_ptr<PeerCore>>& peers, std::int64_t firstRound,
                   std::int64_t rounds, const LockstepHooks& hooks = {});

}  // namespace grapevine::engine
