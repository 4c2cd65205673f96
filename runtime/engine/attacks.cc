#include "runtime/engine/attacks.h"

#include <cmath>

#include "runtime/train/rng.h"

namespace grapevine::engine {

void Attacker::craft(std::span<const float> x,
                     const std::vector<std::span<const float>>& neighbours, std::int64_t round,
                     std::span<float> out) {
  using config::FaultKind;
  const std::size_t n = x.size();
  const double a = scale_;
  if (kind_ == FaultKind::kReplay && replay_.empty()) replay_.assign(x.begin(), x.end());
  const bool needsStats =
      kind_ == FaultKind::kAlie || kind_ == FaultKind::kIpm || kind_ == FaultKind::kDissensus;
  if (needsStats) {
    // The neighbours' coordinate-wise mean and standard deviation (population), in double.
    mean_.assign(n, 0.0);
    spread_.assign(n, 0.0);
    std::size_t count = 0;
    for (const auto& v : neighbours) {
      if (v.size() != n) continue;
      ++count;
      for (std::size_t k = 0; k < n; ++k) mean_[k] += v[k];
    }
    if (count == 0) {
      for (std::size_t k = 0; k < n; ++k) mean_[k] = x[k];
    } else {
      for (auto& m : mean_) m /= static_cast<double>(count);
      for (const auto& v : neighbours) {
        if (v.size() != n) continue;
        for (std::size_t k = 0; k < n; ++k) {
          const double d = v[k] - mean_[k];
          spread_[k] += d * d;
        }
      }
      for (auto& s : spread_) s = std::sqrt(s / static_cast<double>(count));
    }
  }
  switch (kind_) {
    case FaultKind::kSignFlip:
      for (std::size_t k = 0; k < n; ++k) out[k] = static_cast<float>(-a * x[k]);
      break;
    case FaultKind::kNoise: {
      double sum2 = 0.0;
      for (std::size_t k = 0; k < n; ++k) sum2 += static_cast<double>(x[k]) * x[k];
      const double sigma = a * std::sqrt(sum2 / static_cast<double>(std::max<std::size_t>(n, 1)));
      train::Rng rng(train::deriveSeed(seed_, static_cast<std::uint64_t>(rank_),
                                       static_cast<std::uint64_t>(round), 0xa77acc));
      for (std::size_t k = 0; k < n; ++k) out[k] = static_cast<float>(x[k] + sigma * rng.normal());
      break;
    }
    case FaultKind::kAlie:
      for (std::size_t k = 0; k < n; ++k) out[k] = static_cast<float>(mean_[k] - a * spread_[k]);
      break;
    case FaultKind::kIpm:
      for (std::size_t k = 0; k < n; ++k) out[k] = static_cast<float>(-a * mean_[k]);
      break;
    case FaultKind::kDissensus:
      for (std::size_t k = 0; k < n; ++k)
        out[k] = static_cast<float>(mean_[k] - a * (x[k] - mean_[k]));
      break;
    case FaultKind::kBias:
      for (std::size_t k = 0; k < n; ++k) out[k] = static_cast<float>(x[k] + a);
      break;
    case FaultKind::kReplay:
      std::copy(replay_.begin(), replay_.end(), out.begin());
      break;
    default:
      std::copy(x.begin(), x.end(), out.begin());
      break;
  }
}

}  // namespace grapevine::engine
