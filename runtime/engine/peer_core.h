// One peer's round logic, with no I/O: local optimizer steps, the algorithm's message, per-edge
// exactly-once in-order delivery, replica checks, suspect/dead handling and mixing. Drivers move
// the bytes: the process driver over a real transport (driver.h), the in-process lockstep driver
// for tests and simulation (lockstep.h). Both call the same methods in the same order:
//
//   beginRound(t)                      local step(s) on x, then the message for round t (an
//                                      algorithm that tracksDirection() replaces the optimizer's
//                                      direction u before each step: gradient tracking)
//   outgoing(j) for j in sendTo()      the bytes to send to neighbour j
//   onMessage(j, bytes)                each message from a neighbour, in per-edge arrival order
//   [precomputeGradient()]             algorithm.overlap: the next round's gradient, at x_half (the
//                                      model before mixing); drivers call it every round or never
//   endRound()                         mix over the neighbours whose round-t message arrived
//
// A neighbour whose round-t message has not arrived at endRound() is suspect for that round: its
// weight goes to this peer's own copy; its message is still applied in order when it comes (CHOCO).
// Thread contract: one thread calls every method (the driver's training thread).
#pragma once

#include <algorithm>
#include <cstdint>
#include <deque>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "runtime/algorithms/algorithm.h"
#include "runtime/common/lazy_buffer.h"
#include "runtime/common/status.h"
#include "runtime/engine/attacks.h"
#include "runtime/engine/collectives.h"
#include "runtime/engine/edges.h"
#include "runtime/engine/health.h"
#include "runtime/engine/local_trainer.h"
#include "runtime/engine/peer_state.h"
#include "runtime/security/auth.h"
#include "runtime/security/key.h"
#include "runtime/train/optimizer.h"
#include "runtime/train/outer.h"
#include "runtime/train/workload.h"
#include "topology/topology.h"

