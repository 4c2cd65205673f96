#include "runtime/engine/peer_core.h"

#include <algorithm>
#include <bit>
#include <cassert>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <sstream>
#include <tuple>
#include <utility>

#include "kernels/ops.h"
#include "runtime/common/byte_order.h"
#include "runtime/engine/envelope.h"
#include "runtime/security/auth.h"

namespace grapevine::engine {

namespace {

// |x|, on the vectorized kernel (a scalar double loop cost 14 ms per call at 10 M values, and the
// health check runs twice a round). Feeds local decisions only: the summation order may differ
// between kernel tables by rounding.
double norm(std::span<const float> x) {
  return std::sqrt(kernels::cpuOps().sumSquares(x.data(), x.size()));
}

// Divergence thresholds (see PeerCore::divergence()).
constexpr double kLossEmaWeight = 0.1;   // of the newest round in the loss average
constexpr double kLossGrowth = 1000.0;   // x the lowest loss average
constexpr double kLossOverFirst = 10.0;  // x the first round's loss
constexpr double kNormGrowth = 1000.0;   // x max(initial |x|, 1)

// Notice payload: origin u32, round u64, loss f64, model norm f64, reason length u16, reason.
constexpr std::size_t kNoticeFixedBytes = 4 + 8 + 8 + 8 + 2;
constexpr std::size_t kNoticeMaxReason = 512;

// A copy of `bytes` in a reused buffer from `spare` (or a new one): messages held for later.
std::vector<std::uint8_t> copyToSpare(std::vector<std::vector<std::uint8_t>>& spare,
                                      std::span<const std::uint8_t> bytes) {
  std::vector<std::uint8_t> buf;
  if (!spare.empty()) {
    buf = std::move(spare.back());
    spare.pop_back();
  }
  buf.assign(bytes.begin(), bytes.end());
  return buf;
}

}  // namespace

PeerCore::PeerCore(const PeerCoreOptions& options, const topology::Schedule& schedule,
                   std::unique_ptr<train::Workload> workload,
                   std::unique_ptr<train::Optimizer> optimizer,
                   std::unique_ptr<algorithms::Algorithm> algorithm, std::vector<float> x0)
    : options_(options),
      schedule_(schedule),
      workload_(std::move(workload)),
      optimizer_(std::move(optimizer)),
      algorithm_(std::move(algorithm)),
      x_(std::move(x0)),
      collectives_(options.rank) {
  const std::size_t n = x_.size();
  g_.resize(n);
  xBefore_.resize(n);
  neighbours_ = schedule_.allNeighbours(options_.rank);
  message_.resize(algorithm_->maxMessageBytes());
  // Room for a resync snapshot of the public copy (gt's holds x and y: 2 n values).
  const std::size_t snapshot = std::max(n, algorithm_->publicCopy().size()) * sizeof(float);
  wireCapacity_ = std::max(kEnvelopeBytes + message_.size() + snapshot,
                           kEnvelopeBytes + kNoticeFixedBytes + kNoticeMaxReason);
  wireCapacity_ =
      std::max(wireCapacity_, kEnvelopeBytes + kCollectiveHeaderBytes + kMaxSmallCollective * 8);
  if (options_.collectives) {
    wireCapacity_ = std::max(wireCapacity_, kEnvelopeBytes + kCollectiveHeaderBytes + n * 8);
  }
  wireCapacity_ += security::kSealTagBytes;  // room for a seal (setEdgeKey)
  for (int j : neighbours_) {
    Edge& e = edges_[j];
    e.out = LazyBuffer(wireCapacity_);
  }
  initialNorm_ = norm(x_);
  if (options_.outer.active()) {
    outer_ = std::make_unique<train::OuterOptimizer>(options_.outer, n);
    xBefore_ = x_;
  }
}

void PeerCore::applyOuterStep() {
  // The outer step from the anchor over the mixed (or averaged) model.
  if (outer_) outer_->step(xBefore_, x_, workload_->bufferRanges());
}

void PeerCore::keepAnchor() {
  // The round's model is the next anchor; a diverged round keeps the old one, which
  // abandonRound() restores.
  if (outer_ && !divergence_) std::copy(x_.begin(), x_.end(), xBefore_.begin());
}

void PeerCore::finishAveragedRound() {
  applyOuterStep();
  if (!divergence_) checkHealth(lastLoss_, true);
  keepAnchor();
}

Status PeerCore::setAnchor(std::span<const float> values) {
  if (values.size() != x_.size()) {
    return invalidArgument("outer anchor: " + std::to_string(values.size()) +
                           " values, this peer has " + std::to_string(x_.size()));
  }
  std::copy(values.begin(), values.end(), xBefore_.begin());
  return Status::ok();
}

bool PeerCore::checkHealth(double loss, bool afterMixing) {
  const double n = norm(x_);
  // The API's caller may not report a loss: then only the model is checked.
  const bool lossKnown = !(options_.lossMayBeUnknown && std::isnan(loss));
  std::string reason;
  if (!afterMixing && lossKnown) {
    if (!lossSeen_) {
      firstLoss_ = loss;
      lossEma_ = minLossEma_ = loss;
      lossSeen_ = true;
    } else {
      lossEma_ = (1.0 - kLossEmaWeight) * lossEma_ + kLossEmaWeight * loss;
      minLossEma_ = std::min(minLossEma_, lossEma_);
    }
  }
  if (lossKnown && !std::isfinite(loss)) {
    reason = "the loss is not finite";
  } else if (!std::isfinite(n)) {
    reason = afterMixing ? "the model is not finite after mixing" : "the model is not finite";
  } else if (n > kNormGrowth * std::max(initialNorm_, 1.0)) {
    reason = "the model norm grew over " + std::to_string(static_cast<int>(kNormGrowth)) +
             "x its initial value" + (afterMixing ? " in mixing" : "");
  } else if (!afterMixing && lossKnown && lossEma_ > kLossGrowth * minLossEma_ &&
             lossEma_ > kLossOverFirst * firstLoss_) {
    reason = "the loss average grew over " + std::to_string(static_cast<int>(kLossGrowth)) +
             "x its lowest";
  }
  if (reason.empty()) return true;
  divergence_ = Divergence{round_, options_.rank, loss, n, reason};
  return false;
}

std::string divergenceMessage(const Divergence& d, double consensusDistance) {
  std::ostringstream os;
  os << "diverged at round " << d.round << " (peer " << d.origin << ": " << d.reason << "; loss "
     << d.loss << ", model norm " << d.modelNorm;
  if (!std::isnan(consensusDistance)) os << ", consensus distance " << consensusDistance;
  os << "): lower optimizer.lr or algorithm.consensus_step";
  return os.str();
}

void PeerCore::abandonRound() {
  std::copy(xBefore_.begin(), xBefore_.end(), x_.begin());
  round_ = std::max<std::int64_t>(round_ - 1, -1);
  sendTo_.clear();
  gradientReady_ = false;
}

std::span<const std::uint8_t> PeerCore::divergenceNotice(int j) {
  Edge& e = edges_.at(j);
  const Divergence& d = *divergence_;
  const std::string reason = d.reason.substr(0, kNoticeMaxReason);
  const std::size_t payload = kNoticeFixedBytes + reason.size();
  e.notice.assign(kEnvelopeBytes + payload + (e.key ? security::kSealTagBytes : 0), 0);
  std::uint8_t* p = e.notice.data() + kEnvelopeBytes;
  storeLe(p, static_cast<std::uint32_t>(d.origin));
  storeLe(p + 4, static_cast<std::uint64_t>(d.round));
  storeLe(p + 12, std::bit_cast<std::uint64_t>(d.loss));
  storeLe(p + 20, std::bit_cast<std::uint64_t>(d.modelNorm));
  storeLe(p + 28, static_cast<std::uint16_t>(reason.size()));
  std::memcpy(p + kNoticeFixedBytes, reason.data(), reason.size());
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
  markSealed(e, env);
  writeEnvelope(env, e.notice);
  std::size_t bytes = kEnvelopeBytes + payload;
  seal(e, env, e.notice, bytes);
  return {e.notice.data(), bytes};
}

namespace {

// Reads a divergence notice's payload; nullopt when malformed.
std::optional<Divergence> readNotice(std::span<const std::uint8_t> m) {
  if (m.size() < kNoticeFixedBytes) return std::nullopt;
  const std::uint8_t* p = m.data();
  const auto len = loadLe<std::uint16_t>(p + 28);
  if (len > kNoticeMaxReason || m.size() != kNoticeFixedBytes + len) return std::nullopt;
  const auto round = loadLe<std::uint64_t>(p + 4);
  if (round > static_cast<std::uint64_t>(INT64_MAX)) return std::nullopt;
  Divergence d;
  d.origin = static_cast<int>(loadLe<std::uint32_t>(p));
  d.round = static_cast<std::int64_t>(round);
  d.loss = std::bit_cast<double>(loadLe<std::uint64_t>(p + 12));
  d.modelNorm = std::bit_cast<double>(loadLe<std::uint64_t>(p + 20));
  d.reason.assign(reinterpret_cast<const char*>(p + kNoticeFixedBytes), len);
  return d;
}

}  // namespace

std::vector<int> PeerCore::liveOf(const std::vector<int>& peers) const {
  std::vector<int> out;
  for (int j : peers) {
    if (!dead_.count(j)) out.push_back(j);
  }
  return out;
}

int PeerCore::liveDegree() const { return static_cast<int>(neighbours_.size() - dead_.size()); }

int PeerCore::unlostDegree() const {
  const auto lost =
      std::count_if(dead_.begin(), dead_.end(), [](const auto& d) { return d.second; });
  return static_cast<int>(neighbours_.size()) - static_cast<int>(lost);
}

bool PeerCore::isolated() const { return !neighbours_.empty() && liveDegree() == 0; }

// Local optimizer step(s): x <- x - lr * u, from the precomputed gradient first (overlap).
void PeerCore::takeLocalSteps(std::int64_t round, const RoundInput& input) {
  stepped_ = input.localSteps;
  // The caller's own steps (mix()) moved the model from the anchor, which the outer step needs.
  if (stepped_ || !outer_) std::copy(x_.begin(), x_.end(), xBefore_.begin());
  lastLr_ = std::isnan(input.lr) ? optimizer_->lr(round) : input.lr;
  // The neighbours are ahead (algorithm.staleness): the model goes out as it is. Never before
  // this peer's first computed round: until then there is no loss to report, and a 0 would enter
  // the divergence check's history as its lowest (a false "grew 1000x" seen under CI load).
  if (stepped_ && input.skipCompute && stepTaken_) {
    ++counters_.roundsComputeSkipped;
    return;  // lastLoss_ stays the last computed one
  }
  stepTaken_ = stepTaken_ || stepped_;
  double loss = 0;
  for (int s = 0; stepped_ && s < options_.localSteps; ++s) {
    if (s == 0 && gradientReady_) {
      loss += lastLoss_;  // computed during the previous round's communication (overlap)
    } else {
      loss += workload_->gradient(x_, g_);
    }
    // The direction u replaces the gradient in place (every optimizer reads g[i] before it writes
    // u[i]): one model-sized buffer less.
    // (A value without a gradient is skipped, except under gradient tracking, whose tracker
    // needs every coordinate's gradient: there it is a zero gradient.)
    optimizer_->direction(g_, x_, g_, round * options_.localSteps + s,
                          algorithm_->tracksDirection() ? std::span<const train::ValueRange>{}
                                                        : workload_->skippedRanges());
    // Gradient tracking chooses the direction (its tracker); every other algorithm takes u as is.
    if (algorithm_->tracksDirection())
      algorithm_->direction(x_, g_, static_cast<std::uint64_t>(round));
    const float lr = static_cast<float>(lastLr_);
    for (std::size_t k = 0; k < x_.size(); ++k) x_[k] -= lr * g_[k];
  }
  gradientReady_ = false;
  lastLoss_ = stepped_ ? loss / options_.localSteps : input.loss;
}

// Who this round's message goes to and whose messages it waits for (live neighbours only), the
// live degree it reports, and the health counters (rounds isolated or below half the degree).
void PeerCore::planRecipients(std::int64_t round) {
  const topology::PeerPlan plan = schedule_.plan(options_.rank, round);
  sendTo_ = liveOf(options_.sendToAllNeighbours ? neighbours_ : plan.sendTo);
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
      if (e.needRound >= 0 && !dead_.count(j)) expected_.push_back(j);
    }
  }
  if (options_.averageEachRound) {  // no gossip: the round ends with the averaging collectives
    sendTo_.clear();
    expected_.clear();
  }
  degreeAtRound_ = static_cast<std::uint32_t>(liveDegree());
  if (lostNeighbours() > 0) {
    if (degreeAtRound_ == 0) ++counters_.roundsIsolated;
    if (2 * degreeAtRound_ < neighbours_.size()) ++counters_.roundsBelowHalfDegree;
  }
}

