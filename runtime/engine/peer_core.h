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
  bool sendToAllNeighbours = false;  // CHOCO: every round to the union of neighbours
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
  std::int64_t rounds = 0;
  std::int64_t syncEvery = 0;
  // security.max_delta_ratio (0: no bound): what one received message may change, relative to the
  // model (deltaLimit()).
  double maxDeltaRatio = 0.0;
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

// What a round starts from. The engine's workloads take their local steps; the API's caller may
// have taken its own optimizer step already (then x is x_half and `loss` is the caller's).
struct RoundInput {
  bool localSteps = true;
  double loss = 0.0;  // with localSteps false: the caller's loss (NaN: unknown)
  // The round's lr instead of optimizer.*'s schedule (the API caller's scheduler; with localSteps
  // false the lr its own optimizer used, for the records). NaN: the schedule.
  double lr = std::numeric_limits<double>::quiet_NaN();
  // algorithm.staleness: the neighbours are ahead (neighboursAhead()): no local steps this round,
  // the model goes out as it is (the loss reported is the previous round's). Last, so that the
  // API's {localSteps, loss, lr} stays as it is.
  bool skipCompute = false;
};

struct PeerCounters {
  std::uint64_t bytesSent = 0;
  std::uint64_t bytesReceived = 0;
  std::uint64_t bytesDenseEquivalent = 0;
  // bytesSent and bytesReceived by neighbour (each map sums to its total): the metrics' labels.
  std::map<int, std::uint64_t> bytesSentTo, bytesReceivedFrom;
  std::uint64_t messagesApplied = 0;
  std::uint64_t lateApplied = 0;
  std::uint64_t suspectRounds = 0;   // (neighbour, round) pairs that missed the round
  std::uint64_t deadNeighbours = 0;  // neighbours lost before they finished their rounds
  std::uint64_t replicaChecks = 0;
  std::uint64_t replicaMismatches = 0;
  std::uint64_t resyncs = 0;
  std::map<std::string, std::uint64_t> dropped;  // by reason: crc, bad_magic, duplicate, ...
  // Sent and received in collectives (the API's start-up sync and finalize averaging), not in the
  // byte counts above.
  std::uint64_t collectiveBytes = 0;
  // Neighbours quarantined (PeerCoreOptions::quarantineAfter, algorithm.robust_quarantine).
  std::uint64_t quarantined = 0;
  std::uint64_t revivedNeighbours = 0;   // dead neighbours taken back (revive())
  std::uint64_t rejoinedNeighbours = 0;  // neighbours connected again (rejoin())
  std::uint64_t roundsSkipped = 0;       // rounds this peer skipped to catch up (skipTo())
  // algorithm.staleness: (neighbour, round) pairs mixed from a replica of an earlier round, and
  // rounds this peer took no local steps in because its neighbours were ahead.
  std::uint64_t staleMixes = 0;
  std::uint64_t roundsComputeSkipped = 0;
  // Rounds begun with neighbours lost (not finished): with none of them live (isolated: training
  // alone), or with fewer than half of its neighbours live.
  std::uint64_t roundsIsolated = 0;
  std::uint64_t roundsBelowHalfDegree = 0;
  std::int64_t stateFrom = -1;  // adoptFirstSnapshot(): the neighbour whose public copy it took
};

// Everything a peer needs to continue a run exactly after the round it was taken in (checkpoints:
// runtime/engine/checkpoint.h). Not in it, by design: per-edge sequence numbers and in-flight
// messages (a resumed peer's edges start afresh, as after any reconnection, at both ends) and the
// set of dead neighbours (everyone is alive again after a restart).
struct PeerState {
  std::int64_t round = -1;         // the last completed round
  std::uint64_t workloadStep = 0;  // the minibatch stream's position (Workload::step)
  std::vector<float> model;
  std::vector<float> momentum;       // the optimizer's buffer (empty without momentum)
  std::vector<float> outerMomentum;  // the outer optimizer's (empty without one or with mu 0)
  // algorithm.overlap: the next round's gradient, computed during this round's communication.
  std::vector<float> gradient;
  bool gradientReady = false;
  std::vector<std::pair<std::string, std::vector<float>>> algorithm;  // Algorithm::state()
  std::vector<double> algorithmScalars;                               // Algorithm::scalars()
  // Divergence detection's history and the last round's figures (records).
  double initialNorm = 0.0, firstLoss = 0.0, lossEma = 0.0, minLossEma = 0.0;
  bool lossSeen = false;
  double lastLoss = 0.0, lastLr = 0.0;
  PeerCounters counters;
  // Robust mixing's trust in each neighbour (algorithm.robust): a restarted peer goes on from it
  // and quarantines a neighbour it had quarantined as soon as that one is mixed again.
  std::vector<algorithms::NeighbourTrust> trust;
};

