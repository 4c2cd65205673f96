#include "runtime/sim/liveness.h"

#include <string>

#include "runtime/common/log.h"

namespace grapevine::sim {

using engine::MembershipAction;
using engine::NeighbourState;

Liveness::Liveness(const std::vector<std::unique_ptr<engine::PeerCore>>& peers, std::int64_t rounds,
                   double deadAfter)
    : rounds_(rounds), deadAfter_(deadAfter), peers_(peers.size()) {
  for (std::size_t i = 0; i < peers.size(); ++i) restarted(static_cast<int>(i), *peers[i]);
}

void Liveness::restarted(int p, engine::PeerCore& core) {
  Peer& peer = of(p);
  peer.membership.reset();
  // No keys in the simulator: nothing is sealed, so nothing is encrypted either.
  peer.core = std::make_unique<engine::PeerCoreMembership>(core, rounds_, /*encrypt=*/false);
  peer.membership = std::make_unique<engine::Membership>(p, *peer.core);
  peer.silentSince.clear();
  peer.gen.clear();
}

void Liveness::note(int i, const MembershipAction& a) {
  using Kind = MembershipAction::Kind;
  const char* what = nullptr;
  switch (a.kind) {
    case Kind::kDropped:
      what = a.to == NeighbourState::kSilent ? "is dead (silent)" : "is dead (connection lost)";
      break;
    case Kind::kLostAfterSilence:
      what = "(dead since it fell silent) lost its connection";
      break;
    case Kind::kRevived:
      what = "is back (heartbeats again)";
      break;
    case Kind::kRejoined:
      what = "connected again";
      break;
    case Kind::kQuarantined:
      what = "is quarantined";
      break;
    case Kind::kFinished:
    case Kind::kRejoinRefused:
    case Kind::kNone:
    case Kind::kDeferred:
      return;
  }
  log::debug("peer ", i, ": neighbour ", a.peer, " ", what);
}

void Liveness::setHeard(int i, int j, bool heard, double at) {
  Peer& p = of(i);
  if (!heard) {
    p.silentSince.try_emplace(j, at);
    return;
  }
  if (p.silentSince.erase(j) == 0) return;
  note(i, p.membership->heartbeatsBack(j));
}

void Liveness::connectionFailed(int i, int j) { note(i, of(i).membership->connectionFailed(j)); }

void Liveness::reconnected(int i, int j, std::uint32_t incarnation) {
  Peer& p = of(i);
  engine::Reconnection r;
  r.peer = j;
  r.gen = ++p.gen[j];
  r.incarnation = incarnation;
  // A restarted process dials before its rounds begin: its hello names no round (-1).
  r.theirRound = -1;
  note(i, p.membership->reconnected(r));
}

double Liveness::deathAt(int i, int j) const {
  const Peer& p = of(i);
  const auto it = p.silentSince.find(j);
  if (it == p.silentSince.end() || p.membership->state(j) != NeighbourState::kLive) return kNever;
  return it->second + deadAfter_;
}

void Liveness::noticeSilence(int i, double now) {
  Peer& p = of(i);
  for (const auto& [j, since] : p.silentSince) {
    if (p.membership->state(j) == NeighbourState::kLive && since + deadAfter_ <= now) {
      note(i, p.membership->heartbeatsLost(j));
    }
  }
}

}  // namespace grapevine::sim