Status PeerCore::beginRound(std::int64_t round, const RoundInput& input) {
  round_ = round;
  for (auto& [j, e] : edges_) e.arrived = e.heard = false;
  if (options_.maxDeltaRatio > 0) {
    // What this round's messages may change (security.max_delta_ratio), relative to the model.
    const double scale = std::max(1.0, double(kernels::cpuOps().maxAbs(x_.data(), x_.size())));
    deltaLimit_ = static_cast<float>(std::min(options_.maxDeltaRatio * scale, 3.0e38));
  }

  takeLocalSteps(round, input);
  if (divergence_ || !checkHealth(lastLoss_, false)) {
    sendTo_.clear();  // nothing goes out: the driver abandons the round
    expected_.clear();
    return Status::ok();
  }

  planRecipients(round);
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

  for (int j : sendTo_) {
    Edge& e = edges_[j];
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
    env.payloadCrc = payloadChecksum(e.out.span(e.outBytes).subspan(kEnvelopeBytes));
    if (corruptOutgoing_ && e.outBytes > kEnvelopeBytes) e.out.data()[kEnvelopeBytes] ^= 0x01;
    markSealed(e, env);
    writeEnvelope(env, e.out.span());
    seal(e, env, e.out.span(), e.outBytes);
    counters_.bytesSent += e.outBytes;
    counters_.bytesSentTo[j] += e.outBytes;
    counters_.bytesDenseEquivalent += kEnvelopeBytes + algorithm_->denseBytes();
  }
  // Messages of this round that arrived while we were still in the previous one.
  for (auto& [j, e] : edges_) {
    while (!e.ahead.empty()) {
      auto env = readEnvelope(e.ahead.front());  // checked on arrival; cannot fail here
      if (!env.isOk() || env->round > static_cast<std::uint64_t>(round)) break;
      std::vector<std::uint8_t> buf = std::move(e.ahead.front());
      e.ahead.pop_front();
      apply(j, e, *env, buf);
      recycle(e, std::move(buf));
    }
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

void PeerCore::markSealed(const Edge& e, Envelope& env) const {
  if (e.key) env.flags |= kFlagSealed;
}

void PeerCore::seal(const Edge& e, const Envelope& env, std::span<std::uint8_t> buf,
                    std::size_t& bytes) const {
  if (!e.key) return;
  security::seal(*e.key, e.encrypt, env.sender, env.sequence, kEnvelopeBytes,
                 buf.first(bytes + security::kSealTagBytes), e.cipher);
  bytes += security::kSealTagBytes;
}

std::span<const std::uint8_t> PeerCore::outgoing(int neighbour) {
  const Edge& e = edges_.at(neighbour);
  return {e.out.data(), e.outBytes};
}

bool PeerCore::unseal(const Edge& e, std::span<const std::uint8_t>& bytes) {
  // Nothing in the message is read before its tag verified (the sender and sequence number only
  // form the nonce: changed ones fail the tag).
  if (bytes.size() < kEnvelopeBytes + security::kSealTagBytes) return false;
  const auto sender = loadLe<std::uint32_t>(bytes.data() + 8);
  const auto sequence = loadLe<std::uint64_t>(bytes.data() + 16);
  if (e.encrypt) {
    opened_.assign(bytes.begin(), bytes.end());
    if (!security::open(*e.key, true, sender, sequence, kEnvelopeBytes, opened_, e.cipher))
      return false;
    bytes = opened_;
  } else if (!security::verify(*e.key, sender, sequence, bytes)) {
    return false;
  }
  bytes = bytes.first(bytes.size() - security::kSealTagBytes);
  return true;
}

void PeerCore::onMessage(int j, std::span<const std::uint8_t> bytes) {
  auto it = edges_.find(j);
  if (it == edges_.end() || dead_.count(j)) {
    drop("unknown_sender");
    return;
  }
  Edge& e = it->second;
  if (e.key && !unseal(e, bytes)) {
    drop("auth");
    return;
  }
  // From here on the message is the neighbour's own (it authenticated, or the edge has no key):
  // refusals count towards its quarantine.
  auto env = readEnvelope(bytes);
  if (!env.isOk()) {
    refuse(j, e, envelopeErrorReason(env.status()));
    return;
  }
  if (env->sender != static_cast<std::uint32_t>(j)) {
    refuse(j, e, "wrong_sender");
    return;
  }
  if (((env->flags & kFlagSealed) != 0) != e.key.has_value()) {
    refuse(j, e, "auth");  // sealed where we have no key for the edge, or the reverse
    return;
  }
  if (e.incarnation && env->incarnation != *e.incarnation) {
    drop("old_incarnation");  // from before the neighbour's restart or redial (rejoin())
    return;
  }
  if (env->sequence < e.nextSeqIn) {
    drop("duplicate");
    return;
  }
  if (env->sequence - e.nextSeqIn > kSequenceWindow) {
    refuse(j, e, "sequence_window");
    return;
  }
  if (!(env->flags & (kFlagDiverged | kFlagCollective))) {
    noteRound(e, static_cast<std::int64_t>(std::min<std::uint64_t>(env->round, INT64_MAX / 2)));
  }
  if (!(env->flags & kFlagDiverged) && !withinWindow(e, *env)) {
    drop("round_window");  // nextSeqIn unchanged: nothing of this message is kept
    return;
  }
  if (env->sequence > e.nextSeqIn) {
    // Earlier messages of this edge were lost (dropped as corrupt): replicas may have drifted.
    counters_.dropped["gap"] += env->sequence - e.nextSeqIn;
    e.resyncRequested = algorithm_->publicCopyHash() != 0;
  }
  e.nextSeqIn = env->sequence + 1;
  // Collectives are counted when they are combined (endCollective): apart from training (the
  // API's start-up sync, finalize averaging), or as the round's own bytes (averageEachRound).
  if (!(env->flags & kFlagCollective)) {
    counters_.bytesReceived += bytes.size();
    counters_.bytesReceivedFrom[j] += bytes.size();
  }
  if (env->flags & kFlagDiverged) {
    auto notice = readNotice(bytes.subspan(kEnvelopeBytes, env->messageBytes));
    if (!notice) {
      refuse(j, e, "bad_notice");
    } else if (!divergence_) {
      divergence_ = std::move(*notice);
    }
    return;
  }
  if (env->flags & kFlagCollective) {
    // A model-sized state (when collectives are enabled) or a small one; endCollective() checks
    // that it is the current collective's size.
    // (A chunk of the model's: tree kinds, f32 or f64.)
    const std::size_t bytesOfValues = env->messageBytes >= kCollectiveHeaderBytes
                                          ? env->messageBytes - kCollectiveHeaderBytes
                                          : 0;
    const bool sized = bytesOfValues > 0 && bytesOfValues % sizeof(float) == 0;
    if (!sized || !((options_.collectives && bytesOfValues <= x_.size() * sizeof(double)) ||
                    bytesOfValues <= kMaxSmallCollective * sizeof(double))) {
      refuse(j, e, "bad_collective");
      return;
    }
    e.collectives.emplace_back(env->round, copyToSpare(e.spare, bytes));
    return;
  }
  e.lastRound = std::max(e.lastRound, static_cast<std::int64_t>(env->round));
  // Before round 0 (round_ == -1) every message is ahead: a neighbour may start round 0 while this
  // peer is still booting or in a start-up collective.
  if (round_ < 0 || env->round > static_cast<std::uint64_t>(round_)) {
    e.ahead.push_back(copyToSpare(e.spare, bytes));
    return;
  }
  apply(j, e, *env, bytes);
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

std::size_t PeerCore::heldMessages() const {
  std::size_t n = 0;
  for (const auto& [j, e] : edges_) n += e.ahead.size() + e.collectives.size();
  return n;
}

void PeerCore::apply(int j, Edge& e, const Envelope& header, std::span<const std::uint8_t> bytes) {
  const Envelope* env = &header;  // already checked by readEnvelope in onMessage
  const auto message = bytes.subspan(kEnvelopeBytes, env->messageBytes);
  const auto round = static_cast<std::int64_t>(env->round);
  if (env->flags & kFlagResyncRequest) {
    if (e.sendSnapshot || round_ - e.lastSnapshotRound < kSnapshotMinRounds) drop("resync_rate");
    e.sendSnapshot = true;
  }
  if (e.awaitSnapshot && !(env->flags & kFlagSnapshot)) {
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
    if (options_.dynamicMetropolis && w > 0) w = liveWeight(env->liveDegree);
    st = algorithm_->receive(j, w, message, env->round, deltaLimit_);
    if (st.isOk()) {
      e.arrived = true;
      e.degreeAt = env->liveDegree;
      e.stepAt = env->proposedStep;
      ++counters_.messagesApplied;
    }
  } else if (round < round_) {
    st = algorithm_->receiveLate(j, message, env->round, deltaLimit_);
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
  if (env->flags & kFlagSnapshot) {
    const auto snap = bytes.subspan(kEnvelopeBytes + env->messageBytes, env->snapshotBytes);
    std::vector<float> copy(snap.size() / sizeof(float));
    std::memcpy(copy.data(), snap.data(), copy.size() * sizeof(float));
    // Checked like a delta's values: a NaN or infinity never enters a replica.
    if (!kernels::cpuOps().allFinite(copy.data(), copy.size())) {
      refuse(j, e, "non_finite_snapshot");
      return;
    }
    if (!algorithm_->resetReplica(j, copy).isOk()) {
      refuse(j, e, "bad_snapshot");
      if (e.awaitSnapshot && round == round_) {
        e.arrived = false;  // its replica is still a placeholder: not mixed
        e.heard = true;
      }
      return;
    }
    ++counters_.resyncs;
    e.awaitSnapshot = false;
    if (adoptSnapshot_) adopt(j, copy);
  }
  e.refusedRounds = 0;
  e.lastRefusedRound = -2;
  if (env->flags & kFlagHasHash) {
    ++counters_.replicaChecks;
    if (algorithm_->replicaHash(j) != env->publicHash) {
      ++counters_.replicaMismatches;
      e.resyncRequested = true;
    }
  }
}

std::int64_t PeerCore::lastRoundFrom(int j) const {
  const auto it = edges_.find(j);
  return it == edges_.end() ? -1 : it->second.lastRound;
}

std::int64_t PeerCore::lastRoundExpectedFrom(int j, std::int64_t rounds) const {
  if (options_.sendToAllNeighbours) return rounds - 1;
  const std::int64_t first = std::max<std::int64_t>(0, rounds - schedule_.period());
  for (std::int64_t r = rounds - 1; r >= first; --r) {
    const auto from = schedule_.plan(options_.rank, r).recvFrom;
    if (std::find(from.begin(), from.end(), j) != from.end()) return r;
  }
  return -1;
}

std::int64_t PeerCore::lastRoundSendingTo(int j, std::int64_t rounds) const {
  if (options_.sendToAllNeighbours) return rounds - 1;
  const std::int64_t first = std::max<std::int64_t>(0, rounds - schedule_.period());
  for (std::int64_t r = rounds - 1; r >= first; --r) {
    const auto to = schedule_.plan(options_.rank, r).sendTo;
    if (std::find(to.begin(), to.end(), j) != to.end()) return r;
  }
  return -1;
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
  const auto it = edges_.find(j);
  if (dead_.count(j) || it == edges_.end()) return false;
  const Edge& e = it->second;
  // Overlapped push-sum waits for the latest round it mixes; every other round for this one's.
  if (options_.mixDelay > 0) return e.appliedThrough < e.needRound;
  // algorithm.staleness: a neighbour is waited for only while it is more than that many rounds
  // behind (its messages come in order: one of round r means all before it came).
  if (withinStaleness(e)) return false;
  return !e.arrived && !e.heard && !catchingUp(e);
}

std::vector<int> PeerCore::liveSenders(std::int64_t round) const {
  const topology::PeerPlan plan = schedule_.plan(options_.rank, round);
  return liveOf(options_.sendToAllNeighbours ? neighbours_ : plan.recvFrom);
}

bool PeerCore::neighboursAhead(std::int64_t round) const {
  const std::vector<int> from = liveSenders(round);
  if (from.empty()) return false;
  return std::all_of(from.begin(), from.end(), [this, round](int j) {
    const auto it = edges_.find(j);
    return it != edges_.end() && it->second.lastRound >= round;
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

void PeerCore::precomputeGradient() {
  if (gradientReady_) return;
  lastLoss_ = workload_->gradient(x_, g_);
  gradientReady_ = true;
}

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
      if (!dead_.count(j) && e.appliedThrough < e.needRound) suspects.push_back(j);
    }
  }
  // (allreduce and diloco send no round message: nobody is awaited, nobody is suspect.)
  const decltype(plan.weights) none;
  for (const auto& [j, w] :
       options_.mixDelay > 0 || options_.averageEachRound ? none : plan.weights) {
    const Edge& e = edges_.at(j);
    // A neighbour that died after its message of this round arrived (typically: it finished its
    // last round and closed) still counts in this round's mix, as it does in the simulator.
    if (dead_.count(j) && !e.arrived) continue;
    // Taken back during this round: it was not in this round's degrees; it mixes from the next.
    if (e.revivedRound == round_) continue;
    if (!e.arrived) {
      // algorithm.staleness: within it, the neighbour's replica as it stands (every message of it
      // applied in order); otherwise (or a replica that waits for its snapshot) suspect.
      const bool stale = withinStaleness(e) && !dead_.count(j) && !e.awaitSnapshot;
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
  // A caller's own optimizer step has no quasi-global momentum of ours to feed.
  if (stepped_) optimizer_->afterMixing(xBefore_, x_, lastLr_, options_.localSteps);
  // (With averageEachRound the round's average comes later: finishAveragedRound() then.)
  if (!options_.averageEachRound) applyOuterStep();
  if (!divergence_) checkHealth(lastLoss_, true);
  if (!options_.averageEachRound) keepAnchor();
  for (int j : pendingDrops_) algorithm_->dropNeighbour(j);
  pendingDrops_.clear();
  return suspects;
}

void PeerCore::beginCollective(CollectiveKind kind, std::span<const double> initial) {
  degreeAtRound_ = static_cast<std::uint32_t>(liveDegree());
  const auto live = [this](int j) { return edges_.count(j) > 0 && dead_.count(j) == 0; };
  collectives_.begin(kind, x_, initial, neighbours_, live, degreeAtRound_, sendTo_, expected_);
  const auto index = static_cast<std::uint64_t>(collectives_.index());
  // Leftovers of earlier collectives (a neighbour that was late) are stale now.
  for (auto& [j, e] : edges_) {
    while (!e.collectives.empty() && e.collectives.front().first < index) {
      recycle(e, std::move(e.collectives.front().second));
      e.collectives.pop_front();
    }
  }
  // What goes out: the whole state, or (tree and ring kinds) one chunk of it.
  const std::size_t payload = collectives_.payloadBytes();
  for (int j : sendTo_) {
    Edge& e = edges_[j];
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
    markSealed(e, env);
    writeEnvelope(env, e.out.span());
    seal(e, env, e.out.span(), e.outBytes);
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
    if (dead_.count(j)) continue;
    const Edge& e = edges_.at(j);
    if (e.collectives.empty() || e.collectives.front().first != index) return false;
  }
  return true;
}

void PeerCore::endCollective() {
  const auto index = static_cast<std::uint64_t>(collectives_.index());
  collectives_.beginCombine();
  // Neighbours in increasing rank (neighbours_ is sorted), so every path sums alike.
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
    recycle(e, std::move(buf));
  }
  collectives_.endCombine();
}

void PeerCore::finishCollectives() {
  if (!collectives_.active()) return;
  collectives_.finish(x_);
  // A new model outside the rounds (start-up sync, finalize): the new anchor. A round's average
  // is the mixed model of its round: finishAveragedRound() follows.
  if (outer_ && !roundCollectives_) std::copy(x_.begin(), x_.end(), xBefore_.begin());
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
  s.workloadStep = workload_->step();
  s.model.assign(x_.begin(), x_.end());
  const auto m = optimizer_->momentumBuffer();
  s.momentum.assign(m.begin(), m.end());
  if (outer_) {
    const auto om = outer_->momentum();
    s.outerMomentum.assign(om.begin(), om.end());
  } else {
    s.outerMomentum.clear();
  }
  s.gradientReady = gradientReady_;
  if (gradientReady_) {
    s.gradient.assign(g_.begin(), g_.end());
  } else {
    s.gradient.clear();
  }
  algorithm_->stateInto(s.algorithm);
  s.algorithmScalars = algorithm_->scalars();
  s.initialNorm = initialNorm_;
  s.firstLoss = firstLoss_;
  s.lossEma = lossEma_;
  s.minLossEma = minLossEma_;
  s.lossSeen = lossSeen_;
  s.lastLoss = lastLoss_;
  s.lastLr = lastLr_;
  s.counters = counters_;
  const auto* robust = algorithm_->robustMixer();
  s.trust = robust ? robust->trust() : std::vector<algorithms::NeighbourTrust>{};
}

Status PeerCore::restoreState(const PeerState& s) {
  const auto size = [](std::string_view what, std::size_t got, std::size_t want) -> Status {
    if (got == want) return Status::ok();
    return invalidArgument(std::string(what) + ": " + std::to_string(got) +
                           " values, this peer has " + std::to_string(want));
  };
  GV_RETURN_IF_ERROR(size("model", s.model.size(), x_.size()));
  GV_RETURN_IF_ERROR(
      size("optimizer momentum", s.momentum.size(), optimizer_->momentumBuffer().size()));
  if (s.gradientReady) GV_RETURN_IF_ERROR(size("overlap gradient", s.gradient.size(), g_.size()));
  GV_RETURN_IF_ERROR(
      size("outer momentum", s.outerMomentum.size(), outer_ ? outer_->momentum().size() : 0));
  // The algorithm's buffers: the saved ones by name, the others (neighbours that were dead then)
  // as they start; any other name this peer does not have, or another size, means another config.
  auto buffers = algorithm_->state();
  std::vector<int> fresh;
  for (auto& [name, values] : buffers) {
    // The binding is captured through a reference of its own: clang before 16 cannot capture a
    // structured binding (a C++20 addition), and the fuzz build uses clang.
    const auto it = std::find_if(s.algorithm.begin(), s.algorithm.end(),
                                 [&n = name](const auto& b) { return b.first == n; });
    if (it == s.algorithm.end()) {
      if (name.rfind("replica/", 0) != 0)
        return invalidArgument("algorithm state: no '" + name + "'");
      fresh.push_back(std::stoi(name.substr(8)));
      continue;
    }
    GV_RETURN_IF_ERROR(size("algorithm state '" + name + "'", it->second.size(), values.size()));
    values = it->second;
  }
  for (const auto& [name, values] : s.algorithm) {
    // A neighbour that is dead here now (it has not connected since the restart): its replica is
    // not kept; the edge resyncs when it comes back.
    constexpr std::string_view kReplica = "replica/";
    if (name.starts_with(kReplica) && dead_.count(std::atoi(name.c_str() + kReplica.size()))) {
      continue;
    }
    if (std::none_of(buffers.begin(), buffers.end(),
                     [&n = name](const auto& b) { return b.first == n; }))
      return invalidArgument("algorithm state: '" + name + "' is not a buffer of this peer's " +
                             std::string(algorithm_->name()));
  }
  // Checked scalars first, so that a mismatch changes nothing.
  const auto scalarsBefore = algorithm_->scalars();
  GV_RETURN_IF_ERROR(algorithm_->loadScalars(s.algorithmScalars));
  if (Status st = algorithm_->loadState(buffers); !st.isOk()) {
    (void)algorithm_->loadScalars(scalarsBefore);
    return st;
  }
  if (!s.momentum.empty()) GV_RETURN_IF_ERROR(optimizer_->setMomentumBuffer(s.momentum));
  if (!s.outerMomentum.empty()) GV_RETURN_IF_ERROR(outer_->setMomentum(s.outerMomentum));
  round_ = s.round;
  workload_->setStep(s.workloadStep);
  x_ = s.model;
  if (outer_) xBefore_ = x_;  // a checkpoint is taken between rounds: the anchor is the model
  gradientReady_ = s.gradientReady;
  if (gradientReady_) g_ = s.gradient;
  initialNorm_ = s.initialNorm;
  firstLoss_ = s.firstLoss;
  lossEma_ = s.lossEma;
  minLossEma_ = s.minLossEma;
  lossSeen_ = s.lossSeen;
  lastLoss_ = s.lastLoss;
  lastLr_ = s.lastLr;
  counters_ = s.counters;
  // Only this peer's neighbours' (a file names any number).
  std::vector<algorithms::NeighbourTrust> trust;
  for (const auto& t : s.trust) {
    if (edges_.count(t.neighbour)) trust.push_back(t);
  }
  algorithm_->restoreTrust(trust);
  // Every share of the rounds up to the saved one is in the algorithm's state (a checkpointed
  // round waits for them all: PeerCoreOptions::syncEvery); none is awaited again.
  for (auto& [j, e] : edges_) e.appliedThrough = std::max(e.appliedThrough, s.round);
  for (int j : fresh) {
    if (edges_.count(j)) edges_[j].resyncRequested = true;
  }
  return Status::ok();
}

void PeerCore::resyncAllEdges(bool await) {
  if (algorithm_->publicCopyHash() == 0) return;
  for (auto& [j, e] : edges_) {
    if (!dead_.count(j)) resyncBothWays(e, await);
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
  const std::vector<float> zero(optimizer_->momentumBuffer().size(), 0.0f);
  (void)optimizer_->setMomentumBuffer(zero);
  gradientReady_ = false;  // a gradient computed early was of the old model
  counters_.stateFrom = j;
  // Its public copy changed at once: every neighbour gets it with the next message (not held back
  // by the snapshot rate limit: until it comes, the neighbours' replicas would take its deltas on
  // the old copy).
  for (auto& [k, e] : edges_) {
    if (dead_.count(k)) continue;
    e.sendSnapshot = true;
    e.lastSnapshotRound = INT64_MIN / 2;
  }
}

void PeerCore::setEdgeIncarnation(int neighbour, std::uint32_t incarnation) {
  edges_.at(neighbour).incarnation = incarnation;
}

bool PeerCore::rejoin(int j, std::uint32_t incarnation, const std::optional<security::Key>& key,
                      bool encrypt, std::int64_t theirRound, security::Cipher cipher) {
  const auto it = edges_.find(j);
  if (it == edges_.end() || it->second.quarantined) return false;
  Edge& e = it->second;
  if (!dead_.count(j)) {
    // It restarted before this peer noticed: its old edge ends here (not counted as lost).
    markDead(j, /*lost=*/false);
  }
  // A fresh edge: what came or went on the old connections is gone with them.
  e.nextSeqIn = e.nextSeqOut = 0;
  e.incarnation = incarnation;
  e.key = key;
  e.encrypt = encrypt;
  e.cipher = cipher;
  while (!e.ahead.empty()) {
    recycle(e, std::move(e.ahead.front()));
    e.ahead.pop_front();
  }
  e.collectives.clear();
  e.newestRound = -1;
  e.refusedRounds = 0;
  e.lastRefusedRound = -2;
  e.askedRound = INT64_MIN / 2;
  e.lastSnapshotRound = INT64_MIN / 2;
  if (!revive(j)) return false;
  // A neighbour that is not far behind is not catching up (catchingUp()): were both ends of an
  // edge to stop waiting for each other, both could run ahead of their other neighbours in turn.
  // Its messages of rounds before theirRound never come (they went out before the new
  // connection).
  noteRound(e, theirRound);
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

void PeerCore::resyncBothWays(Edge& e, bool await) {
  e.sendSnapshot = true;
  if (!await) {
    e.resyncRequested = true;
    return;
  }
  // No request now: where both ends resync (a rejoin, a restart) the neighbour sends its snapshot
  // with its first message anyway, and a request on top had it send a second, dense one behind the
  // first (a rejoin cost each edge four snapshots, not two, and each held the link for several
  // rounds). Where only this end knows (a revived neighbour that was paused), the neighbour's first
  // message without a snapshot makes the edge ask at once (apply(): awaiting_snapshot).
  e.awaitSnapshot = true;
}

void PeerCore::resetAlgorithm(std::unique_ptr<algorithms::Algorithm> algorithm) {
  algorithm_ = std::move(algorithm);
  message_.resize(std::max(message_.size(), algorithm_->maxMessageBytes()));
}

void PeerCore::refuse(int j, Edge& e, std::string_view reason) {
  drop(reason);
  if (options_.quarantineAfter <= 0 || dead_.count(j) || e.lastRefusedRound == round_) return;
  e.lastRefusedRound = round_;
  if (++e.refusedRounds < options_.quarantineAfter) return;
  quarantine(j, e,
             "quarantined: its messages were refused in " + std::to_string(e.refusedRounds) +
                 " rounds in a row (the last: " + std::string(reason) + ")");
}

void PeerCore::quarantineDistrusted(const algorithms::NeighbourTrust& t) {
  const auto it = edges_.find(t.neighbour);
  if (it == edges_.end() || it->second.quarantined || dead_.count(t.neighbour)) return;
  char why[300];
  const auto clipped = static_cast<unsigned long long>(t.roundsClipped);
  const auto mixed = static_cast<unsigned long long>(t.roundsMixed);
  if (t.restored) {
    std::snprintf(why, sizeof why,
                  "quarantined again: this peer had quarantined it before its restart (the "
                  "checkpoint's trust: suspicion %.2f after %llu rounds)",
                  t.score, mixed);
  } else if (t.roundsLossy == 0) {
    std::snprintf(why, sizeof why,
                  "quarantined: its messages lay beyond the robust mixing radius in %llu of %llu "
                  "rounds (suspicion %.2f >= algorithm.robust_quarantine)",
                  clipped, mixed, t.score);
  } else {
    std::snprintf(why, sizeof why,
                  "quarantined: of %llu rounds, its messages lay beyond the robust mixing radius "
                  "in %llu and its model's loss on this peer's probe beyond %.1fx its own in %llu "
                  "(suspicion %.2f >= algorithm.robust_quarantine)",
                  mixed, clipped, algorithms::RobustMixer::kLossSlack,
                  static_cast<unsigned long long>(t.roundsLossy), t.score);
  }
  quarantine(t.neighbour, it->second, why);
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
  const auto it = edges_.find(j);
  if (it == edges_.end() || !dead_.count(j) || it->second.quarantined) return false;
  Edge& e = it->second;
  dead_.erase(j);
  // Still to be dropped after this round's mix (it died after its message arrived): keep it.
  pendingDrops_.erase(std::remove(pendingDrops_.begin(), pendingDrops_.end(), j),
                      pendingDrops_.end());
  algorithm_->addNeighbour(j);
  e.arrived = e.heard = false;
  e.revivedRound = round_;
  e.catchingUp = true;
  if (algorithm_->publicCopyHash() != 0) resyncBothWays(e, /*await=*/true);
  ++counters_.revivedNeighbours;
  return true;
}

std::int64_t PeerCore::neighboursRound() const {
  std::int64_t newest = -1;
  for (const auto& [j, e] : edges_) {
    if (!dead_.count(j)) newest = std::max(newest, e.newestRound);
  }
  return newest;
}

bool PeerCore::onlyLostMessagesMissing() const {
  if (options_.mixDelay > 0) return false;
  for (int j : expected_) {
    const auto it = edges_.find(j);
    if (dead_.count(j) || it == edges_.end() || it->second.arrived || it->second.heard ||
        catchingUp(it->second))
      continue;
    if (it->second.newestRound <= round_) return false;
  }
  return true;
}

void PeerCore::skipTo(std::int64_t round) {
  if (round <= round_ + 1) return;
  counters_.roundsSkipped += static_cast<std::uint64_t>(round - round_ - 1);
  round_ = round - 1;
  if (algorithm_->publicCopyHash() == 0) return;
  for (auto& [j, e] : edges_) {
    if (!dead_.count(j)) resyncBothWays(e, /*await=*/true);
  }
}

void PeerCore::markDead(int j, bool lost) {
  if (!edges_.count(j) || dead_.count(j)) return;
  dead_[j] = lost;
  if (lost) ++counters_.deadNeighbours;
  // Its state is still needed for this round's mix when its message of this round arrived.
  if (edges_.at(j).arrived)
    pendingDrops_.push_back(j);
  else
    algorithm_->dropNeighbour(j);
}

void PeerCore::recycle(Edge& e, std::vector<std::uint8_t> buf) const {
  // A buffer that held a snapshot or a collective is freed, not kept: reused for round messages
  // it would hold a model's worth of memory per edge for the rest of the run.
  if (buf.capacity() > roundWireBytes()) return;
  e.spare.push_back(std::move(buf));
}

std::size_t PeerCore::roundWireBytes() const {
  return kEnvelopeBytes + message_.size() + security::kSealTagBytes;
}

}  // namespace grapevine::engine
