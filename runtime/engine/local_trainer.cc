#include "runtime/engine/local_trainer.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <string_view>
#include <utility>

namespace grapevine::engine {

LocalTrainer::LocalTrainer(std::unique_ptr<train::Workload> workload,
                           std::unique_ptr<train::Optimizer> optimizer,
                           const train::OuterOptions& outer, int localSteps,
                           std::span<const float> x0)
    : workload_(std::move(workload)),
      optimizer_(std::move(optimizer)),
      localSteps_(localSteps),
      g_(x0.size()),
      xBefore_(x0.size()) {
  if (outer.active()) {
    outer_ = std::make_unique<train::OuterOptimizer>(outer, x0.size());
    std::copy(x0.begin(), x0.end(), xBefore_.begin());
  }
}

// Local optimizer step(s): x <- x - lr * u, from the precomputed gradient first (overlap).
bool LocalTrainer::takeSteps(std::int64_t round, const RoundInput& input, std::span<float> x,
                             algorithms::Algorithm& algorithm) {
  stepped_ = input.localSteps;
  // The caller's own steps (mix()) moved the model from the anchor, which the outer step needs.
  if (stepped_ || !outer_) std::copy(x.begin(), x.end(), xBefore_.begin());
  lastLr_ = std::isnan(input.lr) ? optimizer_->lr(round) : input.lr;
  // The neighbours are ahead (algorithm.staleness): the model goes out as it is. Never before
  // this peer's first computed round: until then there is no loss to report, and a 0 would enter
  // the divergence check's history as its lowest (a false "grew 1000x" seen under CI load).
  if (stepped_ && input.skipCompute && stepTaken_) return false;  // lastLoss_ stays
  stepTaken_ = stepTaken_ || stepped_;
  double loss = 0;
  for (int s = 0; stepped_ && s < localSteps_; ++s) {
    if (s == 0 && gradientReady_) {
      loss += lastLoss_;  // computed during the previous round's communication (overlap)
    } else {
      loss += workload_->gradient(x, g_);
    }
    // The direction u replaces the gradient in place (every optimizer reads g[i] before it writes
    // u[i]): one model-sized buffer less.
    // (A value without a gradient is skipped, except under gradient tracking, whose tracker
    // needs every coordinate's gradient: there it is a zero gradient.)
    optimizer_->direction(g_, x, g_, round * localSteps_ + s,
                          algorithm.tracksDirection() ? std::span<const train::ValueRange>{}
                                                      : workload_->skippedRanges());
    // Gradient tracking chooses the direction (its tracker); every other algorithm takes u as is.
    if (algorithm.tracksDirection()) algorithm.direction(x, g_, static_cast<std::uint64_t>(round));
    const float lr = static_cast<float>(lastLr_);
    for (std::size_t k = 0; k < x.size(); ++k) x[k] -= lr * g_[k];
  }
  gradientReady_ = false;
  lastLoss_ = stepped_ ? loss / localSteps_ : input.loss;
  return true;
}

void LocalTrainer::precomputeGradient(std::span<const float> x) {
  if (gradientReady_) return;
  lastLoss_ = workload_->gradient(x, g_);
  gradientReady_ = true;
}

void LocalTrainer::afterMixing(std::span<const float> x) {
  // A caller's own optimizer step has no quasi-global momentum of ours to feed.
  if (stepped_) optimizer_->afterMixing(xBefore_, x, lastLr_, localSteps_);
}

void LocalTrainer::outerStep(std::span<float> x) {
  if (outer_) outer_->step(xBefore_, x, workload_->bufferRanges());
}

void LocalTrainer::keepAnchor(std::span<const float> x) {
  if (outer_) std::copy(x.begin(), x.end(), xBefore_.begin());
}

Status LocalTrainer::setAnchor(std::span<const float> values) {
  GV_RETURN_IF_ERROR(checkValueCount("outer anchor", values.size(), xBefore_.size()));
  std::copy(values.begin(), values.end(), xBefore_.begin());
  return Status::ok();
}

void LocalTrainer::undoRound(std::span<float> x) {
  std::copy(xBefore_.begin(), xBefore_.end(), x.begin());
  gradientReady_ = false;
}

void LocalTrainer::modelReplaced() {
  const std::vector<float> zero(optimizer_->momentumBuffer().size(), 0.0f);
  (void)optimizer_->setMomentumBuffer(zero);
  gradientReady_ = false;  // a gradient computed early was of the old model
}

void LocalTrainer::saveState(PeerState& s) const {
  s.workloadStep = workload_->step();
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
  s.lastLoss = lastLoss_;
  s.lastLr = lastLr_;
}

Status LocalTrainer::checkState(const PeerState& s) const {
  GV_RETURN_IF_ERROR(checkValueCount("model", s.model.size(), xBefore_.size()));
  GV_RETURN_IF_ERROR(checkValueCount("optimizer momentum", s.momentum.size(),
                                     optimizer_->momentumBuffer().size()));
  if (s.gradientReady) {
    GV_RETURN_IF_ERROR(checkValueCount("overlap gradient", s.gradient.size(), g_.size()));
  }
  return checkValueCount("outer momentum", s.outerMomentum.size(),
                         outer_ ? outer_->momentum().size() : 0);
}

Status LocalTrainer::loadState(const PeerState& s) {
  if (!s.momentum.empty()) GV_RETURN_IF_ERROR(optimizer_->setMomentumBuffer(s.momentum));
  if (!s.outerMomentum.empty()) GV_RETURN_IF_ERROR(outer_->setMomentum(s.outerMomentum));
  workload_->setStep(s.workloadStep);
  // A checkpoint is taken between rounds: the anchor is the model.
  keepAnchor(s.model);
  gradientReady_ = s.gradientReady;
  if (gradientReady_) g_ = s.gradient;
  lastLoss_ = s.lastLoss;
  lastLr_ = s.lastLr;
  return Status::ok();
}

}  // namespace grapevine::engine
