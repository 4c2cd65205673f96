// Local optimizer of one peer: weight decay, (quasi-global) momentum, Nesterov, and the
// learning-rate schedule. The algorithm (D-PSGD, CHOCO, ...) takes the step: x_half = x - lr(round)
// * u with the direction u from direction(), then mixes; quasi-global momentum then needs
// afterMixing().
//
// Exact formulas (g = stochastic gradient, x = current model, beta = momentum, wd = weight decay):
//   g' = g + wd * x                                   (coupled L2, as in PyTorch SGD)
//   local:        m <- beta * m + g'                  (m starts at 0, updated in direction())
//                 u = m                   (heavy ball)    u = g' + beta * m   (nesterov, new m)
//   quasi-global: u = g' + beta * mhat    (heavy ball)    u = g' + beta * (beta * mhat + g')
//                 (nesterov; Lin et al. 2021, QG-DSGDm-N), mhat untouched by direction();
//                 afterMixing(x_before_steps, x_after_mixing, lr, H), once per round, after the
//                 round's H = algorithm.local_steps local steps (each with the round's lr) and
//                 the mixing:
//                   d = (x_before_steps - x_after_mixing) / (lr * H)
//                   mhat <- beta * mhat + (1 - beta) * d
//                 d is the round's model change per local step and per unit of lr. (Dividing by
//                 lr alone makes d about H step directions, and the buffer's gain
//                 beta * (1 + (1 - beta) * H) exceeds 1: it diverges, e.g. beta 0.9 with H = 2.)
//                 lr * H == 0 leaves mhat unchanged: d is undefined. mhat starts at 0.
// With beta == 0 both kinds reduce to u = g'.
//
// AdamW (kind adamw; Loshchilov & Hutter 2019, as torch.optim.AdamW), with beta1 = momentum and
// t = the step's number from 1 (the round times algorithm.local_steps, plus the local step):
//   m <- beta1 m + (1 - beta1) g        v <- beta2 v + (1 - beta2) g^2        (both start at 0)
//   u = (m / (1 - beta1^t)) / (sqrt(v / (1 - beta2^t)) + eps) + wd * x      (decoupled decay)
// so x - lr u is torch's x - lr wd x - lr m_hat / (sqrt(v_hat) + eps). The moments are each
// peer's own (local, like local momentum: the gossip mixes the parameters only); quasi-global
// and Nesterov forms are not defined for it. The buffer holds m then v (2 x size).
//
// Thread contract: one Optimizer per peer, used from its training thread; no allocation after
// construction. Arithmetic is in float, element by element (deterministic): the kernels table's
// sgdDirection, adamwDirection and momentumFromChange (kernels/ops.h), the same bits on every
// table.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "runtime/common/status.h"
#include "runtime/train/tensor_info.h"

namespace grapevine::train {

enum class OptimizerKind { kSgd, kAdamw };                // "sgd" | "adamw"
enum class MomentumKind { kLocal, kQuasiGlobal };         // "local" | "quasi-global"
enum class LrScheduleKind { kConstant, kCosine, kStep };  // "constant" | "cosine" | "step"

// Names as configs spell them (optimizer.momentum_kind, optimizer.schedule). The *Names() lists,
// in enum order, are the one table; the config schema takes its allowed values from them.
std::string_view optimizerKindName(OptimizerKind kind);
std::optional<OptimizerKind> parseOptimizerKind(std::string_view name);
const std::vector<std::string_view>& optimizerKindNames();
std::string_view momentumKindName(MomentumKind kind);
std::optional<MomentumKind> parseMomentumKind(std::string_view name);
const std::vector<std::string_view>& momentumKindNames();
std::string_view lrScheduleKindName(LrScheduleKind kind);
std::optional<LrScheduleKind> parseLrScheduleKind(std::string_view name);
const std::vector<std::string_view>& lrScheduleKindNames();

// lr(round), rounds counted from 0:
//   warmup (round < warmupRounds):  lr * (round + 1) / warmupRounds      (linear, never 0)
//   constant:  lr
//   cosine:    minLr + (lr - minLr) * (1 + cos(pi * t / T)) / 2 with t = round - warmupRounds,
//              T = totalRounds - warmupRounds; minLr once t >= T
//   step:      lr * gamma^(number of milestones <= round)  (milestones are absolute rounds)
// The defaults of LrSchedule and OptimizerOptions are the config's (optimizer.*, run.rounds), so a
// test built from OptimizerOptions{} trains as a real run does;
// tests/config/library_defaults_test.cc fails when they differ.
struct LrSchedule {
  LrScheduleKind kind = LrScheduleKind::kCosine;  // optimizer.schedule
  double lr = 0.1;                                // optimizer.lr
  std::int64_t warmupRounds = 0;                  // optimizer.warmup_rounds
  std::int64_t totalRounds = 1000;       // cosine: the run's length (engine fills it from rounds)
  double minLr = 0.0;                    // optimizer.min_lr (cosine floor)
  std::vector<std::int64_t> milestones;  // optimizer.milestones (step), ascending
  double gamma = 0.1;                    // optimizer.gamma (step factor)

