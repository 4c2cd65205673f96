#include "runtime/engine/lockstep.h"

namespace grapevine::engine {

Status runLockstep(std::vector<std::unique_ptr<PeerCore>>& peers, std::int64_t firstRound,
                   std::int64_t rounds, const LockstepHooks& hooks) {
  for (std::int64_t t = firstRound; t < firstRound + rounds; ++t) {
    for (auto& p : peers) GV_RETURN_IF_ERROR(p->beginRound(t));
    for (auto& p : peers) {
      for (int j : p->sendTo()) {
        if (hooks.deliver && !hooks.deliver(p->rank(), j, t)) continue;
        peers[j]->onMessage(p->rank(), p->outgoing(j));
      }
    }
    for (auto& p : peers) p->endRound();
    if (hooks.afterRound) hooks.afterRound(t);
  }
  return Status::ok();
}

}  // namespace grapevine::engine