// Why a run stops early: training diverged, here (origin == this peer's rank) or at a peer whose
// notice reached this one through its neighbours.
struct Divergence {
  std::int64_t round = 0;  // the round in which `origin` detected it
  int origin = 0;
  double loss = 0.0;       // the origin's local loss then (NaN when not finite)
  double modelNorm = 0.0;  // the origin's |x| then (NaN when not finite)
  std::string reason;      // what was detected, e.g. "the loss is not finite"
};

// "diverged at round R (peer P: REASON; loss L, model norm N[, consensus distance D]): lower
// optimizer.lr or algorithm.consensus_step" — what `peer`, `launch` and `sim` print (exit code 3).
// consensusDistance: NaN where unknown (a real peer sees only its neighbours).
std::string divergenceMessage(const Divergence& d, double consensusDistance);

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
  static constexpr std::uint64_t kSequenceWindow = std::uint64_t{1} << 20;
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
  std::size_t heldMessages() const;
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
    const auto it = edges_.find(j);
    return it != edges_.end() && (it->second.arrived || it->second.heard);
  }
  // Whether j's last message was refused and none of its messages was applied since (a refusal
  // streak towards quarantine): bytes still arriving from it are no reason to wait past the round
  // timeout (a corrupting neighbour's frames, heartbeats included, would hold the round forever).
  bool refusing(int j) const {
    const auto it = edges_.find(j);
    return it != edges_.end() && it->second.refusedRounds > 0;
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
  const std::optional<Divergence>& divergence() const { return divergence_; }
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
  std::int64_t neighboursRound() const;
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
  bool isDead(int neighbour) const { return dead_.count(neighbour) != 0; }
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
  const std::vector<int>& neighbours() const { return neighbours_; }
  bool isolated() const;
  int liveDegree() const;
  // The neighbours not lost: live ones and those that closed after finishing their rounds (the
  // final record's live_degree, whenever the neighbours' goodbyes came in).
  int unlostDegree() const;

  std::span<const float> model() const { return x_; }
  std::span<float> mutableModel() { return x_; }
  train::Workload& workload() { return *workload_; }
  const train::Workload& workload() const { return *workload_; }
  const algorithms::Algorithm& algorithm() const { return *algorithm_; }
  algorithms::Algorithm& mutableAlgorithm() { return *algorithm_; }
  train::Optimizer& optimizer() { return *optimizer_; }
  // The outer optimizer (nullptr without outer.optimizer, or when its step is the identity).
  train::OuterOptimizer* outer() { return outer_.get(); }
  // With an outer optimizer: the model the next round's outer step starts from. It is the model
  // after the last round (or collective, or restore); through the API's mix() the caller's own
  // steps happen in between, so it is kept apart from the model. setAnchor(): replaces it (the
  // API's loadState()).
  std::span<const float> anchor() const { return xBefore_; }
  Status setAnchor(std::span<const float> values);
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
  double lastLoss() const { return lastLoss_; }
  double lastLr() const { return lastLr_; }
  std::size_t maxWireBytes() const { return wireCapacity_; }
  // Neighbours lost (dropped before they finished their rounds) and not back.
  int lostNeighbours() const { return static_cast<int>(neighbours_.size()) - unlostDegree(); }
  // The largest round message on the wire (envelope, the algorithm's largest message, a seal):
  // what a receive buffer needs to keep resident for the regular traffic.
  std::size_t roundWireBytes() const;

 private:
  // beginRound's parts: the local optimizer steps, and the round's recipients and senders.
  void takeLocalSteps(std::int64_t round, const RoundInput& input);
  void planRecipients(std::int64_t round);

  struct Edge {
    std::uint64_t nextSeqIn = 0;
    std::uint64_t nextSeqOut = 0;
    std::uint32_t degreeAt = 0;  // the neighbour's live degree from its current-round envelope
    float stepAt = 0.0f;         // its proposed consensus step, from the same envelope
    bool arrived = false;
    std::int64_t lastRound = -1;
    std::int64_t appliedThrough = -1;  // latest round whose message the algorithm took (mixDelay)
    std::int64_t needRound = -1;       // mixDelay: the round whose message this round waits for
    bool resyncRequested = false;      // we asked it for a snapshot
    std::int64_t lastSnapshotRound = INT64_MIN / 2;  // when we last sent it one
    bool sendSnapshot = false;                       // it asked us for one
    LazyBuffer out;  // envelope + message (+ snapshot), reused; resident as far as written
    std::vector<std::uint8_t> notice;              // envelope + divergence notice
    std::size_t outBytes = 0;                      // of `out`, this round
    std::deque<std::vector<std::uint8_t>> ahead;   // messages of future rounds, in order
    std::vector<std::vector<std::uint8_t>> spare;  // reusable buffers for `ahead`
    // Collective messages (index, bytes), in arrival order.
    std::deque<std::pair<std::uint64_t, std::vector<std::uint8_t>>> collectives;
    std::optional<security::Key> key;  // setEdgeKey
    bool encrypt = false;
    security::Cipher cipher = security::Cipher::kChaCha20Poly1305;
    // Rounds (of this peer) with a refuse()d message since its last applied one.
    int refusedRounds = 0;
    std::int64_t lastRefusedRound = -2;
    bool quarantined = false;  // refuse() dropped it for good (never revived)
    // revive() / skipTo(): the replica of its public copy is a placeholder until its snapshot
    // comes; its messages are not applied before (counted as `awaiting_snapshot`).
    bool awaitSnapshot = false;
    std::int64_t askedRound = INT64_MIN / 2;  // when this peer last asked it for a snapshot
    bool heard = false;                       // its message of this round came but was not applied
    std::int64_t revivedRound = -2;  // the round of this peer in which revive() took it back
    std::int64_t newestRound = -1;   // newest round of its messages, round-window drops included
    std::optional<std::uint32_t> incarnation;  // setEdgeIncarnation(): the only one accepted
    // revive() / rejoin(): the neighbour was away and may be behind; no round waits for it until
    // a message of a round within PeerCoreOptions::catchUpLag of ours came from it, or its hello
    // said it is that far (newestRound).
    bool catchingUp = false;
  };
  // Gives a held message's buffer back to the edge's spares (or frees it when it is larger than a
  // round message).
  void recycle(Edge& e, std::vector<std::uint8_t> buf) const;
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
  bool adoptSnapshot_ = false;  // adoptFirstSnapshot()
  void adopt(int j, std::span<const float> copy);
  // Before writeEnvelope: marks `env` sealed when the edge has a key. After: seals buf[0, bytes)
  // and grows `bytes` by the tag.
  void markSealed(const Edge& e, Envelope& env) const;
  void seal(const Edge& e, const Envelope& env, std::span<std::uint8_t> buf,
            std::size_t& bytes) const;
  std::vector<std::uint8_t> opened_;  // decrypted copy of the message being received

  void drop(std::string_view reason) { ++counters_.dropped[std::string(reason)]; }
  // drop() for a message of neighbour j's edge that authenticated (or the edge has no key): counts
  // towards j's quarantine.
  void refuse(int j, Edge& e, std::string_view reason);
  // Drops j's edge for good (refuse(), quarantineDistrusted()), counted and reported with `why`.
  void quarantine(int j, Edge& e, std::string why);
  std::vector<std::pair<int, std::string>> quarantined_;
  // Sets divergence_ (origin: this peer) when the model or `loss` shows divergence; false then.
  bool checkHealth(double loss, bool afterMixing);
  // With the edge's key: verifies (and with security.encrypt decrypts) a sealed message and leaves
  // `bytes` without its tag; false, reading nothing else, when it does not authenticate.
  bool unseal(const Edge& e, std::span<const std::uint8_t>& bytes);
  // Whether a message that passed the sequence checks is within the bounds of kRoundWindow.
  bool withinWindow(const Edge& e, const Envelope& env) const;
  void apply(int j, Edge& e, const Envelope& env, std::span<const std::uint8_t> bytes);
  // Metropolis weight of the edge to a neighbour of live degree `degree` over the live graph (both
  // ends compute the same value), halved for lazy mixing.
  double liveWeight(std::uint32_t degree) const {
    const double w = 1.0 / (1.0 + std::max(degreeAtRound_, degree));
    return options_.lazyMixing ? 0.5 * w : w;
  }
  std::vector<int> liveOf(const std::vector<int>& peers) const;
  // The edge sends its public copy with its next message and asks its neighbour for its copy; with
  // `await`, nothing of the neighbour is applied before the snapshot came, and the edge asks only
  // when a message of the neighbour comes without one (both ends of a rejoin send theirs unasked).
  static void resyncBothWays(Edge& e, bool await);
  // The neighbour of `e` is at `round` or later: newestRound, and catchingUp ends within
  // catchUpLag of our round.
  void noteRound(Edge& e, std::int64_t round);

  PeerCoreOptions options_;
  const topology::Schedule& schedule_;
  std::unique_ptr<train::Workload> workload_;
  std::unique_ptr<train::Optimizer> optimizer_;
  std::unique_ptr<train::OuterOptimizer> outer_;  // outer.optimizer (nullptr: none, or identity)
  std::unique_ptr<algorithms::Algorithm> algorithm_;
  // g_: the gradient, then the step's direction (u). xBefore_: the model before the round's local
  // steps; with an outer optimizer, the anchor (anchor()), which the caller's own steps (mix())
  // leave alone.
  std::vector<float> x_, g_, xBefore_;
  bool gradientReady_ = false;
  bool stepTaken_ = false;  // a round of this core took its local steps (algorithm.staleness)
  double lastLoss_ = 0.0;
  float deltaLimit_ = 0.0f;  // deltaLimit(): this round's bound (0: none)
  double lastLr_ = 0.0;
  std::int64_t round_ = -1;
  std::vector<int> neighbours_;  // union over the schedule
  std::map<int, Edge> edges_;
  std::map<int, bool> dead_;  // dropped edges; true: lost before it finished (markDead's `lost`)
  std::optional<Divergence> divergence_;
  // The round's outer step (no-op without an outer optimizer), and keeping the result as the next
  // anchor unless the round diverged (finishAveragedRound(), endRound()).
  void applyOuterStep();
  void keepAnchor();
  double initialNorm_ = 0.0;
  double firstLoss_ = 0.0, lossEma_ = 0.0, minLossEma_ = 0.0;  // loss history
  bool lossSeen_ = false;                                      // firstLoss_ is set
  std::vector<int> pendingDrops_;  // died this round after their message arrived: drop after mix
  std::vector<int> sendTo_, expected_;
  std::vector<std::uint8_t> message_;
  std::size_t messageBytes_ = 0;
  std::size_t wireCapacity_ = 0;
  std::uint32_t degreeAtRound_ = 0;
  bool checkRound_ = false;
  bool corruptOutgoing_ = false;      // setCorruptOutgoing
  std::optional<Attacker> attacker_;  // setAttacker
  std::vector<float> crafted_;        // the attacker's vector of the round
  std::int64_t dueRound_ = -1;  // mixDelay: this round mixes the shares of rounds <= dueRound_
  PeerCounters counters_;
  bool stepped_ = true;  // this round took local steps (else the caller stepped: no afterMixing)
  bool roundCollectives_ = false;  // setRoundCollectives
  Collectives collectives_;        // the state through a sequence of collectives
};

}  // namespace grapevine::engine