namespace grapevine::engine {

struct Envelope;  // envelope.h

struct PeerCoreOptions {
  int rank = 0;
  std::uint32_t incarnation = 0;
  int localSteps = 1;
  // outer.*: an outer step after each round's mixing, from the round's anchor (train/outer.h).
  train::OuterOptions outer;
  // allreduce and diloco (algorithms::averagesEachRound): the round sends no gossip message; its
  // driver runs the averaging collectives (roundAveragingCollectives()) after endRound(), inside
  // setRoundCollectives(true), then finishAveragedRound().
  bool averageEachRound = false;
  // ... those collectives and this peer's place in their ring or tree (setup.cc fills them).
  std::vector<CollectiveKind> roundCollectives;
  CollectiveTree roundTree;
  int checkEvery = 50;            // replica hash check period in rounds (0: never)
  bool dynamicMetropolis = true;  // recompute Metropolis weights from live degrees (static graphs)
  bool lazyMixing = false;        // with dynamicMetropolis: halve them ((I + W) / 2)
  // CHOCO and gt (CHOCO is the default algorithm): every round to the union of neighbours.
  bool sendToAllNeighbours = true;
  // The API: a NaN loss means "not reported" (the loss checks of divergence detection are skipped),
  // not "diverged".
  bool lossMayBeUnknown = false;
  // Collectives (below) may run: the wire buffers then also fit a dense f64 state.
  bool collectives = false;
  // Push-sum with algorithm.overlap (overlapped SGP): round t waits only for the messages of round
  // t - mixDelay, and the algorithm mixes the shares of rounds <= t - mixDelay (MixWeights::
  // dueRound); the later ones stay in flight. 0: every round waits for its own messages.
  int mixDelay = 0;
  // With mixDelay > 0, the rounds that wait for and mix every share sent so far ("sync" rounds):
  // the last one (rounds - 1, so nothing is left in flight at the end) and each checkpointed one
  // ((t + 1) % syncEvery == 0, so a checkpoint holds every share sent to the peer). 0: none.
  // rounds: run.rounds (also the newest round a neighbour can be at, noteRound()).
  std::int64_t rounds = 1000;
  std::int64_t syncEvery = 0;
  // security.max_delta_ratio (0: no bound): what one received message may change, relative to the
  // model (deltaLimit()).
  double maxDeltaRatio = 1e6;
  // A neighbour whose messages are refused in this many rounds in a row (rounds of this peer with
  // a refused message and none of its messages applied since; a refusal after authentication only:
  // a forgery by a third party does not count) is quarantined: its edge dropped for good
  // (takeQuarantined(), counters().quarantined) instead of resynced forever. Many refusals within
  // one round count once (a burst of corruption is not a pattern). 0: never.
  int quarantineAfter = 16;
  // How far a neighbour may be ahead in a run where nobody was away (the driver's catch-up skips a
  // peer further behind to the neighbours' round). A neighbour that came back (revive(), rejoin())
  // is waited for again once it is within this many rounds of ours: were it waited for only at our
  // round, this peer would run at its own pace while the neighbour chases it, skipping rounds.
  std::int64_t catchUpLag = 32;
  // algorithm.staleness (CHOCO; 0: every round waits for every neighbour's message of the round):
  // a round waits for neighbour j only while j's newest message is of a round before round -
  // staleness, and mixes a neighbour whose message of the round has not come with its replica as
  // it stands (exact: every message of j applied in order). A round whose every neighbour's
  // message of it already came before it began takes no local steps (RoundInput::skipCompute,
  // neighboursAhead()): a slower peer computes fewer rounds instead of holding the others back.
  int staleness = 0;
};

// What one round's messages may change of a model x (security.max_delta_ratio): the ratio times
// max(1, largest |x|), capped below float's largest; 0 when the ratio is 0 (no bound).
float deltaLimit(double maxDeltaRatio, std::span<const float> x);

class PeerCore {
 public:
  PeerCore(const PeerCoreOptions& options, const topology::Schedule& schedule,
           std::unique_ptr<train::Workload> workload, std::unique_ptr<train::Optimizer> optimizer,
           std::unique_ptr<algorithms::Algorithm> algorithm, std::vector<float> x0);

  int rank() const { return options_.rank; }
  std::int64_t round() const { return round_; }

