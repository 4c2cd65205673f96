#include "runtime/sim/faults.h"

#include <string>

#include "runtime/common/log.h"
#include "runtime/engine/summary.h"

namespace grapevine::sim {

FaultRunner::FaultRunner(const engine::RunPlan& plan,
                         std::vector<std::unique_ptr<engine::PeerCore>>& peers, Liveness& liveness)
    : plan_(plan),
      events_(plan.config.faults.events),
      peers_(peers),
      liveness_(liveness),
      down_(peers.size(), 0),
      killed_(peers.size(), 0),
      saved_(peers.size()),
      incarnation_(peers.size(), 0) {}

Status FaultRunner::before(std::int64_t t, std::span<const double> clocks) {
  if (events_.empty()) return Status::ok();
  linksDown_.clear();
  for (std::size_t i = 0; i < down_.size(); ++i) down_[i] = killed_[i];
  for (const auto& e : events_) {
    const std::int64_t start = *e.atRound;
    const std::int64_t end = start + e.rounds.value_or(0);
    const bool active = t >= start && (e.kind == config::FaultKind::kKill || t < end);
    if (e.kind == config::FaultKind::kLinkDown) {
      if (active) linksDown_.insert({std::min(e.linkA, e.linkB), std::max(e.linkA, e.linkB)});
    } else if (e.kind == config::FaultKind::kCorrupt) {
      // Up and running; its messages are damaged (PeerCore, as `grapevine peer` does it).
      if (t == start || t == end)
        peers_[static_cast<std::size_t>(e.peer)]->setCorruptOutgoing(t == start);
    } else if (config::isAttack(e.kind)) {
      // Up and running; it publishes a crafted model (PeerCore, as `grapevine peer` does it).
      auto& p = *peers_[static_cast<std::size_t>(e.peer)];
      if (t == start)
        p.setAttacker(engine::Attacker(e.kind, e.attackScale(), plan_.config.run.seed, e.peer));
      else if (t == end)
        p.setAttacker(std::nullopt);
    } else if (active) {
      down_[static_cast<std::size_t>(e.peer)] = 1;
    }
    if (t == start) note(e, t, nullptr);
    const bool stops = e.kind == config::FaultKind::kKill || e.kind == config::FaultKind::kRestart;
    if (stops && t == start) {
      // The process ends: its neighbours' connections to it close at once.
      if (e.kind == config::FaultKind::kKill) killed_[static_cast<std::size_t>(e.peer)] = 1;
      for (int q : neighboursOf(e.peer)) {
        if (!killed_[static_cast<std::size_t>(q)]) liveness_.connectionFailed(q, e.peer);
      }
    }
    if (e.kind == config::FaultKind::kRestart && t == end) GV_RETURN_IF_ERROR(restart(e, t));
  }
  updateHearing(clocks);
  return Status::ok();
}

std::vector<int> FaultRunner::neighboursOf(int p) const {
  std::vector<int> out;
  for (std::size_t q = 0; q < peers_.size(); ++q) {
    const auto& nb = peers_[q]->neighbours();
    if (std::find(nb.begin(), nb.end(), p) != nb.end()) out.push_back(static_cast<int>(q));
  }
  return out;
}

// The end of a restart, as `grapevine launch` runs it: a new process (a new core, the next
// incarnation) loads its last checkpoint (kept in memory), joins the running training (every edge
// resyncs both ways before anything of a neighbour is mixed) and continues at round t, its
// neighbours' round; each neighbour takes it back over new connections (a rejoin).
Status FaultRunner::restart(const config::FaultEvent& e, std::int64_t t) {
  const auto p = static_cast<std::size_t>(e.peer);
  if (!saved_[p])
    return failedPrecondition("restart of peer " + std::to_string(e.peer) + " at round " +
                              std::to_string(t) + ": no checkpoint kept");
  const std::uint32_t incarnation = ++incarnation_[p];
  GV_ASSIGN_OR_RETURN(auto core, engine::makePeer(plan_, e.peer, incarnation));
  GV_RETURN_IF_ERROR(core->restoreState(*saved_[p]));
  core->resyncAllEdges(/*await=*/true);
  peers_[p] = std::move(core);
  liveness_.restarted(e.peer, *peers_[p]);
  for (int q : neighboursOf(e.peer)) {
    if (!killed_[static_cast<std::size_t>(q)]) liveness_.reconnected(q, e.peer, incarnation);
  }
  note(e, t, &*saved_[p]);
  return Status::ok();
}

// A peer that is up hears each neighbour that is up over a link that is up. A silence begins when
// the neighbour stopped (its clock when it went down) or when the link went down (the later of the
// two clocks); a peer that is down notices nothing.
void FaultRunner::updateHearing(std::span<const double> clocks) {
  for (std::size_t i = 0; i < peers_.size(); ++i) {
    if (down_[i]) continue;
    const int me = static_cast<int>(i);
    for (int j : peers_[i]->neighbours()) {
      const auto k = static_cast<std::size_t>(j);
      const double at = down_[k] ? clocks[k] : std::max(clocks[i], clocks[k]);
      liveness_.setHeard(me, j, !down_[k] && !linkDown(me, j), at);
    }
  }
}

void FaultRunner::after(std::int64_t t) {
  if (events_.empty()) return;
  const int every = plan_.config.checkpoint.every;
  for (const auto& e : events_) {
    if (e.kind != config::FaultKind::kRestart || every <= 0 || (t + 1) % every != 0) continue;
    const auto p = static_cast<std::size_t>(e.peer);
    if (!down_[p] && t < *e.atRound) saved_[p] = peers_[p]->saveState();
  }
}

void FaultRunner::note(const config::FaultEvent& e, std::int64_t t,
                       const engine::PeerState* restored) {
  nlohmann::json j = engine::faultEventJson(e);
  j["executed_at_round"] = t;
  if (restored) {
    j["event"] = "back";
    j["resumed_from_round"] = restored->round;
    log::info("fault: ", e.describe(), ": back at round ", t, " from its checkpoint of round ",
              restored->round);
  } else {
    log::info("fault: ", e.describe());
  }
  log_.push_back(std::move(j));
}

}  // namespace grapevine::sim