  Status validate() const;
  // Pure function of round; round < 0 is treated as 0.
  double at(std::int64_t round) const;
};

struct OptimizerOptions {
  OptimizerKind kind = OptimizerKind::kSgd;  // optimizer.kind
  LrSchedule schedule;
  double momentum = 0.9;     // optimizer.momentum, beta (adamw: beta1)
  double beta2 = 0.999;      // optimizer.beta2 (adamw)
  double eps = 1e-8;         // optimizer.eps (adamw)
  bool nesterov = true;      // optimizer.nesterov (sgd with momentum > 0; set false for the others)
  double weightDecay = 0.0;  // optimizer.weight_decay, >= 0
  MomentumKind momentumKind = MomentumKind::kLocal;  // optimizer.momentum_kind

  Status validate() const;
};

class Optimizer {
 public:
  // `size` = the model's parameter count. options must be valid (asserted; call validate()).
  Optimizer(const OptimizerOptions& options, std::size_t size);

  const OptimizerOptions& options() const { return options_; }
  double lr(std::int64_t round) const { return options_.schedule.at(round); }

  // Writes the update direction u for gradient g at model x (all of size `size`; u may alias g).
  // Local momentum and AdamW's moments update here; `step` counts the local steps from 0 (the
  // round times algorithm.local_steps, plus the local step): AdamW's bias correction.
  // `skip` (ascending, disjoint ranges of offsets): u is 0 there and the momentum buffer is left
  // as it was (a parameter without a gradient, as torch treats one).
  void direction(std::span<const float> g, std::span<const float> x, std::span<float> u,
                 std::int64_t step, std::span<const ValueRange> skip = {});

  // Quasi-global momentum only (a no-op for local): after the algorithm's mixing, with the model
  // before this round's local steps, the model after mixing, the lr those steps used and their
  // number (algorithm.local_steps, >= 1).
  void afterMixing(std::span<const float> xBeforeSteps, std::span<const float> xAfterMixing,
                   double lr, int localSteps);

  // The momentum buffer (m for local, mhat for quasi-global, m then v for adamw); empty when
  // momentum == 0 (sgd).
  std::span<const float> momentumBuffer() const { return buffer_; }
  // Replaces the buffer (resync / restore); size must match.
  Status setMomentumBuffer(std::span<const float> values);

 private:
  // direction() on [begin, end).
  void directionOn(std::span<const float> g, std::span<const float> x, std::span<float> u,
                   std::size_t begin, std::size_t end);
  void adamwOn(std::span<const float> g, std::span<const float> x, std::span<float> u,
               std::size_t begin, std::size_t end);
  float biasCorrection1_ = 1.0f, biasCorrection2_ = 1.0f;  // of the current step (adamw)

  OptimizerOptions options_;
  std::vector<float> buffer_;
};

}  // namespace grapevine::train
