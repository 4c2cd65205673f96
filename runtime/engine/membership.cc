#include "runtime/engine/membership.h"

#include <cstdlib>
#include <utility>

#include "runtime/common/log.h"
#include "runtime/engine/peer_core.h"

namespace grapevine::engine {

const char* toString(NeighbourState state) {
  switch (state) {
    case NeighbourState::kLive:
      return "live";
    case NeighbourState::kSilent:
      return "silent";
    case NeighbourState::kLost:
      return "lost";
    case NeighbourState::kFinished:
      return "finished";
    case NeighbourState::kRejoining:
      return "rejoining";
    case NeighbourState::kQuarantined:
      return "quarantined";
  }
  return "?";
}

bool PeerCoreMembership::isDead(int neighbour) const { return core_.isDead(neighbour); }

bool PeerCoreMembership::finishedRounds(int neighbour) const {
  const std::int64_t expected = core_.lastRoundExpectedFrom(neighbour, rounds_);
  return expected >= 0 ? core_.lastRoundFrom(neighbour) >= expected
                       : core_.round() >= core_.lastRoundSendingTo(neighbour, rounds_);
}

void PeerCoreMembership::markDead(int neighbour, bool lost) { core_.markDead(neighbour, lost); }

bool PeerCoreMembership::revive(int neighbour) { return core_.revive(neighbour); }

bool PeerCoreMembership::rejoin(const Reconnection& r) {
  return core_.rejoin(r.peer, r.incarnation, r.key, encrypt_, r.theirRound, r.cipher);
}

bool Membership::legal(NeighbourState from, NeighbourState to) {
  using S = NeighbourState;
  switch (from) {
    case S::kLive:
      return to != S::kLive;
    case S::kSilent:
      return to == S::kLive || to == S::kLost;
    case S::kLost:
    case S::kFinished:
    case S::kRejoining:
      return to == S::kLive;
    case S::kQuarantined:
      return false;
  }
  return false;
}

void Membership::moveTo(int j, Neighbour& n, NeighbourState to) {
  if (!legal(n.state, to)) {
    // Always on (the default build defines NDEBUG): a neighbour taken back from quarantine, or
    // dropped twice, would be mixed or counted in a way no fault explains.
    log::error("membership of neighbour ", j, ": ", toString(n.state), " -> ", toString(to),
               " is not a move of the state diagram");
    std::abort();
  }
  n.state = to;
}

Membership::Neighbour& Membership::observe(int j) {
  Neighbour& n = neighbours_[j];
  if (n.state == NeighbourState::kLive && core_.isDead(j)) {
    // The core drops a live edge by itself only by quarantining it (reported after the next
    // message; until then it behaves as the quarantined one it is).
    moveTo(j, n, NeighbourState::kQuarantined);
    unreported_.insert(j);
  }
  return n;
}

MembershipAction Membership::connectionFailed(int j) { return drop(j, /*keepOpen=*/false); }

MembershipAction Membership::heartbeatsLost(int j) { return drop(j, /*keepOpen=*/true); }

MembershipAction Membership::drop(int j, bool keepOpen) {
  Neighbour& n = observe(j);
  MembershipAction a;
  a.peer = j;
  a.from = a.to = n.state;
  if (n.state != NeighbourState::kLive) {
    // Dropped for silence before, failed now: it will not come back on these connections.
    if (!keepOpen && n.state == NeighbourState::kSilent) {
      moveTo(j, n, NeighbourState::kLost);
      a.kind = MembershipAction::Kind::kLostAfterSilence;
      a.to = n.state;
      a.close = n.gen;
      if (rank_ < j) a.redial = n.gen;
    }
    return a;
  }
  const bool finished = core_.finishedRounds(j);
  core_.markDead(j, /*lost=*/!finished);
  if (keepOpen && !finished) {
    moveTo(j, n, NeighbourState::kSilent);
  } else {
    moveTo(j, n, finished ? NeighbourState::kFinished : NeighbourState::kLost);
    a.close = n.gen;
    if (!finished && rank_ < j) a.redial = n.gen;
  }
  a.to = n.state;
  if (finished) {
    a.kind = MembershipAction::Kind::kFinished;
    return a;
  }
  a.kind = MembershipAction::Kind::kDropped;
  deadThisRound_.push_back(j);
  return a;
}

MembershipAction Membership::heartbeatsBack(int j) {
  MembershipAction a;
  a.peer = j;
  if (inCollectives_) {
    deferred_.back.insert(j);
    a.kind = MembershipAction::Kind::kDeferred;
    return a;
  }
  Neighbour& n = observe(j);
  a.from = a.to = n.state;
  if (n.state != NeighbourState::kSilent || !core_.revive(j)) return a;
  moveTo(j, n, NeighbourState::kLive);
  a.to = n.state;
  a.kind = MembershipAction::Kind::kRevived;
  a.restartSendClock = true;
  revivedThisRound_.push_back(j);
  return a;
}

MembershipAction Membership::reconnected(const Reconnection& r) {
  const int j = r.peer;
  Neighbour& n = observe(j);
  n.gen = r.gen;  // from here on, what the training thread asks for is of the new connections
  if (!inCollectives_) return rejoin(r);
  MembershipAction a;
  a.peer = j;
  a.from = n.state;
  a.kind = MembershipAction::Kind::kDeferred;
  // No collective waits for a neighbour that is not in it: the old edge ends now, the new one
  // begins after the collectives.
  if (n.state == NeighbourState::kLive) {
    core_.markDead(j, /*lost=*/false);
    moveTo(j, n, NeighbourState::kRejoining);
  }
  a.to = n.state;
  deferred_.rejoins[j] = r;
  return a;
}

MembershipAction Membership::rejoin(const Reconnection& r) {
  const int j = r.peer;
  Neighbour& n = neighbours_[j];
  MembershipAction a;
  a.peer = j;
  a.from = n.state;
  a.incarnation = r.incarnation;
  if (!core_.rejoin(r)) {
    // Quarantined: the new connections are closed, and it stays dropped.
    if (n.state == NeighbourState::kSilent) moveTo(j, n, NeighbourState::kLost);
    a.to = n.state;
    a.kind = MembershipAction::Kind::kRejoinRefused;
    a.close = r.gen;
    return a;
  }
  if (n.state != NeighbourState::kLive) moveTo(j, n, NeighbourState::kLive);
  a.to = n.state;
  a.kind = MembershipAction::Kind::kRejoined;
  a.restartSendClock = true;
  a.startReceiving = r.gen;
  rejoinedThisRound_.push_back(j);
  return a;
}

MembershipAction Membership::quarantined(int j) {
  Neighbour& n = neighbours_[j];
  MembershipAction a;
  a.peer = j;
  a.from = n.state;
  if (n.state == NeighbourState::kLive) {
    moveTo(j, n, NeighbourState::kQuarantined);
  } else if (!unreported_.erase(j)) {
    log::error("membership of neighbour ", j, ": quarantined while ", toString(n.state));
    std::abort();
  } else {
    a.from = NeighbourState::kLive;  // noticed before the core reported it (observe())
  }
  a.to = n.state;
  a.kind = MembershipAction::Kind::kQuarantined;
  a.close = n.gen;
  deadThisRound_.push_back(j);
  return a;
}

Membership::Deferred Membership::endCollectives() {
  inCollectives_ = false;
  return std::exchange(deferred_, {});
}

NeighbourState Membership::state(int j) const {
  const auto it = neighbours_.find(j);
  return it == neighbours_.end() ? NeighbourState::kLive : it->second.state;
}

std::uint64_t Membership::gen(int j) const {
  const auto it = neighbours_.find(j);
  return it == neighbours_.end() ? 0 : it->second.gen;
}

void Membership::endRound() {
  deadThisRound_.clear();
  revivedThisRound_.clear();
  rejoinedThisRound_.clear();
}

}  // namespace grapevine::engine
