#include "runtime/engine/peer_core.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <utility>

#include "kernels/ops.h"
#include "runtime/engine/envelope.h"
#include "runtime/security/auth.h"

namespace grapevine::engine {

namespace {

// The most bytes one message on an edge can take: a round message with a resync snapshot of the
// public copy (gt's holds x and y: 2 n values), a divergence notice, a collective's state, and
// room for a seal (setEdgeKey).
std::size_t wireCapacityFor(const PeerCoreOptions& options, const algorithms::Algorithm& algorithm,
                            std::size_t n) {
  const std::size_t snapshot = std::max(n, algorithm.publicCopy().size()) * sizeof(float);
  std::size_t bytes = std::max(kEnvelopeBytes + algorithm.maxMessageBytes() + snapshot,
                               kEnvelopeBytes + kNoticeFixedBytes + kNoticeMaxReason);
  bytes = std::max(bytes, kEnvelopeBytes + kCollectiveHeaderBytes + kMaxSmallCollective * 8);
  if (options.collectives) {
    bytes = std::max(bytes, kEnvelopeBytes + kCollectiveHeaderBytes + n * 8);
  }
  return bytes + security::kSealTagBytes;
}

}  // namespace

PeerCore::PeerCore(const PeerCoreOptions& options, const topology::Schedule& schedule,
                   std::unique_ptr<train::Workload> workload,
                   std::unique_ptr<train::Optimizer> optimizer,
                   std::unique_ptr<algorithms::Algorithm> algorithm, std::vector<float> x0)
    : options_(options),
      schedule_(schedule),
      algorithm_(std::move(algorithm)),
      x_(std::move(x0)),
      trainer_(std::move(workload), std::move(optimizer), options.outer, options.localSteps, x_),
      health_(options.rank, options.lossMayBeUnknown),
      message_(algorithm_->maxMessageBytes()),
      wireCapacity_(wireCapacityFor(options, *algorithm_, x_.size())),
      edges_(schedule.allNeighbours(options.rank), wireCapacity_),
      collectives_(options.rank) {
  health_.start(x_);
}

void PeerCore::finishAveragedRound() {
  applyOuterStep();
  if (!health_.divergence()) checkHealth(trainer_.lastLoss(), true);
  keepAnchor();
}

void PeerCore::abandonRound() {
  trainer_.undoRound(x_);
  round_ = std::max<std::int64_t>(round_ - 1, -1);
  sendTo_.clear();
}

std::span<const std::uint8_t> PeerCore::divergenceNotice(int j) {
  Edge& e = edges_.at(j);
  const Divergence& d = *health_.divergence();
  const std::size_t payload = noticeBytes(d);
  e.notice.assign(kEnvelopeBytes + payload + (e.key ? security::kSealTagBytes : 0), 0);
  writeNotice(d, std::span<std::uint8_t>(e.notice).subspan(kEnvelopeBytes, payload));
  Envelope env;
  env.flags = kFlagDiverged;
  env.sender = static_cast<std::uint32_t>(options_.rank);
  env.incarnation = options_.incarnation;
  env.sequence = e.nextSeqOut++;
  env.round = static_cast<std::uint64_t>(std::max<std::int64_t>(round_, 0));
  env.liveDegree = static_cast<std::uint32_t>(liveDegree());
  env.messageBytes = static_cast<std::uint32_t>(payload);
  env.payloadCrc =
      payloadChecksum(std::span<const std::uint8_t>(e.notice).subspan(kEnvelopeBytes, payload));
  return {e.notice.data(), e.frame(env, e.notice, kEnvelopeBytes + payload)};
}

// Who this round's message goes to and whose messages it waits for (live neighbours only), the
// live degree it reports, and the health counters (rounds isolated or below half the degree).
void PeerCore::planRecipients(std::int64_t round) {
  const topology::PeerPlan plan = schedule_.plan(options_.rank, round);
  sendTo_ = edges_.liveOf(options_.sendToAllNeighbours ? neighbours() : plan.sendTo);
  expected_ = liveSenders(round);
  if (options_.mixDelay > 0) {
    // Overlapped push-sum: wait for each in-neighbour's message of the latest round in
    // [round - mixDelay, dueRound_] in which it sends here (earlier rounds were waited for by
    // earlier rounds); a sync round waits for everything sent so far.
    const bool sync = (options_.rounds > 0 && round + 1 >= options_.rounds) ||
                      (options_.syncEvery > 0 && (round + 1) % options_.syncEvery == 0);
    dueRound_ = sync ? round : round - options_.mixDelay;
    for (auto& [j, e] : edges_) e.needRound = -1;
    for (std::int64_t r = std::max<std::int64_t>(0, round - options_.mixDelay); r <= dueRound_;
         ++r) {
      for (int j : schedule_.plan(options_.rank, r).recvFrom) edges_.at(j).needRound = r;
    }
    expected_.clear();
    for (const auto& [j, e] : edges_) {
      if (e.needRound >= 0 && !isDead(j)) expected_.push_back(j);
    }
  }
  if (options_.averageEachRound) {  // no gossip: the round ends with the averaging collectives
    sendTo_.clear();
    expected_.clear();
  }
  degreeAtRound_ = static_cast<std::uint32_t>(liveDegree());
  if (lostNeighbours() > 0) {
    if (degreeAtRound_ == 0) ++counters_.roundsIsolated;
    if (2 * degreeAtRound_ < neighbours().size()) ++counters_.roundsBelowHalfDegree;
  }
}

float deltaLimit(double maxDeltaRatio, std::span<const float> x) {
  if (!(maxDeltaRatio > 0)) return 0.0f;
  const double scale = std::max(1.0, double(kernels::cpuOps().maxAbs(x.data(), x.size())));
  return static_cast<float>(std::min(maxDeltaRatio * scale, 3.0e38));
}

Status PeerCore::beginRound(std::int64_t round, const RoundInput& input) {
  round_ = round;
  for (auto& [j, e] : edges_) e.arrived = e.heard = false;
  // What this round's messages may change (security.max_delta_ratio), relative to the model.
  deltaLimit_ = engine::deltaLimit(options_.maxDeltaRatio, x_);  // 0 (none) when the ratio is 0

  if (!trainer_.takeSteps(round, input, x_, *algorithm_)) ++counters_.roundsComputeSkipped;
  if (health_.divergence() || !checkHealth(trainer_.lastLoss(), false)) {
    sendTo_.clear();  // nothing goes out: the driver abandons the round
    expected_.clear();
    return Status::ok();
  }

  planRecipients(round);
  GV_RETURN_IF_ERROR(sendRound(round));
  // Messages of this round that arrived while we were still in the previous one.
  for (auto& [j, e] : edges_) {
    while (!e.ahead.empty()) {
      auto env = readEnvelope(e.ahead.front());  // checked on arrival; cannot fail here
      if (!env.isOk() || env->round > static_cast<std::uint64_t>(round)) break;
      std::vector<std::uint8_t> buf = std::move(e.ahead.front());
      e.ahead.pop_front();
      apply(j, e, *env, buf);
      e.recycle(std::move(buf), roundWireBytes());
    }
  }
  return Status::ok();
}

// The algorithm's message of the round, framed for each recipient (with a resync snapshot where
// one is due, a replica hash on check rounds).
Status PeerCore::sendRound(std::int64_t round) {
  checkRound_ = options_.checkEvery > 0 && round > 0 && round % options_.checkEvery == 0 &&
                algorithm_->publicCopyHash() != 0;
  algorithm_->setRecipients(sendTo_);
  std::span<const float> published = x_;
  if (attacker_) {
    crafted_.resize(x_.size());
    attacker_->craft(x_, algorithm_->neighbourViews(), round, crafted_);
    published = crafted_;
  }
  auto n = algorithm_->prepare(published, static_cast<std::uint64_t>(round), message_);
  if (!n.isOk()) return n.status();
  messageBytes_ = *n;
  const std::uint64_t publicHash = checkRound_ ? algorithm_->publicCopyHash() : 0;
  // The message is the same for every recipient: checksummed once (a snapshot continues it).
  const std::uint32_t messageCrc =
      sendTo_.empty() ? 0 : payloadChecksum(std::span(message_).first(messageBytes_));

  for (int j : sendTo_) {
    Edge& e = edges_.at(j);
    Envelope env;
    env.sender = static_cast<std::uint32_t>(options_.rank);
    env.incarnation = options_.incarnation;
    env.sequence = e.nextSeqOut++;
    env.round = static_cast<std::uint64_t>(round);
    env.liveDegree = degreeAtRound_;
    env.proposedStep = algorithm_->proposedStep();
    env.messageBytes = static_cast<std::uint32_t>(messageBytes_);
    if (checkRound_) {
      env.flags |= kFlagHasHash;
      env.publicHash = publicHash;
    }
    if (e.resyncRequested) {
      env.flags |= kFlagResyncRequest;
      e.resyncRequested = false;
      e.askedRound = round;
    }
    const bool snapshot = e.sendSnapshot && round - e.lastSnapshotRound >= kSnapshotMinRounds;
    // A snapshot or collective sent before leaves no resident pages behind a round message.
    if (!snapshot) e.out.trim(e.outBytes, roundWireBytes());
    std::memcpy(e.out.data() + kEnvelopeBytes, message_.data(), messageBytes_);
    if (snapshot) {
      e.lastSnapshotRound = round;
      const auto copy = algorithm_->publicCopy();
      env.flags |= kFlagSnapshot;
      env.snapshotBytes = static_cast<std::uint32_t>(copy.size_bytes());
      std::memcpy(e.out.data() + kEnvelopeBytes + messageBytes_, copy.data(), copy.size_bytes());
      e.sendSnapshot = false;
    }
    e.outBytes = kEnvelopeBytes + messageBytes_ + env.snapshotBytes;
    env.payloadCrc =
        snapshot ? payloadChecksum(e.out.span(e.outBytes).subspan(kEnvelopeBytes + messageBytes_),
                                   messageCrc)
                 : messageCrc;
    if (corruptOutgoing_ && e.outBytes > kEnvelopeBytes) e.out.data()[kEnvelopeBytes] ^= 0x01;
    e.outBytes = e.frame(env, e.out.span(), e.outBytes);
    counters_.bytesSent += e.outBytes;
    counters_.bytesSentTo[j] += e.outBytes;
    counters_.bytesDenseEquivalent += kEnvelopeBytes + algorithm_->denseBytes();
  }
  return Status::ok();
}

void PeerCore::setEdgeKey(int neighbour, const security::Key& key, bool encrypt,
                          security::Cipher cipher) {
  Edge& e = edges_.at(neighbour);
  e.key = key;
  e.encrypt = encrypt;
  e.cipher = cipher;
}

std::span<const std::uint8_t> PeerCore::outgoing(int neighbour) {
  const Edge& e = edges_.at(neighbour);
  return {e.out.data(), e.outBytes};
}

void PeerCore::onMessage(int j, std::span<const std::uint8_t> bytes) {
  Edge* found = edges_.find(j);
  if (found == nullptr || isDead(j)) {
    drop("unknown_sender");
    return;
  }
  Edge& e = *found;
  const Admission admitted = e.admit(j, bytes, opened_);
  if (!admitted.envelope) {
    if (admitted.refuse) {
      refuse(j, e, admitted.reason);
    } else {
      drop(admitted.reason);
    }
    return;
  }
  const Envelope& env = *admitted.envelope;
  if (!(env.flags & (kFlagDiverged | kFlagCollective))) {
    noteRound(e, static_cast<std::int64_t>(std::min<std::uint64_t>(env.round, INT64_MAX / 2)));
  }
  if (!(env.flags & kFlagDiverged) && !withinWindow(e, env)) {
    drop("round_window");  // nextSeqIn unchanged: nothing of this message is kept
    return;
  }
  if (env.sequence > e.nextSeqIn) {
    // Earlier messages of this edge were lost (dropped as corrupt): replicas may have drifted.
    counters_.dropped["gap"] += env.sequence - e.nextSeqIn;
    e.resyncRequested = algorithm_->publicCopyHash() != 0;
  }
  e.nextSeqIn = env.sequence + 1;
  // Collectives are counted when they are combined (endCollective): apart from training (the
  // API's start-up sync, finalize averaging), or as the round's own bytes (averageEachRound).
  if (!(env.flags & kFlagCollective)) {
    counters_.bytesReceived += bytes.size();
    counters_.bytesReceivedFrom[j] += bytes.size();
  }
  if (env.flags & kFlagDiverged) {
    onNotice(j, e, bytes.subspan(kEnvelopeBytes, env.messageBytes));
    return;
  }
  if (env.flags & kFlagCollective) {
    onCollective(j, e, env, bytes);
    return;
  }
  e.lastRound = std::max(e.lastRound, static_cast<std::int64_t>(env.round));
  // Before round 0 (round_ == -1) every message is ahead: a neighbour may start round 0 while this
  // peer is still booting or in a start-up collective.
  if (round_ < 0 || env.round > static_cast<std::uint64_t>(round_)) {
    e.ahead.push_back(e.hold(bytes));
    return;
  }
  apply(j, e, env, bytes);
}

void PeerCore::onNotice(int j, Edge& e, std::span<const std::uint8_t> payload) {
  auto notice = readNotice(payload);
  if (!notice) {
    refuse(j, e, "bad_notice");
  } else {
    health_.noteDivergence(std::move(*notice));
  }
}

void PeerCore::onCollective(int j, Edge& e, const Envelope& env,
                            std::span<const std::uint8_t> bytes) {
  // A model-sized state (when collectives are enabled) or a small one; endCollective() checks
  // that it is the current collective's size.
  // (A chunk of the model's: tree kinds, f32 or f64.)
  const std::size_t bytesOfValues =
      env.messageBytes >= kCollectiveHeaderBytes ? env.messageBytes - kCollectiveHeaderBytes : 0;
  const bool sized = bytesOfValues > 0 && bytesOfValues % sizeof(float) == 0;
  if (!sized || !((options_.collectives && bytesOfValues <= x_.size() * sizeof(double)) ||
                  bytesOfValues <= kMaxSmallCollective * sizeof(double))) {
    refuse(j, e, "bad_collective");
    return;
  }
  e.collectives.emplace_back(env.round, e.hold(bytes));
}

bool PeerCore::withinWindow(const Edge& e, const Envelope& env) const {
  if (env.flags & kFlagCollective) {
    const std::int64_t current = std::max<std::int64_t>(collectives_.index(), 0);
    return env.round <= static_cast<std::uint64_t>(current + kRoundWindow) &&
           e.collectives.size() < static_cast<std::size_t>(kRoundWindow);
  }
  const std::int64_t current = std::max<std::int64_t>(round_, 0);
  if (env.round > static_cast<std::uint64_t>(current + kRoundWindow)) return false;
  // Only messages that would be held count against the edge's limit.
  const bool held = round_ < 0 || env.round > static_cast<std::uint64_t>(round_);
  return !held || e.ahead.size() < static_cast<std::size_t>(kRoundWindow);
}

void PeerCore::apply(int j, Edge& e, const Envelope& env, std::span<const std::uint8_t> bytes) {
  // (env: already checked by readEnvelope in onMessage.)
  const auto message = bytes.subspan(kEnvelopeBytes, env.messageBytes);
  const auto round = static_cast<std::int64_t>(env.round);
  if (env.flags & kFlagResyncRequest) {
    if (e.sendSnapshot || round_ - e.lastSnapshotRound < kSnapshotMinRounds) drop("resync_rate");
    e.sendSnapshot = true;
  }
  if (e.awaitSnapshot && !(env.flags & kFlagSnapshot)) {
    // Its replica here is a placeholder until the snapshot comes: nothing of this message enters
    // it. The request is repeated (the neighbour coalesces requests into one snapshot) in case the
    // first one was lost with a dropped message.
    drop("awaiting_snapshot");
    if (round_ - e.askedRound >= kSnapshotMinRounds) e.resyncRequested = true;
    if (round == round_) e.heard = true;
    return;
  }
  Status st;
  if (round == round_ && !e.arrived) {
    double w = 0;
    const auto& weights = schedule_.plan(options_.rank, round_).weights;
    for (const auto& [k, wk] : weights) {
      if (k == j) w = wk;
    }
    if (options_.dynamicMetropolis && w > 0) w = liveWeight(env.liveDegree);
    st = algorithm_->receive(j, w, message, env.round, deltaLimit_);
    if (st.isOk()) {
      e.arrived = true;
      e.degreeAt = env.liveDegree;
      e.stepAt = env.proposedStep;
      ++counters_.messagesApplied;
    }
  } else if (round < round_) {
    st = algorithm_->receiveLate(j, message, env.round, deltaLimit_);
    if (st.isOk()) ++counters_.lateApplied;
  } else {
    drop("duplicate_round");
    return;
  }
  if (!st.isOk()) {
    refuse(j, e, "decode");
    e.resyncRequested = algorithm_->publicCopyHash() != 0;
    return;
  }
  e.appliedThrough = std::max(e.appliedThrough, round);
  if ((env.flags & kFlagSnapshot) && !applySnapshot(j, e, env, bytes)) return;
  e.refusedRounds = 0;
  e.lastRefusedRound = -2;
  if (env.flags & kFlagHasHash) {
    ++counters_.replicaChecks;
    if (algorithm_->replicaHash(j) != env.publicHash) {
      ++counters_.replicaMismatches;
      e.resyncRequested = true;
    }
  }
}

bool PeerCore::applySnapshot(int j, Edge& e, const Envelope& env,
                             std::span<const std::uint8_t> bytes) {
  const auto snap = bytes.subspan(kEnvelopeBytes + env.messageBytes, env.snapshotBytes);
  std::vector<float> copy(snap.size() / sizeof(float));
  std::memcpy(copy.data(), snap.data(), copy.size() * sizeof(float));
  // Checked like a delta's values: a NaN or infinity never enters a replica.
  if (!kernels::cpuOps().allFinite(copy.data(), copy.size())) {
    refuse(j, e, "non_finite_snapshot");
    return false;
  }
  if (!algorithm_->resetReplica(j, copy).isOk()) {
    refuse(j, e, "bad_snapshot");
    if (e.awaitSnapshot && static_cast<std::int64_t>(env.round) == round_) {
      e.arrived = false;  // its replica is still a placeholder: not mixed
      e.heard = true;
    }
    return false;
  }
  ++counters_.resyncs;
  e.awaitSnapshot = false;
  if (adoptSnapshot_) adopt(j, copy);
  return true;
}

std::int64_t PeerCore::lastRoundFrom(int j) const {
  const Edge* e = edges_.find(j);
  return e == nullptr ? -1 : e->lastRound;
}

std::int64_t PeerCore::lastRoundWith(int j, std::int64_t rounds, bool sending) const {
  if (options_.sendToAllNeighbours) return rounds - 1;
  const std::int64_t first = std::max<std::int64_t>(0, rounds - schedule_.period());
  for (std::int64_t r = rounds - 1; r >= first; --r) {
    const topology::PeerPlan plan = schedule_.plan(options_.rank, r);
    const auto& peers = sending ? plan.sendTo : plan.recvFrom;
    if (std::find(peers.begin(), peers.end(), j) != peers.end()) return r;
  }
  return -1;
}

std::int64_t PeerCore::lastRoundExpectedFrom(int j, std::int64_t rounds) const {
  return lastRoundWith(j, rounds, /*sending=*/false);
}

std::int64_t PeerCore::lastRoundSendingTo(int j, std::int64_t rounds) const {
  return lastRoundWith(j, rounds, /*sending=*/true);
}

bool PeerCore::sendsTo(int j) const {
  if (options_.sendToAllNeighbours) return true;
  for (int t = 0; t < schedule_.period(); ++t) {
    const auto to = schedule_.plan(options_.rank, t).sendTo;
    if (std::find(to.begin(), to.end(), j) != to.end()) return true;
  }
  return false;
}

bool PeerCore::waitingFor(int j) const {
  const Edge* e = edges_.find(j);
  if (isDead(j) || e == nullptr) return false;
  // Overlapped push-sum waits for the latest round it mixes; every other round for this one's.
  if (options_.mixDelay > 0) return e->appliedThrough < e->needRound;
  // algorithm.staleness: a neighbour is waited for only while it is more than that many rounds
  // behind (its messages come in order: one of round r means all before it came).
  if (withinStaleness(*e)) return false;
  return !e->arrived && !e->heard && !catchingUp(*e);
}

std::vector<int> PeerCore::liveSenders(std::int64_t round) const {
  const topology::PeerPlan plan = schedule_.plan(options_.rank, round);
  return edges_.liveOf(options_.sendToAllNeighbours ? neighbours() : plan.recvFrom);
}

bool PeerCore::neighboursAhead(std::int64_t round) const {
  const std::vector<int> from = liveSenders(round);
  if (from.empty()) return false;
  return std::all_of(from.begin(), from.end(), [this, round](int j) {
    const Edge* e = edges_.find(j);
    return e != nullptr && e->lastRound >= round;
  });
}

std::vector<int> PeerCore::missingThisRound() const {
  std::vector<int> out;
  std::copy_if(expected_.begin(), expected_.end(), std::back_inserter(out),
               [this](int j) { return waitingFor(j); });
  return out;
}

bool PeerCore::roundComplete() const {
  return std::none_of(expected_.begin(), expected_.end(), [this](int j) { return waitingFor(j); });
}

void PeerCore::precomputeGradient() { trainer_.precomputeGradient(x_); }

std::vector<int> PeerCore::endRound() {
  algorithms::MixWeights mw;
  std::vector<int> suspects;
  const auto plan = schedule_.plan(options_.rank, round_);
  if (options_.mixDelay > 0) {
    // Push-sum ignores the weights: it mixes every share of rounds <= dueRound_ it holds. A
    // neighbour whose awaited message is missing is suspect; its share is mixed when it comes.
    mw.dueRound = dueRound_;
    for (int j : expected_) {
      const Edge& e = edges_.at(j);
      if (!isDead(j) && e.appliedThrough < e.needRound) suspects.push_back(j);
    }
  }
  // (allreduce and diloco send no round message: nobody is awaited, nobody is suspect.)
  const decltype(plan.weights) none;
  for (const auto& [j, w] :
       options_.mixDelay > 0 || options_.averageEachRound ? none : plan.weights) {
    const Edge& e = edges_.at(j);
    // A neighbour that died after its message of this round arrived (typically: it finished its
    // last round and closed) still counts in this round's mix, as it does in the simulator.
    if (isDead(j) && !e.arrived) continue;
    // Taken back during this round: it was not in this round's degrees; it mixes from the next.
    if (e.revivedRound == round_) continue;
    if (!e.arrived) {
      // algorithm.staleness: within it, the neighbour's replica as it stands (every message of it
      // applied in order); otherwise (or a replica that waits for its snapshot) suspect.
      const bool stale = withinStaleness(e) && !isDead(j) && !e.awaitSnapshot;
      if (!stale) {
        suspects.push_back(j);
        continue;
      }
      ++counters_.staleMixes;
    }
    double wj = w;
    if (options_.dynamicMetropolis) wj = liveWeight(e.degreeAt);
    mw.neighbours.emplace_back(j, wj);
    mw.proposedSteps.push_back(e.stepAt);
  }
  counters_.suspectRounds += suspects.size();
  // An attacker trains alone: what it crafts comes from a model that learns (attacks.h).
  if (!attacker_) algorithm_->mix(x_, mw);
  for (const auto& t : algorithm_->takeDistrusted()) quarantineDistrusted(t);
  trainer_.afterMixing(x_);
  // (With averageEachRound the round's average comes later: finishAveragedRound() then.)
  if (!options_.averageEachRound) applyOuterStep();
  if (!health_.divergence()) checkHealth(trainer_.lastLoss(), true);
  if (!options_.averageEachRound) keepAnchor();
  for (int j : pendingDrops_) algorithm_->dropNeighbour(j);
  pendingDrops_.clear();
  return suspects;
}

void PeerCore::beginCollective(CollectiveKind kind, std::span<const double> initial) {
  degreeAtRound_ = static_cast<std::uint32_t>(liveDegree());
  const auto live = [this](int j) { return edges_.find(j) != nullptr && !isDead(j); };
  collectives_.begin(kind, x_, initial, neighbours(), live, degreeAtRound_, sendTo_, expected_);
  const auto index = static_cast<std::uint64_t>(collectives_.index());
  // Leftovers of earlier collectives (a neighbour that was late) are stale now.
  for (auto& [j, e] : edges_) {
    while (!e.collectives.empty() && e.collectives.front().first < index) {
      e.recycle(std::move(e.collectives.front().second), roundWireBytes());
      e.collectives.pop_front();
    }
  }
  // What goes out: the whole state, or (tree and ring kinds) one chunk of it.
  const std::size_t payload = collectives_.payloadBytes();
  for (int j : sendTo_) {
    Edge& e = edges_.at(j);
    Envelope env;
    env.flags = kFlagCollective;
    env.sender = static_cast<std::uint32_t>(options_.rank);
    env.incarnation = options_.incarnation;
    env.sequence = e.nextSeqOut++;
    env.round = index;
    env.liveDegree = degreeAtRound_;
    env.messageBytes = static_cast<std::uint32_t>(payload);
    collectives_.writePayload(e.out.data() + kEnvelopeBytes);
    e.outBytes = kEnvelopeBytes + payload;
    env.payloadCrc = payloadChecksum(e.out.span(e.outBytes).subspan(kEnvelopeBytes, payload));
    e.outBytes = e.frame(env, e.out.span(), e.outBytes);
    if (roundCollectives_) {
      counters_.bytesSent += e.outBytes;
      counters_.bytesSentTo[j] += e.outBytes;
      counters_.bytesDenseEquivalent += e.outBytes;  // uncompressed: its own dense equivalent
    } else {
      counters_.collectiveBytes += e.outBytes;
    }
  }
}

bool PeerCore::collectiveComplete() const {
  const auto index = static_cast<std::uint64_t>(collectives_.index());
  for (int j : expected_) {
    if (isDead(j)) continue;
    const Edge& e = edges_.at(j);
    if (e.collectives.empty() || e.collectives.front().first != index) return false;
  }
  return true;
}

void PeerCore::endCollective() {
  const auto index = static_cast<std::uint64_t>(collectives_.index());
  collectives_.beginCombine();
  // Neighbours in increasing rank (neighbours() is sorted), so every path sums alike.
  for (int j : expected_) {
    Edge& e = edges_.at(j);
    if (e.collectives.empty() || e.collectives.front().first != index)
      continue;  // missing (suspect or dead): left out
    std::vector<std::uint8_t> buf = std::move(e.collectives.front().second);
    e.collectives.pop_front();
    if (roundCollectives_) {
      counters_.bytesReceived += buf.size();
      counters_.bytesReceivedFrom[j] += buf.size();
    } else {
      counters_.collectiveBytes += buf.size();
    }
    const auto env = readEnvelope(buf);  // checked on arrival
    if (env.isOk()) {
      const std::size_t room = buf.size() - std::min(buf.size(), kEnvelopeBytes);
      const auto payload = std::span<const std::uint8_t>(buf).subspan(
          std::min(buf.size(), kEnvelopeBytes), std::min<std::size_t>(env->messageBytes, room));
      if (!collectives_.combine(payload, env->liveDegree)) drop("bad_collective");
    }
    ++counters_.messagesApplied;
    e.recycle(std::move(buf), roundWireBytes());
  }
  collectives_.endCombine();
}

void PeerCore::finishCollectives() {
  if (!collectives_.active()) return;
  collectives_.finish(x_);
  // A new model outside the rounds (start-up sync, finalize): the new anchor. A round's average
  // is the mixed model of its round: finishAveragedRound() follows.
  if (!roundCollectives_) trainer_.keepAnchor(x_);
  sendTo_.clear();
  expected_.clear();
}

PeerState PeerCore::saveState() const {
  PeerState s;
  saveState(s);
  return s;
}

void PeerCore::saveState(PeerState& s) const {
  s.round = round_;
  s.model.assign(x_.begin(), x_.end());
  trainer_.saveState(s);
  algorithm_->stateInto(s.algorithm);
  s.algorithmScalars = algorithm_->scalars();
  s.health = health_.history();
  s.counters = counters_;
  const auto* robust = algorithm_->robustMixer();
  s.trust = robust ? robust->trust() : std::vector<algorithms::NeighbourTrust>{};
}

Status PeerCore::restoreState(const PeerState& s) {
  GV_RETURN_IF_ERROR(trainer_.checkState(s));
  // The algorithm's buffers: the neighbours that were dead then, or are dead now, resync.
  std::vector<int> fresh;
  GV_RETURN_IF_ERROR(algorithm_->restore(
      s.algorithm, s.algorithmScalars, [this](int j) { return isDead(j); }, fresh));
  for (int j : fresh) {
    if (Edge* e = edges_.find(j)) e->resyncRequested = true;
  }
  GV_RETURN_IF_ERROR(trainer_.loadState(s));
  round_ = s.round;
  x_ = s.model;
  health_.setHistory(s.health);
  counters_ = s.counters;
  // Only this peer's neighbours' (a file names any number).
  std::vector<algorithms::NeighbourTrust> trust;
  for (const auto& t : s.trust) {
    if (edges_.find(t.neighbour) != nullptr) trust.push_back(t);
  }
  algorithm_->restoreTrust(trust);
  // Every share of the rounds up to the saved one is in the algorithm's state (a checkpointed
  // round waits for them all: PeerCoreOptions::syncEvery); none is awaited again.
  for (auto& [j, e] : edges_) e.appliedThrough = std::max(e.appliedThrough, s.round);
  return Status::ok();
}

void PeerCore::resyncAllEdges(bool await) {
  if (algorithm_->publicCopyHash() == 0) return;
  for (auto& [j, e] : edges_) {
    if (!isDead(j)) e.resyncBothWays(await);
  }
}

namespace {
// The algorithm's public copy of the model, in its state(): CHOCO's one copy, or the first of
// compressed gt's two (its snapshots carry [model copy | tracker copy]).
bool isPublicModel(std::string_view name) {
  return name == "public_copy" || name == "public_model";
}
}  // namespace

bool PeerCore::adoptFirstSnapshot() {
  for (const auto& [name, values] : algorithm_->state()) {
    if (isPublicModel(name) && values.size() == x_.size()) {
      adoptSnapshot_ = true;
      return true;
    }
  }
  return false;
}

void PeerCore::adopt(int j, std::span<const float> copy) {
  // The model's part of the neighbour's public copy; gt's tracker copy stays this peer's own (its
  // tracker starts from its own gradient, as at round 0, and the neighbours get the copy below).
  if (copy.size() < x_.size()) return;
  const auto model = copy.first(x_.size());
  auto buffers = algorithm_->state();
  for (auto& [name, values] : buffers) {
    if (isPublicModel(name)) values.assign(model.begin(), model.end());
  }
  if (!algorithm_->loadState(buffers).isOk()) return;
  adoptSnapshot_ = false;
  x_.assign(model.begin(), model.end());
  trainer_.modelReplaced();
  counters_.stateFrom = j;
  // Its public copy changed at once: every neighbour gets it with the next message (not held back
  // by the snapshot rate limit: until it comes, the neighbours' replicas would take its deltas on
  // the old copy).
  for (auto& [k, e] : edges_) {
    if (isDead(k)) continue;
    e.sendSnapshot = true;
    e.lastSnapshotRound = INT64_MIN / 2;
  }
}

void PeerCore::setEdgeIncarnation(int neighbour, std::uint32_t incarnation) {
  edges_.at(neighbour).incarnation = incarnation;
}

bool PeerCore::rejoin(int j, std::uint32_t incarnation, const std::optional<security::Key>& key,
                      bool encrypt, std::int64_t theirRound, security::Cipher cipher) {
  Edge* e = edges_.find(j);
  if (e == nullptr || e->quarantined) return false;
  if (!isDead(j)) {
    // It restarted before this peer noticed: its old edge ends here (not counted as lost).
    markDead(j, /*lost=*/false);
  }
  e->restart(incarnation, key, encrypt, cipher, roundWireBytes());
  if (!revive(j)) return false;
  // A neighbour that is not far behind is not catching up (catchingUp()): were both ends of an
  // edge to stop waiting for each other, both could run ahead of their other neighbours in turn.
  // Its messages of rounds before theirRound never come (they went out before the new
  // connection).
  noteRound(*e, theirRound);
  --counters_.revivedNeighbours;  // counted as rejoined, not revived
  ++counters_.rejoinedNeighbours;
  return true;
}

void PeerCore::noteRound(Edge& e, std::int64_t round) {
  // Never past the run's last round.
  if (options_.rounds > 0) round = std::min(round, options_.rounds - 1);
  e.newestRound = std::max(e.newestRound, round);
  if (e.newestRound >= round_ - options_.catchUpLag) e.catchingUp = false;
}

void PeerCore::resetAlgorithm(std::unique_ptr<algorithms::Algorithm> algorithm) {
  algorithm_ = std::move(algorithm);
  message_.resize(std::max(message_.size(), algorithm_->maxMessageBytes()));
}

void PeerCore::refuse(int j, Edge& e, std::string_view reason) {
  drop(reason);
  if (options_.quarantineAfter <= 0 || isDead(j) || e.lastRefusedRound == round_) return;
  e.lastRefusedRound = round_;
  if (++e.refusedRounds < options_.quarantineAfter) return;
  quarantine(j, e,
             "quarantined: its messages were refused in " + std::to_string(e.refusedRounds) +
                 " rounds in a row (the last: " + std::string(reason) + ")");
}

void PeerCore::quarantineDistrusted(const algorithms::NeighbourTrust& t) {
  Edge* e = edges_.find(t.neighbour);
  if (e == nullptr || e->quarantined || isDead(t.neighbour)) return;
  quarantine(t.neighbour, *e, algorithms::quarantineReason(t));
}

void PeerCore::quarantine(int j, Edge& e, std::string why) {
  ++counters_.quarantined;
  e.quarantined = true;
  quarantined_.emplace_back(j, std::move(why));
  markDead(j, /*lost=*/true);
}

std::vector<std::pair<int, std::string>> PeerCore::takeQuarantined() {
  return std::exchange(quarantined_, {});
}

bool PeerCore::revive(int j) {
  if (!edges_.revive(j)) return false;
  Edge& e = edges_.at(j);
  // Still to be dropped after this round's mix (it died after its message arrived): keep it.
  pendingDrops_.erase(std::remove(pendingDrops_.begin(), pendingDrops_.end(), j),
                      pendingDrops_.end());
  algorithm_->addNeighbour(j);
  e.arrived = e.heard = false;
  e.revivedRound = round_;
  e.catchingUp = true;
  if (algorithm_->publicCopyHash() != 0) e.resyncBothWays(/*await=*/true);
  ++counters_.revivedNeighbours;
  return true;
}

bool PeerCore::onlyLostMessagesMissing() const {
  if (options_.mixDelay > 0) return false;
  for (int j : expected_) {
    const Edge* e = edges_.find(j);
    if (isDead(j) || e == nullptr || e->arrived || e->heard || catchingUp(*e)) continue;
    if (e->newestRound <= round_) return false;
  }
  return true;
}

void PeerCore::skipTo(std::int64_t round) {
  if (round <= round_ + 1) return;
  counters_.roundsSkipped += static_cast<std::uint64_t>(round - round_ - 1);
  round_ = round - 1;
  if (algorithm_->publicCopyHash() == 0) return;
  for (auto& [j, e] : edges_) {
    if (!isDead(j)) e.resyncBothWays(/*await=*/true);
  }
}

void PeerCore::markDead(int j, bool lost) {
  if (!edges_.markDead(j, lost)) return;
  if (lost) ++counters_.deadNeighbours;
  // Its state is still needed for this round's mix when its message of this round arrived.
  if (edges_.at(j).arrived)
    pendingDrops_.push_back(j);
  else
    algorithm_->dropNeighbour(j);
}

std::size_t PeerCore::roundWireBytes() const {
  return kEnvelopeBytes + message_.size() + security::kSealTagBytes;
}

}  // namespace grapevine::engine
