// A neighbour's membership in the process driver: whether its edge is live, dropped for silence
// with its connections open, lost with its connections closed, finished, or quarantined, and what
// the driver must do when a liveness event comes (docs/faults.md). Driven by the inbox items of the
// loop thread (connection failed, heartbeats lost, heartbeats back, reconnected), by the core
// (quarantined) and by the driver (collectives begin and end). No I/O: each event returns a
// MembershipAction, and the driver carries it out (closes, redials, receives on the new
// connections, logs, records the SessionEvent). The round logic stays in PeerCore, which this
// class drives through MembershipCore (PeerCoreMembership in the driver, a fake in the tests).
//
// State, per neighbour (every neighbour starts kLive). A move not drawn here is a bug and aborts in
// every build type:
//
//            heartbeats lost                        connection failed
//   kLive -------------------------> kSilent ---------------------------> kLost
//     ^  <------ heartbeats back ------'   (close generation g, redial)     |
//     |  <------ reconnected (rejoin) -----'                                |
//     |  <------ reconnected (rejoin) --------------------------------------'
//     |
//   kLive --connection failed (or a send pending past io_timeout)--> kLost (close g, redial)
//   kLive --connection failed or heartbeats lost, its rounds finished--> kFinished (close g)
//   kFinished --reconnected (rejoin)--> kLive
//   kLive --reconnected during collectives--> kRejoining --collectives end (the rejoin)--> kLive
//   kLive --quarantined (by the core)--> kQuarantined (never back: a rejoin is refused, closed)
//
// During collectives (start-up sync, --resume's agreement, finalize averaging) heartbeats back and
// reconnections are deferred: no collective waits for a neighbour that is not in it. They are
// replayed in the order they were kept (revivals by rank, then rejoins by rank, the newest
// reconnection of each) when the collectives end (endCollectives()). A reconnection of a neighbour
// that is dead already (kSilent, kLost, kFinished, kQuarantined) leaves its state alone until then.
// Events that do not apply to a state change nothing (a kBack of a lost neighbour, a second
// failure of a lost one).
//
// Generations: each reconnection begins a new generation of the neighbour's connections (counted
// by the loop thread); gen() is the one the training thread is on, and inbox items of older ones
// are ignored (current()).
//
// Thread: the training thread only (the one that drains the inbox and drives PeerCore). Not
// thread-safe; the loop thread's view of the generations is the driver's own.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <vector>

#include "runtime/security/auth.h"
#include "runtime/security/key.h"

namespace grapevine::engine {

class PeerCore;

enum class NeighbourState : std::uint8_t {
  kLive,         // the edge is mixed, waited for and sent to
  kSilent,       // dropped for silence (no heartbeat for peers.dead_after): connections kept open,
                 // taken back (revived) when its heartbeats come again
  kLost,         // dropped, its connections closed (failed, or never connected): the lower rank of
                 // the edge redials it, the higher rank's listener waits; back only by a rejoin
  kFinished,     // closed after its last round (not counted dead); back only by a rejoin
  kRejoining,    // connected again during collectives: its old edge ended, the new one begins when
                 // they end
  kQuarantined,  // the core refused its messages too often: dropped and closed, never back
};

// "live", "silent", ...: for messages.
const char* toString(NeighbourState state);

// A neighbour connected again over new connections (the inbox's kRejoin).
struct Reconnection {
  int peer = -1;
  std::uint64_t gen = 0;  // the generation of the new connections
  std::uint32_t incarnation = 0;
  std::optional<security::Key> key;  // the new connection's session key
  std::int64_t theirRound = -1;      // its round in its hello (-1: not training yet)
  security::Cipher cipher = security::Cipher::kChaCha20Poly1305;  // negotiated with the key
};

// What Membership asks of the round logic (PeerCore; a fake in the tests).
class MembershipCore {
 public:
  virtual ~MembershipCore() = default;
  // Whether the core dropped the edge (PeerCore::isDead). The core drops a live edge by itself only
  // when it quarantines it (PeerCore::refuse), which the driver learns after the next message.
  virtual bool isDead(int neighbour) const = 0;
  // Whether the neighbour has finished its rounds, so that losing it now is no failure.
  virtual bool finishedRounds(int neighbour) const = 0;
  virtual void markDead(int neighbour, bool lost) = 0;
  virtual bool revive(int neighbour) = 0;
  virtual bool rejoin(const Reconnection& r) = 0;
};

// PeerCore as MembershipCore. finishedRounds: a neighbour counts as finished once its message of
// the last round it sends us (before `rounds`) is in; one that never sends to this peer (a one-way
// edge: directed graphs, one-peer-exponential rounds) cannot show its last round, so it counts as
// finished once this peer has sent it its last message (it closes the edge when that message is
// in; see the driver's linger()).
class PeerCoreMembership final : public MembershipCore {
 public:
  PeerCoreMembership(PeerCore& core, std::int64_t rounds, bool encrypt)
      : core_(core), rounds_(rounds), encrypt_(encrypt) {}
  bool isDead(int neighbour) const override;
  bool finishedRounds(int neighbour) const override;
  void markDead(int neighbour, bool lost) override;
  bool revive(int neighbour) override;
  bool rejoin(const Reconnection& r) override;

