#include "runtime/train/optimizer.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <iterator>
#include <numbers>
#include <sstream>
#include <string>

#include "kernels/ops.h"
#include "runtime/common/enum_names.h"

namespace grapevine::train {

namespace {

// Name tables, in enum order (the enums count from 0).
constexpr std::string_view kOptimizerKindNames[] = {"sgd", "adamw"};
constexpr std::string_view kMomentumKindNames[] = {"local", "quasi-global"};
constexpr std::string_view kLrScheduleKindNames[] = {"constant", "cosine", "step"};

}  // namespace

std::string_view optimizerKindName(OptimizerKind kind) {
  return enumName(kOptimizerKindNames, kind);
}

std::optional<OptimizerKind> parseOptimizerKind(std::string_view name) {
  return parseEnum<OptimizerKind>(kOptimizerKindNames, name);
}

const std::vector<std::string_view>& optimizerKindNames() {
  static const std::vector<std::string_view> names = enumNameList(kOptimizerKindNames);
  return names;
}

std::string_view momentumKindName(MomentumKind kind) { return enumName(kMomentumKindNames, kind); }

std::optional<MomentumKind> parseMomentumKind(std::string_view name) {
  return parseEnum<MomentumKind>(kMomentumKindNames, name);
}

const std::vector<std::string_view>& momentumKindNames() {
  static const std::vector<std::string_view> names = enumNameList(kMomentumKindNames);
  return names;
}

std::string_view lrScheduleKindName(LrScheduleKind kind) {
  return enumName(kLrScheduleKindNames, kind);
}

std::optional<LrScheduleKind> parseLrScheduleKind(std::string_view name) {
  return parseEnum<LrScheduleKind>(kLrScheduleKindNames, name);
}

const std::vector<std::string_view>& lrScheduleKindNames() {
  static const std::vector<std::string_view> names = enumNameList(kLrScheduleKindNames);
  return names;
}

namespace {
template <typename... Parts>
Status bad(const Parts&... parts) {
  std::ostringstream os;
  (os << ... << parts);
  return invalidArgument(os.str());
}
}  // namespace

Status LrSchedule::validate() const {
  // lr 0 is allowed: pure gossip (mass conservation, the consensus workload).
  if (!(lr >= 0.0) || !std::isfinite(lr))
    return bad("optimizer.lr must be a finite number >= 0, got ", lr);
  if (warmupRounds < 0) return bad("optimizer.warmup_rounds must be >= 0, got ", warmupRounds);
  switch (kind) {
    case LrScheduleKind::kConstant:
      break;
    case LrScheduleKind::kCosine:
      if (!(minLr >= 0.0) || !(minLr <= lr)) {
        return bad("optimizer.min_lr must be in [0, optimizer.lr], got ", minLr);
      }
      if (totalRounds <= warmupRounds) {
        return bad("the cosine schedule needs total rounds (", totalRounds,
                   ") > optimizer.warmup_rounds (", warmupRounds, ")");
      }
      break;
    case LrScheduleKind::kStep:
      if (!(gamma > 0.0) || !(gamma <= 1.0))
        return bad("optimizer.gamma must be in (0, 1], got ", gamma);
      if (milestones.empty()) return bad("the step schedule needs optimizer.milestones (rounds)");
      for (std::size_t i = 0; i < milestones.size(); ++i) {
        if (milestones[i] < 0) return bad("optimizer.milestones[", i, "] must be >= 0");
        if (i > 0 && milestones[i] <= milestones[i - 1]) {
          return bad("optimizer.milestones must be strictly ascending (", milestones[i - 1],
                     " then ", milestones[i], ")");
        }
      }
      break;
    default:
      return bad("optimizer.schedule must be constant, cosine or step");
  }
  return Status::ok();
}

double LrSchedule::at(std::int64_t round) const {
  round = std::max<std::int64_t>(round, 0);
  if (round < warmupRounds) {
    return lr * static_cast<double>(round + 1) / static_cast<double>(warmupRounds);
  }
  switch (kind) {
    case LrScheduleKind::kConstant:
      return lr;
    case LrScheduleKind::kCosine: {
      const double t = static_cast<double>(round - warmupRounds);
      const double span = static_cast<double>(totalRounds - warmupRounds);
      if (span <= 0.0 || t >= span) return minLr;
      return minLr + (lr - minLr) * 0.5 * (1.0 + std::cos(std::numbers::pi * t / span));
    }
    case LrScheduleKind::kStep: {
      const auto passed =
          std::upper_bound(milestones.begin(), milestones.end(), round) - milestones.begin();
      return lr * std::pow(gamma, static_cast<double>(passed));
    }
  }
  return lr;
}

Status OptimizerOptions::validate() const {
  GV_RETURN_IF_ERROR(schedule.validate());
  if (!(momentum >= 0.0 && momentum < 1.0)) {
    return bad("optimizer.momentum must be in [0, 1), got ", momentum);
  }
  if (!(weightDecay >= 0.0) || !std::isfinite(weightDecay)) {
    return bad("optimizer.weight_decay must be a finite number >= 0, got ", weightDecay);
  }
  if (nesterov && momentum == 0.0) return bad("optimizer.nesterov needs optimizer.momentum > 0");
  if (momentumKind != MomentumKind::kLocal && momentumKind != MomentumKind::kQuasiGlobal) {
    return bad("optimizer.momentum_kind must be local or quasi-global");
  }
  if (kind == OptimizerKind::kAdamw) {
    if (momentumKind != MomentumKind::kLocal) {
      return bad(
          "optimizer.kind adamw keeps its moments local: optimizer.momentum_kind must be "
          "local");
    }
    if (nesterov) return bad("optimizer.kind adamw has no Nesterov form: drop optimizer.nesterov");
    if (!(beta2 >= 0.0 && beta2 < 1.0)) {
      return bad("optimizer.beta2 must be in [0, 1), got ", beta2);
    }
    if (!(eps > 0.0) || !std::isfinite(eps)) {
      return bad("optimizer.eps must be a finite number > 0, got ", eps);
    }
  } else if (kind != OptimizerKind::kSgd) {
    return bad("optimizer.kind must be sgd or adamw");
  }
  return Status::ok();
}

Optimizer::Optimizer(const OptimizerOptions& options, std::size_t size) : options_(options) {
  assert(options.validate().isOk());
  if (options_.kind == OptimizerKind::kAdamw) {
    buffer_.assign(2 * size, 0.0f);  // m, then v
  } else if (options_.momentum > 0.0) {
    buffer_.assign(size, 0.0f);
  }
}

void Optimizer::direction(std::span<const float> g, std::span<const float> x, std::span<float> u,
                          std::int64_t step, std::span<const ValueRange> skip) {
  assert(g.size() == u.size() && x.size() == u.size());
  if (options_.kind == OptimizerKind::kAdamw) {
    const double t = static_cast<double>(std::max<std::int64_t>(step, 0) + 1);
    biasCorrection1_ = static_cast<float>(1.0 - std::pow(options_.momentum, t));
    biasCorrection2_ = static_cast<float>(1.0 - std::pow(options_.beta2, t));
  }
  std::size_t at = 0;
  for (const ValueRange& r : skip) {
    assert(r.offset >= at && r.offset + r.count <= u.size());
    directionOn(g, x, u, at, r.offset);
    std::fill(u.begin() + static_cast<std::ptrdiff_t>(r.offset),
              u.begin() + static_cast<std::ptrdiff_t>(r.offset + r.count), 0.0f);
    at = r.offset + r.count;
  }
  directionOn(g, x, u, at, u.size());
}

void Optimizer::adamwOn(std::span<const float> g, std::span<const float> x, std::span<float> u,
                        std::size_t begin, std::size_t end) {
  const std::size_t n = u.size();
  assert(buffer_.size() == 2 * n);
  kernels::AdamwStep s;
  s.beta1 = static_cast<float>(options_.momentum);
  s.beta2 = static_cast<float>(options_.beta2);
  s.eps = static_cast<float>(options_.eps);
  s.weightDecay = static_cast<float>(options_.weightDecay);
  s.biasCorrection1 = biasCorrection1_;
  s.biasCorrection2 = biasCorrection2_;
  kernels::cpuOps().adamwDirection(g.data() + begin, x.data() + begin, buffer_.data() + begin,
                                   buffer_.data() + n + begin, u.data() + begin, end - begin, s);
}

void Optimizer::directionOn(std::span<const float> g, std::span<const float> x, std::span<float> u,
                            std::size_t begin, std::size_t end) {
  if (options_.kind == OptimizerKind::kAdamw) {
    adamwOn(g, x, u, begin, end);
    return;
  }
  kernels::SgdStep s;
  s.beta = static_cast<float>(options_.momentum);
  s.weightDecay = static_cast<float>(options_.weightDecay);
  const bool local = options_.momentumKind == MomentumKind::kLocal;
  if (s.beta == 0.0f) {
    s.momentum = kernels::SgdMomentum::kNone;
  } else if (options_.nesterov) {
    s.momentum =
        local ? kernels::SgdMomentum::kLocalNesterov : kernels::SgdMomentum::kQuasiGlobalNesterov;
  } else {
    s.momentum = local ? kernels::SgdMomentum::kLocal : kernels::SgdMomentum::kQuasiGlobal;
  }
  assert(s.beta == 0.0f || buffer_.size() == u.size());
  float* m = s.beta == 0.0f ? nullptr : buffer_.data() + begin;
  kernels::cpuOps().sgdDirection(g.data() + begin, x.data() + begin, m, u.data() + begin,
                                 end - begin, s);
}

void Optimizer::afterMixing(std::span<const float> xBeforeSteps,
                            std::span<const float> xAfterMixing, double lr, int localSteps) {
  assert(localSteps >= 1);
  // Per local step and per unit of lr: the buffer stays on one step's scale for any H.
  const double lrSum = lr * localSteps;
  if (options_.momentumKind != MomentumKind::kQuasiGlobal || buffer_.empty() || !(lrSum > 0.0))
    return;
  assert(xBeforeSteps.size() == buffer_.size() && xAfterMixing.size() == buffer_.size());
  kernels::cpuOps().momentumFromChange(xBeforeSteps.data(), xAfterMixing.data(), buffer_.data(),
                                       buffer_.size(), static_cast<float>(options_.momentum),
                                       static_cast<float>(1.0 / lrSum));
}

Status Optimizer::setMomentumBuffer(std::span<const float> values) {
  if (values.size() != buffer_.size()) {
    return invalidArgument("optimizer: momentum buffer has " + std::to_string(buffer_.size()) +
                           " entries, got " + std::to_string(values.size()));
  }
  std::copy(values.begin(), values.end(), buffer_.begin());
  return Status::ok();
}

}  // namespace grapevine::train