  Status beginRound(std::int64_t round, const RoundInput& input = {});
  const std::vector<int>& sendTo() const { return sendTo_; }
  std::span<const std::uint8_t> outgoing(int neighbour);
  // Checks, in order: the seal (with an edge key), the envelope (readEnvelope), the sender, and
  // the sequence number (lower: a duplicate; more than kSequenceWindow ahead: dropped as
  // `sequence_window`, so one forged number cannot make every later message a duplicate). Every
  // drop is counted in counters().dropped by reason.
  void onMessage(int neighbour, std::span<const std::uint8_t> bytes);
  // Authenticates every message on the edge to `neighbour` from now on with its session key
  // (transport::Neighbour::sessionKey): outgoing envelopes are sealed (kFlagSealed, a tag after the
  // payload; with `encrypt` the payload is encrypted), and an incoming one whose tag does not
  // verify is dropped as `auth` before anything in it is read. Call before the first round.
  // `cipher`: the AEAD of encrypted messages, as negotiated in the handshake.
  void setEdgeKey(int neighbour, const security::Key& key, bool encrypt,
                  security::Cipher cipher = security::Cipher::kChaCha20Poly1305);
  // Fault injection (`faults:` kind corrupt, docs/faults.md): while on, every training message this
  // peer sends from the next beginRound on has one payload byte flipped after its checksum was
  // computed and before it is sealed, as a peer with bad memory or a bad NIC would send it: its
  // neighbours refuse each one (`crc`) and quarantine it after quarantineAfter rounds.
  void setCorruptOutgoing(bool on) { corruptOutgoing_ = on; }
  bool corruptOutgoing() const { return corruptOutgoing_; }
  // An attack (`faults:` kinds sign-flip .. replay, runtime/engine/attacks.h): from the next
  // beginRound on this peer publishes the attacker's crafted vector instead of its model; nullopt
  // ends it.
  void setAttacker(std::optional<Attacker> attacker) { attacker_ = std::move(attacker); }
  const std::optional<Attacker>& attacker() const { return attacker_; }
  // Bounds on what a neighbour can make this peer hold (docs/security.md, "Bounds"). A training
  // message more than kRoundWindow rounds ahead of this peer's round (round 0 before the first),
  // or one that finds kRoundWindow messages of future rounds already held for its edge, is dropped
  // as `round_window` before its sequence number is taken (so the edge's next message still
  // applies; a legitimate one dropped so shows as a `gap` and a resync). The same holds for
  // collective messages against the current collective's index. A legitimate neighbour sends one
  // message per round, so it is only refused when it is kRoundWindow rounds ahead of this peer;
  // memory held per edge stays below kRoundWindow messages of at most maxWireBytes() each.
  static constexpr std::int64_t kRoundWindow = 64;
  // A neighbour's resync (snapshot) requests are served at most once every kSnapshotMinRounds
  // rounds per edge: one more within that time is counted as `resync_rate` and coalesced into the
  // one pending snapshot, sent in the first round the limit allows (a dense snapshot per request
  // would be a cheap amplification).
  static constexpr std::int64_t kSnapshotMinRounds = 8;
  // Messages held for later (future rounds and collectives), over every edge.
  std::size_t heldMessages() const { return edges_.heldMessages(); }
  const std::vector<int>& expectedFrom() const { return expected_; }
  bool roundComplete() const;
  // The live neighbours whose message of this round roundComplete() still waits for.
  std::vector<int> missingThisRound() const;
  // algorithm.staleness: whether every live neighbour this peer hears from in `round` has sent a
  // message of that round or a later one already (false without such neighbours).
  bool neighboursAhead(std::int64_t round) const;
  // The live neighbours this peer hears from in `round` (as beginRound() will expect them).
  std::vector<int> liveSenders(std::int64_t round) const;
  int staleness() const { return options_.staleness; }
  // Whether neighbour j's message of this round came (applied, or held back as `heard`).
  bool heardThisRound(int j) const {
    const Edge* e = edges_.find(j);
    return e != nullptr && (e->arrived || e->heard);
  }
  // Whether j's last message was refused and none of its messages was applied since (a refusal
  // streak towards quarantine): bytes still arriving from it are no reason to wait past the round
  // timeout (a corrupting neighbour's frames, heartbeats included, would hold the round forever).
  bool refusing(int j) const {
    const Edge* e = edges_.find(j);
    return e != nullptr && e->refusedRounds > 0;
  }
  // PeerCoreOptions::mixDelay (0: none).
  int mixDelay() const { return options_.mixDelay; }
  std::int64_t catchUpLag() const { return options_.catchUpLag; }
  // With mixDelay: this round mixes the shares sent in rounds <= dueRound().
  std::int64_t dueRound() const { return dueRound_; }
  void precomputeGradient();
  // Mixes; returns the neighbours that were suspect this round.
  std::vector<int> endRound();

