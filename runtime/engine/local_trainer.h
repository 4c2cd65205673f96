// One peer's local training, apart from the exchange: the workload's gradients, the optimizer's
// steps (x <- x - lr * u), the gradient computed early during communication (algorithm.overlap),
// and the outer optimizer's anchor and step (outer.*). PeerCore owns the model x and hands it in.
// Thread contract: the owner's (PeerCore's) thread.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "runtime/algorithms/algorithm.h"
#include "runtime/common/status.h"
#include "runtime/engine/peer_state.h"
#include "runtime/train/optimizer.h"
#include "runtime/train/outer.h"
#include "runtime/train/workload.h"

namespace grapevine::engine {

class LocalTrainer {
 public:
  // x0: the starting model (the first anchor with an outer optimizer).
  LocalTrainer(std::unique_ptr<train::Workload> workload,
               std::unique_ptr<train::Optimizer> optimizer, const train::OuterOptions& outer,
               int localSteps, std::span<const float> x0);

  // The round's local steps on x (input.localSteps false: the caller stepped; x is its x_half and
  // input.loss its loss). The model before them is kept (anchor() without an outer optimizer).
  // False when the round took no steps because the neighbours are ahead (input.skipCompute, never
  // before this peer's first computed round).
  bool takeSteps(std::int64_t round, const RoundInput& input, std::span<float> x,
                 algorithms::Algorithm& algorithm);
  // algorithm.overlap: the next round's gradient at x (the model before mixing), once.
  void precomputeGradient(std::span<const float> x);
  // After the round's mix: the optimizer's quasi-global momentum (when this round stepped).
  void afterMixing(std::span<const float> x);
  // The outer step from the anchor over the mixed (or averaged) x; no-op without an outer
  // optimizer.
  void outerStep(std::span<float> x);
  // With an outer optimizer: x becomes the next anchor (a round that did not diverge, a model set
  // outside the rounds).
  void keepAnchor(std::span<const float> x);
  Status setAnchor(std::span<const float> values);
  // An abandoned round: x goes back to the model before its steps; an early gradient is dropped.
  void undoRound(std::span<float> x);
  // The model was replaced (a neighbour's public copy adopted): no momentum, no early gradient.
  void modelReplaced();

  // Checkpoints: what of `s` is the trainer's (workload position, momentum, outer momentum, early
  // gradient, last loss and lr). checkState() first: loadState() then only fails on what it
  // checked.
  void saveState(PeerState& s) const;
  Status checkState(const PeerState& s) const;
  Status loadState(const PeerState& s);

  train::Workload& workload() { return *workload_; }
  const train::Workload& workload() const { return *workload_; }
  train::Optimizer& optimizer() { return *optimizer_; }
  train::OuterOptimizer* outer() { return outer_.get(); }
  // The model before the round's local steps; with an outer optimizer the anchor, which the
  // caller's own steps (the API's mix()) leave alone.
  std::span<const float> anchor() const { return xBefore_; }
  double lastLoss() const { return lastLoss_; }
  double lastLr() const { return lastLr_; }

 private:
  std::unique_ptr<train::Workload> workload_;
  std::unique_ptr<train::Optimizer> optimizer_;
  std::unique_ptr<train::OuterOptimizer> outer_;  // outer.optimizer (nullptr: none, or identity)
  int localSteps_;
  // g_: the gradient, then the step's direction (u).
  std::vector<float> g_, xBefore_;
  bool gradientReady_ = false;
  bool stepTaken_ = false;  // a round took its local steps (algorithm.staleness)
  bool stepped_ = true;     // this round took local steps (else the caller stepped: no afterMixing)
  double lastLoss_ = 0.0;
  double lastLr_ = 0.0;
};

}  // namespace grapevine::engine
