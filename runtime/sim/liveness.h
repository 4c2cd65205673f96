// Every simulated peer's view of its neighbours' liveness, driven from the simulator's virtual
// clock and fault schedule through the process driver's own membership code (engine::Membership
// and PeerCoreMembership): the events a real peer's transports raise are raised here when the
// schedule makes them happen, so `grapevine sim` runs the same silent -> dead -> revived, lost ->
// rejoined and quarantine moves (docs/faults.md) as `grapevine launch`.
//
//   real process (driver.cc)                      simulator (this class)
//   heartbeats missing for peers.dead_after       silence began (the neighbour went down, or the
//     -> Membership::heartbeatsLost                 link did) and dead_after passed on the peer's
//                                                   clock -> heartbeatsLost
//   heartbeats again -> heartbeatsBack            the neighbour (or the link) is up again
//   connection closed (a killed process)          kill, or the start of a restart
//     -> connectionFailed
//   new connections (a restarted process)         the end of a restart -> reconnected
//     -> reconnected
//   the core quarantined j -> quarantined,        the same, and j's view: connectionFailed
//     and j finds its connections closed
//
// A peer that is down itself (paused, restarting) notices nothing while down, and nothing when it
// is back: the heartbeats its neighbours sent meanwhile wait in its sockets (measured: a SIGSTOPped
// peer records no death when it continues).
//
// Thread: the per-peer calls (noticeSilence, deathAt, the round's lists) touch only that peer's
// state and core, so the simulator's pool may run them for different peers at once; the others
// run serially between the parallel phases.
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <vector>

#include "runtime/engine/membership.h"
#include "runtime/engine/peer_core.h"

namespace grapevine::sim {

class Liveness {
 public:
  static constexpr double kNever = std::numeric_limits<double>::infinity();

  // `peers`: the simulated cores, indexed by rank (each peer's membership drives its own);
  // `rounds`: run.rounds; `deadAfter`: peers.dead_after (seconds of silence until a neighbour is
  // dropped).
  Liveness(const std::vector<std::unique_ptr<engine::PeerCore>>& peers, std::int64_t rounds,
           double deadAfter);

  // ---- serial (between the parallel phases) ----
  // Whether peer i hears neighbour j's heartbeats from now on (`at`: when that changed on the
  // virtual clock). A silence that ends takes a neighbour dropped for it back (heartbeatsBack).
  void setHeard(int i, int j, bool heard, double at);
  // The connection between i and j closed at i's end (j was killed, or restarts; or j quarantined
  // i and closed it).
  void connectionFailed(int i, int j);
  // j connected again to i over new connections (a restarted process, `incarnation` its new one).
  void reconnected(int i, int j, std::uint32_t incarnation);
  // Peer p restarted with a new core (a new process): a new membership for it, all neighbours live.
  void restarted(int p, engine::PeerCore& core);

  // ---- per peer (parallel across peers) ----
  // When peer i drops neighbour j for silence (silence began + dead_after), or kNever while j is
  // heard or is not live at i.
  double deathAt(int i, int j) const;
  // Drops, at i, every live neighbour whose deathAt() is at or before `now` on i's clock.
  void noticeSilence(int i, double now);
  // i's core quarantined j (robust mixing; PeerCore::takeQuarantined). j finds its connection to i
  // closed: connectionFailed(j, i), serially.
  void quarantined(int i, int j) { note(i, of(i).membership->quarantined(j)); }
  // This round's moves at i (the round's record), and their end.
  const std::vector<int>& deadThisRound(int i) const { return of(i).membership->deadThisRound(); }
  const std::vector<int>& revivedThisRound(int i) const {
    return of(i).membership->revivedThisRound();
  }
  const std::vector<int>& rejoinedThisRound(int i) const {
    return of(i).membership->rejoinedThisRound();
  }
  void endRound(int i) { of(i).membership->endRound(); }

 private:
  struct Peer {
    std::unique_ptr<engine::PeerCoreMembership> core;
    std::unique_ptr<engine::Membership> membership;
    std::map<int, double> silentSince;  // neighbours not heard, since when (virtual seconds)
    std::map<int, std::uint64_t> gen;   // connections' generation per neighbour (reconnections)
  };
  Peer& of(int i) { return peers_[static_cast<std::size_t>(i)]; }
  const Peer& of(int i) const { return peers_[static_cast<std::size_t>(i)]; }
  // Logs a move at debug level (the driver logs them as warnings; a simulation of hundreds of
  // peers would print thousands of lines).
  static void note(int i, const engine::MembershipAction& a);

  std::int64_t rounds_;
  double deadAfter_;
  std::vector<Peer> peers_;
};

}  // namespace grapevine::sim
