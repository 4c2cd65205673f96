#include "runtime/algorithms/consensus_step.h"

#include <algorithm>
#include <cmath>

namespace grapevine::algorithms {
namespace {
constexpr double kQualitySmoothing = 0.05;  // EMA weight of one round's delta
constexpr double kLagSmoothing = 0.02;      // of log(|v|^2 / |xhat|^2): ~50 rounds
}  // namespace

void AutoStep::observeCompression(double vNorm2, double errorNorm2, double xhatNorm2) {
  ++rounds_;
  if (vNorm2 > 0.0 && std::isfinite(vNorm2) && std::isfinite(errorNorm2)) {
    const double delta = std::clamp(1.0 - errorNorm2 / vNorm2, 0.0, 1.0);
    quality_ = haveQuality_ ? quality_ + kQualitySmoothing * (delta - quality_) : delta;
    haveQuality_ = true;

    // The public copy's lag relative to its size (the model's own growth is not instability).
    const double lag = std::log(xhatNorm2 > 0.0 ? vNorm2 / xhatNorm2 : vNorm2);
    trend_ = haveLag_ ? trend_ + kLagSmoothing * (lag - trend_) : lag;
    haveLag_ = true;
  }
  if (rounds_ % kWindowRounds == 0 && haveLag_) {
    // Once a window: compare the smoothed lag with the last window's.
    if (rounds_ > kWarmupRounds) {
      const double growth = trend_ - windowStart_;
      if (growth > kGrowthTrigger) {
        backoff_ = std::max(kMinBackoff, backoff_ * kBackoff);
        ++backoffs_;
      } else if (growth < 0.0) {
        backoff_ = std::min(1.0, backoff_ * kRaise);
      }
    }
    windowStart_ = trend_;
  }
  update();
}

void AutoStep::observeRow(double sumW) {
  if (sumW > 0.0) a_ = sumW;  // no neighbour mixed this round: keep the last row
}

void AutoStep::update() {
  const double base = kGain * quality_ / a_;
  proposal_ = std::clamp(base * backoff_, kMinStep, kMaxStep);
}

std::vector<double> AutoStep::save() const {
  // Integers and flags travel as doubles: every one of them is exact below 2^53.
  return {quality_,
          haveQuality_ ? 1.0 : 0.0,
          a_,
          trend_,
          windowStart_,
          haveLag_ ? 1.0 : 0.0,
          backoff_,
          proposal_,
          static_cast<double>(rounds_),
          static_cast<double>(backoffs_)};
}

bool AutoStep::load(std::span<const double> s) {
  if (s.size() != kStateSize) return false;
  quality_ = s[0];
  haveQuality_ = s[1] != 0.0;
  a_ = s[2];
  trend_ = s[3];
  windowStart_ = s[4];
  haveLag_ = s[5] != 0.0;
  backoff_ = s[6];
  proposal_ = s[7];
  rounds_ = static_cast<std::int64_t>(s[8]);
  backoffs_ = static_cast<std::uint64_t>(s[9]);
  return true;
}

}  // namespace grapevine::algorithms
