#include "runtime/engine/lockstep.h"

#include <cmath>

namespace grapevine::engine {

Status runLockstep(std::vector<std::unique_ptr<PeerCore>>& peers, std::int64_t firstRound,
                   std::int64_t rounds, const LockstepHooks& hooks) {
  // The first divergence by rank stops the run (a real run's peers stop within a few rounds, as
  // the notices spread). Detected after the local steps, every peer abandons the round; after
  // mixing, the peers that diverged do (the others completed it).
  auto diverged = [&](bool afterMixing) -> Status {
    for (auto& p : peers) {
      if (!p->divergence()) continue;
      const std::string message = divergenceMessage(*p->divergence(), std::nan(""));
      for (auto& q : peers) {
        if (!afterMixing || q->divergence()) q->abandonRound();
      }
      return aborted(message);
    }
    return Status::ok();
  };
  for (std::int64_t t = firstRound; t < firstRound + rounds; ++t) {
    for (auto& p : peers) GV_RETURN_IF_ERROR(p->beginRound(t));
    GV_RETURN_IF_ERROR(diverged(false));
    for (auto& p : peers) {
      for (int j : p->sendTo()) {
        if (hooks.deliver && !hooks.deliver(p->rank(), j, t)) continue;
        peers[j]->onMessage(p->rank(), p->outgoing(j));
      }
    }
    for (auto& p : peers) p->endRound();
    GV_RETURN_IF_ERROR(diverged(true));
    if (!peers.empty() && peers.front()->averagesEachRound()) {
      // allreduce, diloco: the round's exact average, then the outer step.
      for (auto& p : peers) p->setRoundCollectives(true);
      for (CollectiveKind kind : peers.front()->roundCollectives()) {
        for (auto& p : peers) p->beginCollective(kind);
        for (auto& p : peers) {
          for (int j : p->sendTo()) peers[j]->onMessage(p->rank(), p->outgoing(j));
        }
        for (auto& p : peers) p->endCollective();
      }
      for (auto& p : peers) {
        p->finishCollectives();
        p->setRoundCollectives(false);
        p->finishAveragedRound();
      }
      GV_RETURN_IF_ERROR(diverged(true));
    }
    if (hooks.afterRound) hooks.afterRound(t);
  }
  return Status::ok();
}

}  // namespace grapevine::engine