  // Divergence. beginRound() checks the model and loss after the local steps (before the compressor
  // sees them) and endRound() the model after mixing: a non-finite loss or model, a loss average
  // 1000x its lowest and 10x the first round's, or |x| 1000x the initial norm (or 1000 for a zero
  // initial model) set divergence(). Then beginRound() sends nothing (sendTo() is empty) and the
  // driver abandons the round. A neighbour's divergence notice (onMessage) sets it too.
  const std::optional<Divergence>& divergence() const { return health_.divergence(); }
  // Stops the current round after a divergence: the model goes back to its value at the start of
  // the round (the last finite one) and round() to the last completed round.
  void abandonRound();
  // The divergence notice for neighbour j (an envelope with kFlagDiverged carrying divergence()),
  // in a buffer of its own (the round's message may still be in flight). Requires divergence().
  std::span<const std::uint8_t> divergenceNotice(int neighbour);
  // Collectives (runtime/engine/collectives.h: what each kind sends and combines).
  // beginCollective() starts the next one from the current model (the first of a sequence) or the
  // previous collective's state; sendTo()/outgoing() give the messages, expectedFrom() says whose
  // this peer waits for, onMessage() queues theirs and collectiveComplete() says when all arrived;
  // endCollective() combines (a neighbour whose message is missing is left out) and
  // finishCollectives() writes the state into the model.
  // `initial` (at most kMaxSmallCollective values, the first of a sequence only): the state is that
  // instead of the model, and finishCollectives() leaves the model alone (collectiveState() has
  // the result).
  void beginCollective(CollectiveKind kind, std::span<const double> initial = {});
  const std::vector<double>& collectiveState() const { return collectives_.state(); }
  bool collectiveComplete() const;
  void endCollective();
  void finishCollectives();
  std::int64_t collectiveIndex() const { return collectives_.index(); }
  // This peer's place in the tree of kTreeSum / kTreeBroadcast and the ring of kRingSum /
  // kRingGather / kRingAck (set before the first of them).
  void setCollectiveTree(const CollectiveTree& tree) { collectives_.setTree(tree); }
  // After tree collectives: whether this peer got the average, and over how many peers the root
  // averaged (Collectives::treeAveraged, treeCount).
  bool treeAveraged() const { return collectives_.treeAveraged(); }
  int treeCount() const { return collectives_.treeCount(); }
  // Checkpoints. saveState() between rounds; restoreState() before the first round of this core
  // (after any collectives), continuing from state.round + 1. The algorithm buffers the state lacks
  // (a neighbour that was dead when it was taken) keep their initial value and that edge asks its
  // neighbour for a snapshot at once. kInvalidArgument, changing nothing, when a size or name
  // differs from this peer's (another config).
  PeerState saveState() const;
  // The same into `into`, reusing the memory of its buffers (CheckpointWriter keeps one state).
  void saveState(PeerState& into) const;
  Status restoreState(const PeerState& state);
  // After restoreState() on a core whose edges kept running (the simulator's `restart` fault): the
  // restored public copy and replicas no longer match what the neighbours hold, so every live edge
  // resyncs both ways from the next round on (asks for the neighbour's public copy and sends its
  // own with its next message). Nothing to do for algorithms without public copies.
  // `await`: nothing of a neighbour is applied before its snapshot came (a restarted peer that
  // rejoins a running training: its replicas are of its checkpoint's round).
  void resyncAllEdges(bool await = false);
  // Replaces the algorithm (the API, after the start-up sync changed the common initial model).
  void resetAlgorithm(std::unique_ptr<algorithms::Algorithm> algorithm);
  // The lowest origin rank the last kAdoptLowest collective adopted.
  int adoptedOrigin() const { return collectives_.adoptedOrigin(); }
  // Drops the edge for good (connection failed, heartbeats stopped, or the neighbour finished its
  // rounds). `lost`: it had not finished (counted in counters().deadNeighbours).
  void markDead(int neighbour, bool lost = true);
  // Takes back a neighbour that markDead() dropped because it fell silent (a pause, a partition)
  // and whose connections stayed open: its edge is live again from the next round on. With public
  // copies (CHOCO, compressed gt) the edge resyncs both ways: this peer asks for the neighbour's
  // public copy and sends its own, and mixes nothing of that neighbour before its snapshot came
  // (its replica here missed the deltas of the silent rounds). Sequence numbers go on where they
  // were (the connections lost nothing; messages dropped while it was dead show as a gap). False,
  // changing nothing, for a live, unknown or quarantined neighbour.
  bool revive(int neighbour);
  // A neighbour connected again over new connections (it restarted with `incarnation`, or its old
  // connection failed and was redialed): the edge starts afresh at both ends. Sequence numbers
  // restart at 0, messages of other incarnations are dropped (`old_incarnation`), and the edge is
  // taken back as in revive() (with public copies: resync both ways, nothing applied before the
  // snapshot), live or dead before. `key`: the new connection's session key (with a key file).
  // `theirRound`: the neighbour's round in its hello (-1: it has not started its rounds, or an
  // older build). Only a neighbour more than PeerCoreOptions::catchUpLag rounds behind this peer
  // is catching up (no round waits for it until it is within that lag); a nearer one, or one
  // ahead, is waited for at once, as before it left.
  // False, changing nothing, for an unknown or quarantined neighbour.
  bool rejoin(int neighbour, std::uint32_t incarnation, const std::optional<security::Key>& key,
              bool encrypt, std::int64_t theirRound = -1,
              security::Cipher cipher = security::Cipher::kChaCha20Poly1305);
  // State transfer for a peer that joins a running training without a checkpoint: the first
  // neighbour snapshot of a public copy that arrives (every edge asks for one when it resyncs)
  // becomes this peer's model and own public copy, the momentum starts at zero, and every edge
  // sends its public copy again. False (nothing to take) for algorithms without a public copy of
  // the model's size (dsgd, deepsqueeze, push-sum, gt without compression).
  bool adoptFirstSnapshot();
  // The incarnation of neighbour's messages on its current connections (from its hello): others
  // are dropped as `old_incarnation`.
  void setEdgeIncarnation(int neighbour, std::uint32_t incarnation);
  // The newest round of a message from a live neighbour (-1: none), counting messages that were
  // dropped for being too far ahead (kRoundWindow): how far the neighbours are.
  std::int64_t neighboursRound() const { return edges_.newestRound(); }
  // Whether every expected message of this round that is still missing will never come: its
  // sender already sent a message of a later round (per-edge order), e.g. a neighbour that went on
  // while this peer was away. Then waiting for round_timeout is pointless. False with mixDelay.
  bool onlyLostMessagesMissing() const;
  // Catching up: the next round this peer begins is `round` (> round() + 1), the rounds between
  // are skipped (counters().roundsSkipped). Every live edge with public copies resyncs both ways,
  // as in revive(): messages of the skipped rounds were dropped or never sent.
  void skipTo(std::int64_t round);
  // Neighbours quarantined since the last call (their edges are already dead here), each with why;
  // the driver closes their connections and logs the event.
  std::vector<std::pair<int, std::string>> takeQuarantined();
  // Robust mixing distrusts a neighbour (algorithm.robust_quarantine): quarantined like a refused
  // one, the reason from its trust record.
  void quarantineDistrusted(const algorithms::NeighbourTrust& t);
  // What one message received this round may change (security.max_delta_ratio): set when the
  // round begins to ratio * max(1, largest |x_i|), and passed with every message to the algorithm,
  // whose codec refuses a message that would change any value of its buffer by more. 0: no bound.
  float deltaLimit() const { return deltaLimit_; }
  bool isDead(int neighbour) const { return edges_.isDead(neighbour); }
  // The latest round of any message received from `neighbour` (-1: none yet).
  std::int64_t lastRoundFrom(int neighbour) const;
  // The last round before `rounds` in which `neighbour` sends to this peer, by the schedule; -1
  // when it never does (an out-neighbour of a directed graph, or of one-peer-exponential rounds).
  std::int64_t lastRoundExpectedFrom(int neighbour, std::int64_t rounds) const;
  // The last round before `rounds` in which this peer sends to `neighbour`; -1 when it never does.
  std::int64_t lastRoundSendingTo(int neighbour, std::int64_t rounds) const;
  // Whether this peer sends to `neighbour` in some round of the schedule (false: a one-way edge on
  // which only the neighbour sends).
  bool sendsTo(int neighbour) const;
  const std::vector<int>& neighbours() const { return edges_.neighbours(); }
  bool isolated() const { return !neighbours().empty() && liveDegree() == 0; }
  int liveDegree() const { return edges_.liveDegree(); }
  // The neighbours not lost: live ones and those that closed after finishing their rounds (the
  // final record's live_degree, whenever the neighbours' goodbyes came in).
  int unlostDegree() const { return edges_.unlostDegree(); }

