#include "runtime/train/outer.h"

#include <cassert>
#include <string>

#include "runtime/common/enum_names.h"

namespace grapevine::train {

namespace {

// In enum order (the enum counts from 0).
constexpr std::string_view kOuterKindNames[] = {"none", "sgd", "nesterov"};

}  // namespace

std::string_view outerKindName(OuterKind kind) { return enumName(kOuterKindNames, kind); }

std::optional<OuterKind> parseOuterKind(std::string_view name) {
  return parseEnum<OuterKind>(kOuterKindNames, name);
}

const std::vector<std::string_view>& outerKindNames() {
  static const std::vector<std::string_view> names = enumNameList(kOuterKindNames);
  return names;
}

OuterOptimizer::OuterOptimizer(const OuterOptions& options, std::size_t size) : options_(options) {
  if (options_.active() && options_.momentum > 0.0) m_.assign(size, 0.0f);
}

void OuterOptimizer::step(std::span<const float> anchor, std::span<float> x,
                          std::span<const ValueRange> skip) {
  if (!options_.active()) return;
  assert(anchor.size() == x.size() && (m_.empty() || m_.size() == x.size()));
  std::size_t at = 0;
  for (const ValueRange& r : skip) {
    stepOn(anchor, x, at, r.offset);
    at = r.offset + r.count;
  }
  stepOn(anchor, x, at, x.size());
}

void OuterOptimizer::stepOn(std::span<const float> anchor, std::span<float> x, std::size_t begin,
                            std::size_t end) {
  const float eta = static_cast<float>(options_.lr);
  const float mu = static_cast<float>(options_.momentum);
  const float* a = anchor.data();
  float* xs = x.data();
  if (m_.empty()) {  // mu 0: both kinds are x <- a - eta d
    for (std::size_t i = begin; i < end; ++i) xs[i] = a[i] - eta * (a[i] - xs[i]);
    return;
  }
  float* m = m_.data();
  if (options_.kind == OuterKind::kNesterov) {
    for (std::size_t i = begin; i < end; ++i) {
      const float d = a[i] - xs[i];
      m[i] = mu * m[i] + d;
      xs[i] = a[i] - eta * (d + mu * m[i]);
    }
  } else {
    for (std::size_t i = begin; i < end; ++i) {
      const float d = a[i] - xs[i];
      m[i] = mu * m[i] + d;
      xs[i] = a[i] - eta * m[i];
    }
  }
}

Status OuterOptimizer::setMomentum(std::span<const float> values) {
  if (values.size() != m_.size()) {
    return invalidArgument("outer optimizer: momentum buffer has " + std::to_string(m_.size()) +
                           " entries, got " + std::to_string(values.size()));
  }
  std::copy(values.begin(), values.end(), m_.begin());
  return Status::ok();
}

}  // namespace grapevine::train