 private:
  PeerCore& core_;
  std::int64_t rounds_;
  bool encrypt_;
};

// What the driver does after an event, in this order: close, redial, restart the send clock,
// start receiving; then log and record as `kind` says.
struct MembershipAction {
  enum class Kind {
    kNone,              // nothing changed
    kDeferred,          // kept until the collectives end
    kDropped,           // kLive -> kSilent or kLost: SessionEvent kDead, "is dead" (+ isolated)
    kFinished,          // kLive -> kFinished: a debug line only
    kLostAfterSilence,  // kSilent -> kLost: "(dead since it fell silent) lost its connection"
    kRevived,           // kSilent -> kLive: SessionEvent kRevived "heartbeats again"
    kRejoined,          // -> kLive on new connections: SessionEvent kRevived "connected again"
    kRejoinRefused,     // kQuarantined stays: "connected again but stays dropped"
    kQuarantined,       // -> kQuarantined: SessionEvent kDead with the core's why
  };
  Kind kind = Kind::kNone;
  int peer = -1;
  NeighbourState from = NeighbourState::kLive;
  NeighbourState to = NeighbourState::kLive;
  std::optional<std::uint64_t> close;   // close the connections of this generation
  std::optional<std::uint64_t> redial;  // dial again unless the loop has a newer generation
  bool restartSendClock = false;        // a pending send to it counts its io_timeout from now
  std::optional<std::uint64_t> startReceiving;  // post receives on the new connections
  std::uint32_t incarnation = 0;                // kRejoined: the neighbour's
};

class Membership {
 public:
  // `rank`: this peer's (the lower rank of an edge redials it).
  Membership(int rank, MembershipCore& core) : rank_(rank), core_(core) {}
  Membership(const Membership&) = delete;
  Membership& operator=(const Membership&) = delete;

  // ---- events (each returns what the driver must do) ----
  // The edge failed (a connection closed or failed, a send failed or stayed pending past
  // transport.io_timeout, not connected when the bootstrap completed, or, in linger(), its last
  // message is in).
  MembershipAction connectionFailed(int j);
  // No heartbeat for peers.dead_after: dropped with its connections kept open.
  MembershipAction heartbeatsLost(int j);
  // Heartbeats again: a kSilent neighbour is taken back (deferred during collectives).
  MembershipAction heartbeatsBack(int j);
  // New connections (deferred during collectives). From here on gen(j) is r.gen.
  MembershipAction reconnected(const Reconnection& r);
  // The core quarantined j (PeerCore::takeQuarantined): its edge is dead there already.
  MembershipAction quarantined(int j);

  // ---- collectives ----
  void beginCollectives() { inCollectives_ = true; }
  // What was deferred, for the driver to replay one by one (heartbeatsBack(), then reconnected())
  // after the collectives ended.
  struct Deferred {
    std::set<int> back;
    std::map<int, Reconnection> rejoins;
  };
  Deferred endCollectives();
  // The collectives stopped early (cancelled): nothing is deferred any more, but what was stays
  // kept for the next endCollectives().
  void leaveCollectives() { inCollectives_ = false; }
  bool inCollectives() const { return inCollectives_; }

  // ---- queries ----
  NeighbourState state(int j) const;
  // The generation of j's connections the training thread is on.
  std::uint64_t gen(int j) const;
  // Whether an inbox item of generation `gen` is of j's current connections.
  bool current(int j, std::uint64_t gen) const { return gen == this->gen(j); }
  // This round's changes, in order (the round's record and metrics); endRound() clears them.
  const std::vector<int>& deadThisRound() const { return deadThisRound_; }
  const std::vector<int>& revivedThisRound() const { return revivedThisRound_; }
  const std::vector<int>& rejoinedThisRound() const { return rejoinedThisRound_; }
  void endRound();

  // Whether `from` -> `to` is a move of the diagram above (a state to itself is no move).
  static bool legal(NeighbourState from, NeighbourState to);

 private:
  struct Neighbour {
    NeighbourState state = NeighbourState::kLive;
    std::uint64_t gen = 0;
  };
  // j's record, after noticing a quarantine the core made by itself (kLive -> kQuarantined).
  Neighbour& observe(int j);
  void moveTo(int j, Neighbour& n, NeighbourState to);  // aborts on an illegal move
  MembershipAction drop(int j, bool keepOpen);
  MembershipAction rejoin(const Reconnection& r);

  const int rank_;
  MembershipCore& core_;
  std::map<int, Neighbour> neighbours_;
  // Quarantines noticed before the core reported them (observe()): reported once.
  std::set<int> unreported_;
  bool inCollectives_ = false;
  Deferred deferred_;
  std::vector<int> deadThisRound_, revivedThisRound_, rejoinedThisRound_;
};

}  // namespace grapevine::engine