  std::span<const float> model() const { return x_; }
  std::span<float> mutableModel() { return x_; }
  train::Workload& workload() { return trainer_.workload(); }
  const train::Workload& workload() const { return trainer_.workload(); }
  const algorithms::Algorithm& algorithm() const { return *algorithm_; }
  algorithms::Algorithm& mutableAlgorithm() { return *algorithm_; }
  train::Optimizer& optimizer() { return trainer_.optimizer(); }
  // The outer optimizer (nullptr without outer.optimizer, or when its step is the identity).
  train::OuterOptimizer* outer() { return trainer_.outer(); }
  // With an outer optimizer: the model the next round's outer step starts from. It is the model
  // after the last round (or collective, or restore); through the API's mix() the caller's own
  // steps happen in between, so it is kept apart from the model. setAnchor(): replaces it (the
  // API's loadState()).
  std::span<const float> anchor() const { return trainer_.anchor(); }
  Status setAnchor(std::span<const float> values) { return trainer_.setAnchor(values); }
  // averageEachRound: after the round's averaging collectives, the outer step (without an outer
  // optimizer: none), the divergence check of the averaged model, and the next anchor. (endRound()
  // does the same for the other algorithms, right after mixing.)
  void finishAveragedRound();
  // While on, collectives are the round's own traffic (averageEachRound): their bytes count in
  // bytesSent / bytesReceived, and their end is not a new anchor.
  void setRoundCollectives(bool on) {
    roundCollectives_ = on;
    collectives_.setRoundUse(on);
    if (on) collectives_.setTree(options_.roundTree);
  }
  bool averagesEachRound() const { return options_.averageEachRound; }
  const std::vector<CollectiveKind>& roundCollectives() const { return options_.roundCollectives; }
  const CollectiveTree& roundTree() const { return options_.roundTree; }
  const PeerCounters& counters() const { return counters_; }
  double lastLoss() const { return trainer_.lastLoss(); }
  double lastLr() const { return trainer_.lastLr(); }
  std::size_t maxWireBytes() const { return wireCapacity_; }
  // Neighbours lost (dropped before they finished their rounds) and not back.
  int lostNeighbours() const { return static_cast<int>(neighbours().size()) - unlostDegree(); }
  // The largest round message on the wire (envelope, the algorithm's largest message, a seal):
  // what a receive buffer needs to keep resident for the regular traffic.
  std::size_t roundWireBytes() const;

