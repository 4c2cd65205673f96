// The process driver: one peer of a real run. Boots its neighbour connections over the configured
// transport (coordinator-free: see runtime/transport/bootstrap.h), then runs rounds with two
// threads: the engine loop thread owns the transports (sends, receives, heartbeats) and the
// training thread (the caller's) computes, hands each round's messages to the loop, and waits for
// its neighbours' with a deadline. Writes DIR/peer-<rank>.jsonl, DIR/peer-<rank>.final.json and
// DIR/model-<rank>.bin.
#pragma once

#include <atomic>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "runtime/engine/collectives.h"
#include "runtime/engine/setup.h"

namespace grapevine::engine {

struct PeerRunOptions {
  int rank = 0;
  std::uint32_t incarnation = 0;
  std::string outDir;  // default: config output.dir
  // Set from a signal handler: finish or abandon the current round within 2 s, flush, exit.
  const std::atomic<bool>* stop = nullptr;
  // The API drives the peer (workload.name external): the caller computes gradients (no overlap
  // precompute here) and reports its own metrics (no built-in evaluation).
  bool external = false;
  // `--resume`: after the bootstrap every peer agrees with the others on the newest checkpoint
  // round they all have (checkpoint.h) and continues from it; with none anywhere, from round 0.
  // Every peer of the run must be started with it.
  bool resume = false;
  // Set from a signal handler (`grapevine launch` sends SIGUSR1 to a restarted peer once every
  // other peer of the run has exited): no neighbour will come any more, so a bootstrap waiting for
  // missing neighbours stops waiting. A resumed peer then trains on alone from its checkpoint.
  const std::atomic<bool>* neighboursGone = nullptr;
};

// What happened to a neighbour (or the run), for the API's event queue.
struct SessionEvent {
  enum class Kind { kSuspect, kDead, kDiverged, kRevived };  // kRevived: a dead one came back
  Kind kind = Kind::kSuspect;
  int peer = -1;
  std::int64_t round = -1;
  std::string message;
};

// One peer of a real run, round by round: what runPeerProcess() drives in a loop and the API
// (include/grapevine/) exposes to the caller's training loop. Call open(), then for each round
// startRound() and completeRound(), then finish(). One thread calls every method (the training
// thread); the session runs its own loop thread for the transports between open() and finish().
class PeerSession {
 public:
  // `core`: the peer's round logic (makePeer(), or the API's with its external workload).
  PeerSession(const RunPlan& plan, const PeerRunOptions& options, std::unique_ptr<PeerCore> core);
  // Shuts the transports down when finish() was not reached.
  ~PeerSession();
  PeerSession(const PeerSession&) = delete;
  PeerSession& operator=(const PeerSession&) = delete;

  // Opens the output folder and records, starts the loop thread and connects to every neighbour.
  // kCancelled when options.stop was raised during the bootstrap.
  Status open();
  // Collective rounds (PeerCore::beginCollective), one per entry, then the result becomes the
  // model. Every peer must run the same sequence.
  Status runCollectives(const std::vector<CollectiveKind>& kinds);
  // Rounds: startRound() takes the local step (or the caller's, per `input`) and sends the
  // messages; completeRound() waits for the neighbours' (up to algorithm.round_timeout), mixes and
  // writes the round's record when due. completeRound() returns kAborted when training diverged
  // (here or at a peer whose notice arrived): the run is over, call finish(). startRound() first
  // waits for the previous round's sends (see waitPreviousSends in driver.cc) and returns
  // kCancelled when options.stop is raised meanwhile.
  Status startRound(const RoundInput& input = {});
  Status completeRound();
  std::int64_t roundsDone() const;
  // After open(): the checkpoint round this peer continues after (-1: none restored), and whether
  // it joined a training already under way (its neighbours were past round 0, or none came to a
  // resumed peer's bootstrap) instead of starting round 0 with the others.
  std::int64_t resumedFrom() const;
  bool joinedRunning() const;
  // The round of the newest checkpoint taken (checkpoint.every; written in the background when
  // checkpoint.background), -1 before the first.
  std::int64_t lastCheckpointRound() const;
  bool stopRequested() const;
  // Ends the run: after a divergence, notices to the neighbours; else lingers until the live
  // neighbours have our last message. With `average` (and no divergence) then runs the finalize
  // averaging (averagingCollectives()). Writes the final record, DIR/model-<rank>.bin and
  // DIR/peer-<rank>.final.json, then disconnects. Idempotent.
  Status finish(bool average = false);

  PeerCore& core();
  // Events since the last call (neighbours suspect or dead, divergence), oldest first.
  std::vector<SessionEvent> takeEvents();
  // The caller's metrics: merged into the next record (test_accuracy / test_loss are also the
  // peer's evaluation in the final record and the summary).
  void addMetrics(const nlohmann::json& metrics);

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

// Returns ok when the peer ran all its rounds (or was stopped cleanly), else the first fatal error
// (bootstrap failure, handshake mismatch, bad local state, an output folder or file that cannot be
// written). Losing neighbours is not fatal. The transports are closed on the loop thread and that
// thread joined before it returns, on every path.
Status runPeerProcess(const RunPlan& plan, const PeerRunOptions& options);

// The incarnation of a restarted peer (--resume, the API's resume) that was given none: the
// clock's microseconds, at least 1 — distinct for each restart without any state to keep, so its
// neighbours drop what its previous incarnation still had in flight.
std::uint32_t freshIncarnation();

}  // namespace grapevine::engine
