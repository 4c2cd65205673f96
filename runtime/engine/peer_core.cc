#include "runtime/engine/peer_core.h"

#include <algorithm>
#include <cstring>

#include "runtime/engine/envelope.h"

namespace grapevine::engine {

PeerCore::PeerCore(const PeerCoreOptions& options, const topology::Schedule& schedule,
                   std::unique_ptr<train::Workload> workload,
                   std::unique_ptr<train::Optimizer> optimizer,
                   std::unique_ptr<algorithms::Algorithm> algorithm, std::vector<float> x0)
    : options_(options),
      schedule_(schedule),
      workload_(std::move(workload)),
      optimizer_(std::move(optimizer)),
      algorithm_(std::move(algorithm)),
      x_(std::move(x0)) {
  const std::size_t n = x_.size();
  g_.resize(n);
  u_.resize(n);
  xBefore_.resize(n);
  neighbours_ = schedule_.allNeighbours(options_.rank);
  message_.resize(algorithm_->maxMessageBytes());
  wireCapacity_ = kEnvelopeBytes + message_.size() + n * sizeof(float);
  for (int j : neighbours_) {
    Edge& e = edges_[j];
    e.out.resize(wireCapacity_);
  }
}

std::vector<int> PeerCore::liveOf(const std::vector<int>& peers) const {
  std::vector<int> out;
  for (int j : peers) {
    if (!dead_.count(j)) out.push_back(j);
  }
  return out;
}

int PeerCore::liveDegree() const { return static_cast<int>(neighbours_.size() - dead_.size()); }

bool PeerCore::isolated() const { return !neighbours_.empty() && liveDegree() == 0; }

Status PeerCore::beginRound(std::int64_t round) {
  round_ = round;
  for (auto& [j, e] : edges_) e.arrived = false;

  // Local optimizer step(s): x <- x - lr * u.
  std::copy(x_.begin(), x_.end(), xBefore_.begin());
  lastLr_ = optimizer_->lr(round);
  double loss = 0;
  for (int s = 0; s < options_.localSteps; ++s) {
    if (s == 0 && gradientReady_) {
      loss += lastLoss_;  // computed during the previous round's communication (overlap)
    } else {
      loss += workload_->gradient(x_, g_);
    }
    optimizer_->direction(g_, x_, u_, round);
    const float lr = static_cast<float>(lastLr_);
    for (std::size_t k = 0; k < x_.size(); ++k) x_[k] -= lr * u_[k];
  }
  gradientReady_ = false;
  lastLoss_ = loss / options_.localSteps;

  const topology::PeerPlan plan = schedule_.plan(options_.rank, round);
  sendTo_ = liveOf(options_.sendToAllNeighbours ? neighbours_ : plan.sendTo);
  expected_ = liveOf(options_.sendToAllNeighbours ? neighbours_ : plan.recvFrom);
  degreeAtRound_ = static_cast<std::uint32_t>(liveDegree());
  checkRound_ = options_.checkEvery > 0 && round > 0 && round % options_.checkEvery == 0 &&
                algorithm_->publicCopyHash() != 0;

  auto n = algorithm_->prepare(x_, static_cast<std::uint64_t>(round), message_);
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
    }
    std::memcpy(e.out.data() + kEnvelopeBytes, message_.data(), messageBytes_);
    if (e.sendSnapshot) {
      const auto copy = algorithm_->publicCopy();
      env.flags |= kFlagSnapshot;
      env.snapshotBytes = static_cast<std::uint32_t>(copy.size_bytes());
      std::memcpy(e.out.data() + kEnvelopeBytes + messageBytes_, copy.data(), copy.size_bytes());
      e.sendSnapshot = false;
    }
    e.outBytes = kEnvelopeBytes + messageBytes_ + env.snapshotBytes;
    env.payloadCrc = payloadChecksum(
        std::span<const std::uint8_t>(e.out).subspan(kEnvelopeBytes, e.outBytes - kEnvelopeBytes));
    writeEnvelope(env, e.out);
    counters_.bytesSent += e.outBytes;
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
      e.spare.push_back(std::move(buf));
    }
  }
  return Status::ok();
}

std::span<const std::uint8_t> PeerCore::outgoing(int neighbour) {
  const Edge& e = edges_.at(neighbour);
  return {e.out.data(), e.outBytes};
}

