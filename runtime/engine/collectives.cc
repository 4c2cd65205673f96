#include "runtime/engine/collectives.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstring>
#include <tuple>

#include "runtime/common/byte_order.h"
#include "runtime/common/log.h"
#include "runtime/engine/peer_core.h"
#include "runtime/engine/setup.h"
#include "topology/topology.h"

namespace grapevine::engine {

// ---- Planning ----

int treeChunks(std::size_t modelValues) {
  const std::size_t chunks = (modelValues * sizeof(double) + kTreeChunkBytes - 1) / kTreeChunkBytes;
  return static_cast<int>(std::clamp<std::size_t>(chunks, 1, kMaxTreeChunks));
}

bool usesTree(const std::vector<CollectiveKind>& kinds) {
  return std::any_of(kinds.begin(), kinds.end(),
                     [](CollectiveKind k) { return isTreeKind(k) || isRingKind(k); });
}

bool ringAveraging(const RunPlan& plan, std::size_t modelValues) {
  const topology::Graph g = topology::unionGraph(*plan.schedule);
  return g.n >= 3 && treeChunks(modelValues) >= 2 && topology::hasRingEdges(g);
}

std::vector<CollectiveKind> ringAgreementCollectives(const RunPlan& plan) {
  return std::vector<CollectiveKind>(static_cast<std::size_t>(plan.schedule->peers() - 1),
                                     CollectiveKind::kMinimum);
}

namespace {

// Around a ring of n: n - 1 reduce-scatter steps, n - 1 all-gather steps, the closing ack.
std::vector<CollectiveKind> ringKinds(int n) {
  const auto steps = static_cast<std::size_t>(n - 1);
  std::vector<CollectiveKind> kinds(steps, CollectiveKind::kRingSum);
  kinds.insert(kinds.end(), steps, CollectiveKind::kRingGather);
  kinds.push_back(CollectiveKind::kRingAck);
  return kinds;
}

// Up and down `tree`, pipelined over its chunks: height + chunks - 1 steps each way.
std::vector<CollectiveKind> treeKinds(const CollectiveTree& tree) {
  const auto steps = static_cast<std::size_t>(tree.height + tree.chunks - 1);
  std::vector<CollectiveKind> kinds(steps, CollectiveKind::kTreeSum);
  kinds.insert(kinds.end(), steps, CollectiveKind::kTreeBroadcast);
  return kinds;
}

}  // namespace

bool roundRing(const RunPlan& plan, std::size_t modelValues) {
  const topology::Graph g = topology::unionGraph(*plan.schedule);
  return g.n >= 3 && modelValues >= static_cast<std::size_t>(g.n) && topology::hasRingEdges(g);
}

std::vector<CollectiveKind> roundAveragingCollectives(const RunPlan& plan,
                                                      std::size_t modelValues) {
  const topology::Graph g = topology::unionGraph(*plan.schedule);
  if (g.n <= 1) return {};
  if (roundRing(plan, modelValues)) {
    return ringKinds(g.n);
  }
  const CollectiveTree tree = collectiveTree(plan, 0, modelValues, /*roundRing=*/true);
  if (tree.height < 1 || 2 * (tree.height + tree.chunks - 1) > PeerCore::kRoundWindow / 2)
    return {};
  return treeKinds(tree);
}

CollectiveTree collectiveTree(const RunPlan& plan, int rank, std::size_t modelValues,
                              bool roundRingOn) {
  const topology::Graph g = topology::unionGraph(*plan.schedule);
  const topology::SpanningTree s = topology::breadthFirstTree(g, 0);
  if (!s.spans) return CollectiveTree{-1, {}, 0, -1, 1};
  CollectiveTree t;
  t.parent = s.parent[static_cast<std::size_t>(rank)];
  t.children = s.children(rank);
  t.depth = s.depth[static_cast<std::size_t>(rank)];
  t.height = s.height;
  t.chunks = treeChunks(modelValues);
  if (roundRingOn && !roundRing(plan, modelValues)) {
    // A round's tree collectives stay within the collectives' window: fewer chunks on a deep tree.
    t.chunks = std::clamp(static_cast<int>(PeerCore::kRoundWindow / 4) - t.height + 1, 1, t.chunks);
  }
  if (roundRingOn ? roundRing(plan, modelValues) : ringAveraging(plan, modelValues)) {
    t.ringSize = g.n;
    t.ringPrev = (rank + g.n - 1) % g.n;
    t.ringNext = (rank + 1) % g.n;
  }
  return t;
}

std::vector<CollectiveKind> averagingCollectives(const RunPlan& plan, std::size_t modelValues,
                                                 bool ring) {
  const topology::Graph g = topology::unionGraph(*plan.schedule);
  if (g.n <= 1) return {};
  if (ring && ringAveraging(plan, modelValues)) {
    return ringKinds(g.n);
  }
  // A connected graph whose tree is shallow enough for the collectives' window: an exact reduce
  // to rank 0 and a broadcast back, each peer sending its model once or to each child once.
  // (A leaf runs through the sum steps without waiting: the whole sequence stays within the
  // collectives' window.)
  const CollectiveTree tree = collectiveTree(plan, 0, modelValues);
  const int height = tree.height;
  if (height >= 1 && 2 * height <= PeerCore::kRoundWindow / 2) {
    return treeKinds(tree);
  }
  const topology::Weights w = topology::metropolis(g);
  const double lambda = topology::secondLargestModulus(g.n, {&w}).value;
  // The spread shrinks by lambda per round: to 1e-7 of its start (at most 20000 rounds; a
  // disconnected graph cannot average, it gets the cap and a warning).
  constexpr double kTolerance = 1e-7;
  constexpr int kMaxRounds = 20000;
  int rounds = kMaxRounds;
  if (lambda < 1.0 - 1e-12) {
    rounds =
        lambda <= 0.0 ? 1 : static_cast<int>(std::ceil(std::log(kTolerance) / std::log(lambda)));
    rounds = std::clamp(rounds, 1, kMaxRounds);
  } else {
    log::warn("finalize averaging: the graph is disconnected; the models cannot all be averaged");
  }
  std::vector<CollectiveKind> kinds(static_cast<std::size_t>(rounds), CollectiveKind::kAverage);
  kinds.insert(kinds.end(), static_cast<std::size_t>(g.n - 1), CollectiveKind::kAdoptLowest);
  return kinds;
}

std::vector<CollectiveKind> adoptLowestCollectives(const RunPlan& plan) {
  const topology::Graph g = topology::unionGraph(*plan.schedule);
  const int d = topology::diameter(g);
  return std::vector<CollectiveKind>(static_cast<std::size_t>(d < 0 ? g.n - 1 : d),
                                     CollectiveKind::kAdoptLowest);
}

// ---- One peer's state ----

void Collectives::begin(CollectiveKind kind, std::span<const float> model,
                        std::span<const double> initial, const std::vector<int>& neighbours,
                        const std::function<bool(int)>& live, std::uint32_t liveDegree,
                        std::vector<int>& sendTo, std::vector<int>& expected) {
  const bool first = !active_;
  const bool ring = isRingKind(kind);
  if (first) {
    treeUsed_ = treeReceived_ = false;
    treeCount_ = 1;
    onModel_ = initial.empty();
    if (onModel_) {
      state_.assign(model.begin(), model.end());
    } else {
      assert(initial.size() <= kMaxSmallCollective);
      state_.assign(initial.begin(), initial.end());
    }
    const int wanted = ring ? tree_.ringSize : tree_.chunks;
    chunks_ = static_cast<int>(std::clamp<std::size_t>(
        static_cast<std::size_t>(std::max(1, wanted)), 1, std::max<std::size_t>(1, state_.size())));
    // averagingCollectives() runs the ring kinds on models of more values than peers.
    assert(!ring || chunks_ == tree_.ringSize);
    chunkCount_.assign(static_cast<std::size_t>(chunks_), 1);
    chunkHave_.assign(static_cast<std::size_t>(chunks_), 0);
    origin_ = rank_;
    active_ = true;
  }
  ++index_;
  step_ = !first && kind_ == kind ? step_ + 1 : 1;
  kind_ = kind;
  degree_ = liveDegree;
  sendTo.clear();
  expected.clear();
  if (isTreeKind(kind)) {
    treeUsed_ = true;
    planTree(live, sendTo, expected);
  } else if (ring) {
    treeUsed_ = true;
    planRing(live, sendTo, expected);
  } else {
    for (int j : neighbours) {
      if (live(j)) sendTo.push_back(j);
    }
    expected = sendTo;
  }
}

void Collectives::planTree(const std::function<bool(int)>& live, std::vector<int>& sendTo,
                           std::vector<int>& expected) {
  // Pipelined over chunks_ chunks (see CollectiveTree::chunks): in kTreeSum step s a peer at depth
  // d sends chunk s - (h - d) - 1 to its parent (complete: its children's arrived in step s - 1)
  // and takes chunk s - h + d from its children; in kTreeBroadcast step s it sends chunk s - d - 1
  // to its children and takes chunk s - d from its parent.
  const int h = tree_.height, d = tree_.depth, k = chunks_, s = step_;
  const bool parentLive = tree_.parent >= 0 && live(tree_.parent);
  sendChunk_ = recvChunk_ = -1;
  const auto inRange = [k](int c) { return c >= 0 && c < k; };
  const auto liveChildren = [&] {
    std::vector<int> out;
    for (int j : tree_.children) {
      if (live(j)) out.push_back(j);
    }
    return out;
  };
  if (kind_ == CollectiveKind::kTreeSum) {
    if (parentLive && inRange(s - (h - d) - 1)) {
      sendTo.push_back(tree_.parent);
      sendChunk_ = s - (h - d) - 1;
    }
    if (inRange(s - h + d)) {
      expected = liveChildren();
      recvChunk_ = s - h + d;
    }
  } else {
    if (inRange(s - d - 1) && chunkHave_[static_cast<std::size_t>(s - d - 1)]) {
      sendTo = liveChildren();
      sendChunk_ = s - d - 1;
    }
    if (parentLive && inRange(s - d)) {
      expected.push_back(tree_.parent);
      recvChunk_ = s - d;
    }
  }
}

void Collectives::planRing(const std::function<bool(int)>& live, std::vector<int>& sendTo,
                           std::vector<int>& expected) {
  sendChunk_ = recvChunk_ = -1;
  const int prev = tree_.ringPrev, next = tree_.ringNext;
  const auto isLive = [&](int j) { return j >= 0 && live(j); };
  if (kind_ == CollectiveKind::kRingAck) {
    if (isLive(prev)) sendTo.push_back(prev);
    if (isLive(next)) expected.push_back(next);
    return;
  }
  // See CollectiveKind::kRingSum: step s of the reduce-scatter sends chunk p - s + 1 and takes
  // chunk p - s; step s of the all-gather sends chunk p - s + 2 and takes chunk p - s + 1.
  const int sum = kind_ == CollectiveKind::kRingSum ? 1 : 0;
  sendChunk_ = ringChunk(rank_ - step_ + 2 - sum);
  recvChunk_ = ringChunk(rank_ - step_ + 1 - sum);
  if (isLive(next)) sendTo.push_back(next);
  if (isLive(prev)) expected.push_back(prev);
}

std::pair<std::size_t, std::size_t> Collectives::messageRange(int c) const {
  std::size_t lo = 0, hi = state_.size();
  if (chunked() && c >= 0) std::tie(lo, hi) = chunkRange(c);
  if (kind_ == CollectiveKind::kRingAck) hi = std::min<std::size_t>(hi, 1);
  return {lo, hi};
}

std::size_t Collectives::payloadBytes() const {
  const auto [lo, hi] = messageRange(sendChunk_);
  return kCollectiveHeaderBytes + (hi - lo) * elementBytes();
}

void Collectives::writePayload(std::uint8_t* p) const {
  const auto [lo, hi] = messageRange(sendChunk_);
  // Tree and ring kinds: the peers summed into the chunk (a ring gather: 0 for a chunk this peer
  // does not hold, after a loss).
  auto header = static_cast<std::uint32_t>(origin_);
  if (chunked()) {
    const bool held = kind_ != CollectiveKind::kRingGather ||
                      (sendChunk_ >= 0 && chunkHave_[static_cast<std::size_t>(sendChunk_)]);
    header = sendChunk_ >= 0 && held ? chunkCount_[static_cast<std::size_t>(sendChunk_)] : 0;
  } else if (isRingKind(kind_)) {
    header = 0;
  }
  storeLe(p, header);
  if (elementBytes() == sizeof(double)) {
    std::memcpy(p + kCollectiveHeaderBytes, state_.data() + lo, (hi - lo) * sizeof(double));
  } else {
    // The model's own precision: the receivers end with the root's float bits either way.
    for (std::size_t i = lo; i < hi; ++i) {
      const float v = static_cast<float>(state_[i]);
      std::memcpy(p + kCollectiveHeaderBytes + (i - lo) * sizeof(float), &v, sizeof v);
    }
  }
}

void Collectives::beginCombine() {
  if (kind_ == CollectiveKind::kAverage) {
    next_ = state_;
  } else {
    next_.clear();
  }
}

bool Collectives::combine(std::span<const std::uint8_t> payload, std::uint32_t theirDegree) {
  const std::size_t n = state_.size();
  const auto [lo, hi] = messageRange(recvChunk_);
  const std::size_t elem = elementBytes();
  if (payload.size() != kCollectiveHeaderBytes + (hi - lo) * elem || (chunked() && recvChunk_ < 0))
    return false;  // another collective's size: a peer out of step
  const int origin = static_cast<int>(loadLe<std::uint32_t>(payload.data()));
  const std::uint8_t* values = payload.data() + kCollectiveHeaderBytes;
  const auto value = [values, elem](std::size_t i) -> double {
    if (elem == sizeof(float)) {
      float f;
      std::memcpy(&f, values + i * sizeof(float), sizeof f);
      return f;
    }
    double v;
    std::memcpy(&v, values + i * sizeof(double), sizeof v);
    return v;
  };
  switch (kind_) {
    case CollectiveKind::kRingAck:
      break;  // nothing to combine: the next peer holds all this peer sent it
    case CollectiveKind::kTreeSum:
    case CollectiveKind::kRingSum:
      // The header holds the peer count.
      for (std::size_t k = lo; k < hi; ++k) state_[k] += value(k - lo);
      chunkCount_[static_cast<std::size_t>(recvChunk_)] += static_cast<std::uint32_t>(origin);
      break;
    case CollectiveKind::kTreeBroadcast:
    case CollectiveKind::kRingGather: {
      // The average's chunk and its peer count (0 from a ring peer that lacks it, after a loss).
      const auto count = static_cast<std::uint32_t>(origin);
      if (count == 0) break;
      for (std::size_t k = lo; k < hi; ++k) {
        if (elem == sizeof(double)) {
          state_[k] = value(k - lo);
        } else {
          float v;
          std::memcpy(&v, values + (k - lo) * sizeof(float), sizeof v);
          state_[k] = v;
        }
      }
      chunkCount_[static_cast<std::size_t>(recvChunk_)] = count;
      chunkHave_[static_cast<std::size_t>(recvChunk_)] = 1;
      if (std::all_of(chunkHave_.begin(), chunkHave_.end(), [](char c) { return c != 0; }))
        holdAverage();
      break;
    }
    case CollectiveKind::kMinimum:
      for (std::size_t k = 0; k < n; ++k) state_[k] = std::min(state_[k], value(k));
      break;
    case CollectiveKind::kAverage: {
      const double w = 1.0 / (1.0 + std::max<double>(degree_, theirDegree));
      for (std::size_t k = 0; k < n; ++k) next_[k] += w * (value(k) - state_[k]);
      break;
    }
    case CollectiveKind::kAdoptLowest:
      if (origin < origin_) {
        origin_ = origin;
        std::memcpy(state_.data(), values, n * sizeof(double));
      }
      break;
  }
  return true;
}

void Collectives::endCombine() {
  if (kind_ == CollectiveKind::kAverage) state_ = std::move(next_);
  if (kind_ == CollectiveKind::kRingSum && step_ == chunks_ - 1) {
    // The reduce-scatter's last step completed chunk p + 1 here: sum -> average.
    const int c = ringChunk(rank_ + 1);
    const auto [lo, hi] = chunkRange(c);
    const double count = chunkCount_[static_cast<std::size_t>(c)];
    for (std::size_t k = lo; k < hi; ++k) state_[k] /= count;
    chunkHave_[static_cast<std::size_t>(c)] = 1;
  }
  if (kind_ == CollectiveKind::kTreeSum && tree_.parent < 0 &&
      step_ == tree_.height + chunks_ - 1) {
    // The root: sum -> average, each chunk over the peers whose values it holds.
    for (int c = 0; c < chunks_; ++c) {
      const auto [lo, hi] = chunkRange(c);
      const double count = chunkCount_[static_cast<std::size_t>(c)];
      for (std::size_t k = lo; k < hi; ++k) state_[k] /= count;
      chunkHave_[static_cast<std::size_t>(c)] = 1;
    }
    holdAverage();
  }
}

void Collectives::holdAverage() {
  treeReceived_ = true;
  treeCount_ = *std::min_element(chunkCount_.begin(), chunkCount_.end());
}

void Collectives::finish(std::span<float> model) {
  if (!active_) return;
  // After tree collectives, a peer cut off from the root holds a partial sum: it keeps its model.
  if (onModel_ && (!treeUsed_ || treeReceived_)) {
    for (std::size_t k = 0; k < model.size(); ++k) model[k] = static_cast<float>(state_[k]);
  }
  // A model's state (8 bytes per value) is not kept between collectives: it would double a big
  // model's memory for the rest of the run. Small states stay readable (state()).
  if (onModel_ && !roundUse_) {
    std::vector<double>().swap(state_);
    std::vector<double>().swap(next_);
  }
  active_ = false;
}

}  // namespace grapevine::engine
