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

// The collectives of finalize averaging over the plan's graph (the union of a time-varying one),
// for a model of `modelValues` values. Connected, with a spanning tree (collectiveTree) at most
// kRoundWindow / 4 high: height + chunks - 1 kTreeSum steps then as many kTreeBroadcast steps, the
// exact average (summed in double along the tree, sent back in f32) at every peer, each peer
// sending its model to its parent once and to each child once, in pipelined chunks. Otherwise
// enough kAverage rounds to bring the spread of the models below 1e-7 of its start (from the
// second-largest eigenvalue modulus of its Metropolis matrix), then n - 1 kAdoptLowest rounds so
// every connected live peer holds the same values.
// With `ring` (and ringAveraging()): the ring kinds instead, (n - 1) kRingSum, (n - 1) kRingGather
// and a kRingAck.
std::vector<CollectiveKind> averagingCollectives(const RunPlan& plan, std::size_t modelValues,
                                                 bool ring = false);
// Whether finalize averaging can go around the ring 0 -> 1 -> ... -> n-1 -> 0: n >= 3, the union
// graph has every edge (r, r + 1 mod n), and the model is over one tree chunk (treeChunks() >= 2).
// Then each peer sends 2 (n - 1) / n of the model in 2 n - 1 steps, where the tree has its root
// take the whole model from each child and send it back to each; for a smaller model the tree's
// fewer steps win. The peers run it only when none has lost a ring neighbour: each runs
// ringAgreementCollectives() (n - 1 kMinimum rounds, enough for any connected part) over the
// flag "both my ring neighbours are alive" first, and the tree when the minimum is 0.
bool ringAveraging(const RunPlan& plan, std::size_t modelValues);
std::vector<CollectiveKind> ringAgreementCollectives(const RunPlan& plan);
// `rank`'s place in the breadth-first spanning tree of the union graph from rank 0 (neighbours
// taken in increasing rank): the same tree at every peer, with treeChunks(modelValues) chunks.
// height -1 when the graph is disconnected.
CollectiveTree collectiveTree(const RunPlan& plan, int rank, std::size_t modelValues = 0);
// Chunks of a tree collective over `modelValues` values: one per kTreeChunkBytes of f64 state
// (at least 1, at most kMaxTreeChunks). 0 values: 1.
inline constexpr std::size_t kTreeChunkBytes = std::size_t{1} << 20;
inline constexpr int kMaxTreeChunks = 16;
int treeChunks(std::size_t modelValues);
// Whether a sequence of collectives has tree or ring steps (then every peer needs its
// collectiveTree set).
bool usesTree(const std::vector<CollectiveKind>& kinds);
// The start-up sync: diameter-many kAdoptLowest rounds (every peer gets the lowest rank's model).
std::vector<CollectiveKind> adoptLowestCollectives(const RunPlan& plan);

// Returns ok when the peer ran all its rounds (or was stopped cleanly), else the first fatal error
// (bootstrap failure, handshake mismatch, bad local state, an output folder or file that cannot be
// written). Losing neighbours is not fatal. The transports are closed on the loop thread and that
// thread joined before it returns, on every path.
Status runPeerProcess(const RunPlan& plan, const PeerRunOptions& options);

}  // namespace grapevine::engine