void PeerCore::onMessage(int j, std::span<const std::uint8_t> bytes) {
  auto it = edges_.find(j);
  if (it == edges_.end() || dead_.count(j)) {
    drop("unknown_sender");
    return;
  }
  Edge& e = it->second;
  auto env = readEnvelope(bytes);
  if (!env.isOk()) {
    drop(envelopeErrorReason(env.status()));
    return;
  }
  if (env->sender != static_cast<std::uint32_t>(j)) {
    drop("wrong_sender");
    return;
  }
  if (env->sequence < e.nextSeqIn) {
    drop("duplicate");
    return;
  }
  if (env->sequence > e.nextSeqIn) {
    // Earlier messages of this edge were lost (dropped as corrupt): replicas may have drifted.
    counters_.dropped["gap"] += env->sequence - e.nextSeqIn;
    e.resyncRequested = algorithm_->publicCopyHash() != 0;
  }
  e.nextSeqIn = env->sequence + 1;
  e.lastRound = std::max(e.lastRound, static_cast<std::int64_t>(env->round));
  counters_.bytesReceived += bytes.size();
  if (env->round > static_cast<std::uint64_t>(round_)) {
    std::vector<std::uint8_t> buf;
    if (!e.spare.empty()) {
      buf = std::move(e.spare.back());
      e.spare.pop_back();
    }
    buf.assign(bytes.begin(), bytes.end());
    e.ahead.push_back(std::move(buf));
    return;
  }
  apply(j, e, *env, bytes);
}

void PeerCore::apply(int j, Edge& e, const Envelope& header, std::span<const std::uint8_t> bytes) {
  const Envelope* env = &header;  // already checked by readEnvelope in onMessage
  const auto message = bytes.subspan(kEnvelopeBytes, env->messageBytes);
  const auto round = static_cast<std::int64_t>(env->round);
  if (env->flags & kFlagResyncRequest) e.sendSnapshot = true;
  Status st;
  if (round == round_ && !e.arrived) {
    double w = 0;
    const auto& weights = schedule_.plan(options_.rank, round_).weights;
    for (const auto& [k, wk] : weights) {
      if (k == j) w = wk;
    }
    if (options_.dynamicMetropolis && w > 0) {
      w = 1.0 / (1.0 + std::max(degreeAtRound_, env->liveDegree));
    }
    st = algorithm_->receive(j, w, message, env->round);
    if (st.isOk()) {
      e.arrived = true;
      e.degreeAt = env->liveDegree;
      e.stepAt = env->proposedStep;
      ++counters_.messagesApplied;
    }
  } else if (round < round_) {
    st = algorithm_->receiveLate(j, message, env->round);
    if (st.isOk()) ++counters_.lateApplied;
  } else {
    drop("duplicate_round");
    return;
  }
  if (!st.isOk()) {
    drop("decode");
    e.resyncRequested = algorithm_->publicCopyHash() != 0;
    return;
  }
  if (env->flags & kFlagSnapshot) {
    const auto snap = bytes.subspan(kEnvelopeBytes + env->messageBytes, env->snapshotBytes);
    std::vector<float> copy(snap.size() / sizeof(float));
    std::memcpy(copy.data(), snap.data(), copy.size() * sizeof(float));
    if (algorithm_->resetReplica(j, copy).isOk())
      ++counters_.resyncs;
    else
      drop("bad_snapshot");
  }
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

bool PeerCore::roundComplete() const {
  for (int j : expected_) {
    const auto it = edges_.find(j);
    if (!dead_.count(j) && it != edges_.end() && !it->second.arrived) return false;
  }
  return true;
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
  for (const auto& [j, w] : plan.weights) {
    if (dead_.count(j)) continue;
    const Edge& e = edges_.at(j);
    if (!e.arrived) {
      suspects.push_back(j);
      continue;
    }
    double wj = w;
    if (options_.dynamicMetropolis) wj = 1.0 / (1.0 + std::max(degreeAtRound_, e.degreeAt));
    mw.neighbours.emplace_back(j, wj);
    mw.proposedSteps.push_back(e.stepAt);
  }
  counters_.suspectRounds += suspects.size();
  algorithm_->mix(x_, mw);
  optimizer_->afterMixing(xBefore_, x_, lastLr_);
  return suspects;
}

void PeerCore::markDead(int j) {
  if (!edges_.count(j) || dead_.count(j)) return;
  dead_[j] = true;
  algorithm_->dropNeighbour(j);
}

}  // namespace grapevine::engine