 private:
  // beginRound's parts: the round's recipients and senders, and its messages.
  void planRecipients(std::int64_t round);
  Status sendRound(std::int64_t round);

  // Whether this round still waits for expected neighbour j's message (roundComplete(),
  // missingThisRound()).
  bool waitingFor(int j) const;
  // algorithm.staleness: the neighbour of `e` is at most that many rounds behind this one (its
  // messages come in order: one of round r means all before it came). False without staleness.
  bool withinStaleness(const Edge& e) const {
    return options_.staleness > 0 && e.lastRound >= round_ - options_.staleness;
  }
  bool catchingUp(const Edge& e) const {
    return e.catchingUp && e.newestRound < round_ - options_.catchUpLag;
  }
  // The last round before `rounds` in which this peer hears from j (recvFrom) or sends to it.
  std::int64_t lastRoundWith(int j, std::int64_t rounds, bool sending) const;
  bool adoptSnapshot_ = false;  // adoptFirstSnapshot()
  void adopt(int j, std::span<const float> copy);
  std::vector<std::uint8_t> opened_;  // decrypted copy of the message being received

  void drop(std::string_view reason) { ++counters_.dropped[std::string(reason)]; }
  // drop() for a message of neighbour j's edge that authenticated (or the edge has no key): counts
  // towards j's quarantine.
  void refuse(int j, Edge& e, std::string_view reason);
  // Drops j's edge for good (refuse(), quarantineDistrusted()), counted and reported with `why`.
  void quarantine(int j, Edge& e, std::string why);
  std::vector<std::pair<int, std::string>> quarantined_;
  // The health check of the round's model (HealthMonitor::check); on divergence the reason also
  // gets what the algorithm knows of why (Algorithm::divergenceHint).
  bool checkHealth(double loss, bool afterMixing) {
    if (health_.check(x_, loss, afterMixing, round_)) return true;
    if (const std::string hint = algorithm_->divergenceHint(); !hint.empty()) health_.explain(hint);
    return false;
  }
  // Whether a message that passed the sequence checks is within the bounds of kRoundWindow.
  bool withinWindow(const Edge& e, const Envelope& env) const;
  // The parts of onMessage(): a divergence notice, a collective's message, a training message.
  void onNotice(int j, Edge& e, std::span<const std::uint8_t> payload);
  void onCollective(int j, Edge& e, const Envelope& env, std::span<const std::uint8_t> bytes);
  void apply(int j, Edge& e, const Envelope& env, std::span<const std::uint8_t> bytes);
  // apply()'s snapshot part: false when the snapshot was refused.
  bool applySnapshot(int j, Edge& e, const Envelope& env, std::span<const std::uint8_t> bytes);
  // Metropolis weight of the edge to a neighbour of live degree `degree` over the live graph (both
  // ends compute the same value), halved for lazy mixing.
  double liveWeight(std::uint32_t degree) const {
    const double w = 1.0 / (1.0 + std::max(degreeAtRound_, degree));
    return options_.lazyMixing ? 0.5 * w : w;
  }
  // The neighbour of `e` is at `round` or later: newestRound, and catchingUp ends within
  // catchUpLag of our round.
  void noteRound(Edge& e, std::int64_t round);
  // The round's outer step (no-op without an outer optimizer), and keeping the result as the next
  // anchor unless the round diverged (finishAveragedRound(), endRound()).
  void applyOuterStep() { trainer_.outerStep(x_); }
  void keepAnchor() {
    if (!health_.divergence()) trainer_.keepAnchor(x_);
  }

  PeerCoreOptions options_;
  const topology::Schedule& schedule_;
  std::unique_ptr<algorithms::Algorithm> algorithm_;
  std::vector<float> x_;
  LocalTrainer trainer_;
  HealthMonitor health_;
  std::vector<std::uint8_t> message_;
  std::size_t wireCapacity_ = 0;
  Edges edges_;
  float deltaLimit_ = 0.0f;  // deltaLimit(): this round's bound (0: none)
  std::int64_t round_ = -1;
  std::vector<int> pendingDrops_;  // died this round after their message arrived: drop after mix
  std::vector<int> sendTo_, expected_;
  std::size_t messageBytes_ = 0;
  std::uint32_t degreeAtRound_ = 0;
  bool checkRound_ = false;
  bool corruptOutgoing_ = false;      // setCorruptOutgoing
  std::optional<Attacker> attacker_;  // setAttacker
  std::vector<float> crafted_;        // the attacker's vector of the round
  std::int64_t dueRound_ = -1;  // mixDelay: this round mixes the shares of rounds <= dueRound_
  PeerCounters counters_;
  bool roundCollectives_ = false;  // setRoundCollectives
  Collectives collectives_;        // the state through a sequence of collectives
};

}  // namespace grapevine::engine
