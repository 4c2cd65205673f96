// Outer optimizer (outer.*): DiLoCo's outer step on a gossip-averaged pseudo-gradient, each peer
// with its own outer momentum (docs/algorithms.md, "Outer optimizer").
//
// One round of a peer with an outer optimizer, a = the round's anchor (the model it started from):
//   x_half = a after the round's H local steps (algorithm.local_steps; through the API: the
//            caller's own steps before mix())
//   x_mix  = the algorithm's mixing of x_half with the neighbours' (dsgd, CHOCO, ...)
//   d      = a - x_mix                   the pseudo-gradient, gossip-averaged: sum_j w_ij (a_j -
//                                        x_half_j) plus the anchors' disagreement a_i - sum_j w_ij
//                                        a_j, which is 0 at consensus
//   sgd:      m <- mu m + d;  x <- a - eta m
//   nesterov: m <- mu m + d;  x <- a - eta (d + mu m)      (torch.optim.SGD(nesterov=True))
// and x is the next round's anchor. m starts at 0. The disagreement part passes through the
// momentum too: heavy-ball / Nesterov on the gossip matrix, which speeds consensus up (stable for
// eta (1 - lambda_min(W)) < 2 (1 + mu) / (1 + 2 mu), Nesterov; Metropolis weights keep
// lambda_min(W) > -1/3 on a ring). eta 1 with mu 0 is the identity (x = x_mix, untouched: the run
// is bit for bit the one without an outer optimizer); the fixed points are those without one
// (d = 0 there), only the path to them changes.
//
// Values in `skip` (the API's buffers: mixed, never stepped) keep x_mix. Arithmetic in float,
// element by element in index order (deterministic). Thread contract: one per peer, its training
// thread.
#pragma once

#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "runtime/common/status.h"
#include "runtime/train/tensor_info.h"

namespace grapevine::train {

enum class OuterKind { kNone, kSgd, kNesterov };  // "none" | "sgd" | "nesterov"

std::string_view outerKindName(OuterKind kind);
std::optional<OuterKind> parseOuterKind(std::string_view name);
const std::vector<std::string_view>& outerKindNames();

struct OuterOptions {
  OuterKind kind = OuterKind::kNone;  // outer.optimizer
  double lr = 0.7;                    // outer.lr, eta
  double momentum = 0.9;              // outer.momentum, mu

  // Whether a round's outer step changes anything (false for kNone and for eta 1 with mu 0).
  bool active() const { return kind != OuterKind::kNone && !(lr == 1.0 && momentum == 0.0); }
};

class OuterOptimizer {
 public:
  // `size` = the model's parameter count; the momentum buffer exists only with mu > 0.
  OuterOptimizer(const OuterOptions& options, std::size_t size);

  const OuterOptions& options() const { return options_; }

  // x (the mixed model, x_mix) <- the outer step from `anchor`; values in `skip` (ascending,
  // disjoint ranges) keep x_mix.
  void step(std::span<const float> anchor, std::span<float> x, std::span<const ValueRange> skip);

  // The momentum buffer m (empty with mu 0), for checkpoints and the API's state.
  std::span<const float> momentum() const { return m_; }
  Status setMomentum(std::span<const float> values);

 private:
  void stepOn(std::span<const float> anchor, std::span<float> x, std::size_t begin,
              std::size_t end);

  OuterOptions options_;
  std::vector<float> m_;
};

}  // namespace grapevine::train
