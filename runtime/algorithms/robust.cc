#include "runtime/algorithms/robust.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "kernels/ops.h"
#include "runtime/common/enum_names.h"

namespace grapevine::algorithms {
namespace {
// Indexed by RobustRule.
constexpr std::string_view kRobustRuleNames[] = {"none", "clip", "trim"};
}  // namespace

std::string_view robustRuleName(RobustRule rule) { return enumName(kRobustRuleNames, rule); }

std::optional<RobustRule> parseRobustRule(std::string_view name) {
  return parseEnum<RobustRule>(kRobustRuleNames, name);
}

const std::vector<std::string_view>& robustRuleNames() {
  static const std::vector<std::string_view> names = enumNameList(kRobustRuleNames);
  return names;
}

double RobustMixer::trustFactor(const NeighbourTrust& t) const {
  const double q = options_.quarantineScore;
  if (q <= 0.0 || t.score <= q / 2) return 1.0;
  return std::clamp((q - t.score) / (q / 2), 0.0, 1.0);
}

double RobustMixer::lossFraction(NeighbourTrust& t, double ownLoss, std::span<const float> v) {
  const double loss = options_.lossProbe(v);
  if (!std::isfinite(loss)) {
    ++t.roundsLossy;
    return 1.0;
  }
  if (ownLoss > 0.0) lossRatios_.emplace_back(t.neighbour, loss / ownLoss);
  const double bound = kLossSlack * ownLoss + kLossFloor;
  if (!(loss > bound)) return 0.0;  // a non-finite own loss tells nothing of the neighbour
  ++t.roundsLossy;
  return 1.0 - bound / loss;
}

void RobustMixer::weigh(std::span<const float> self, std::vector<Term>& terms) {
  clipped_.clear();
  lossRatios_.clear();
  const double ownLoss = options_.lossProbe ? options_.lossProbe(self) : 0.0;
  // A neighbour distrusted before a restart (restoreTrust) and mixed again: weight 0, out of the
  // radius (its distance stays kUnmeasured), distrusted again (the engine quarantines it).
  constexpr double kUnmeasured = -1.0;
  distances_.assign(terms.size(), kUnmeasured);
  std::vector<double> sorted;
  for (std::size_t t = 0; t < terms.size(); ++t) {
    Term& term = terms[t];
    const auto it = trust_.find(term.neighbour);
    if (it != trust_.end() && it->second.distrusted) {
      term.weight = 0.0;
      distrusted_.push_back(it->second);
      continue;
    }
    distances_[t] = std::sqrt(
        kernels::cpuOps().distanceAndNorm(term.vector, self.data(), self.size()).distance2);
    sorted.push_back(distances_[t]);
  }
  const std::size_t n = sorted.size();
  // b hostile neighbours at most: each one distrusted already leaves one fewer among the rest.
  std::size_t found = 0;
  for (const auto& [j, t] : trust_) found += t.distrusted ? 1 : 0;
  const auto b = static_cast<std::size_t>(std::max(options_.byzantine, 0));
  const std::size_t left = b > found ? b - found : 0;
  left_ = left;
  if (n > left) {
    std::nth_element(sorted.begin(), sorted.begin() + static_cast<std::ptrdiff_t>(n - 1 - left),
                     sorted.end());
    lastRadius_ = sorted[n - 1 - left];
  }
  radius_ = kClipSlack * lastRadius_.value_or(0.0);
  for (std::size_t t = 0; t < terms.size(); ++t) {
    Term& term = terms[t];
    const double d = distances_[t];
    if (d == kUnmeasured) continue;
    const double factor = d > radius_ ? radius_ / d : 1.0;
    // Suspicion counts only what lies beyond kSuspectSlack radii: an honest neighbour a little
    // farther than the radius is clipped, not suspected.
    const double far = kSuspectSlack * radius_;
    double fraction = d > far ? 1.0 - far / d : 0.0;
    NeighbourTrust& tr = trust_[term.neighbour];
    tr.neighbour = term.neighbour;
    ++tr.roundsMixed;
    if (options_.lossProbe) {
      fraction = std::max(
          fraction, lossFraction(tr, ownLoss, std::span<const float>(term.vector, self.size())));
    }
    if (factor < 1.0) {
      ++tr.roundsClipped;
      tr.clipSum += 1.0 - factor;
      clipped_.emplace_back(term.neighbour, 1.0 - factor);
    }
    tr.score += kTrustRate * (fraction - tr.score);
    if (options_.rule == RobustRule::kClip) term.weight *= factor * trustFactor(tr);
    if (options_.quarantineScore > 0.0 && !tr.distrusted && tr.roundsMixed >= kTrustMinRounds &&
        tr.score >= options_.quarantineScore) {
      tr.distrusted = true;
      distrusted_.push_back(tr);
    }
  }
}

void RobustMixer::trimmedDifference(std::span<const float> self, const std::vector<Term>& terms,
                                    std::span<float> out) const {
  const std::size_t n = terms.size();
  const std::size_t b = trimCount(n);
  // The own value and the n - 2b neighbours' values that stay, unweighted.
  const double keep = static_cast<double>(n + 1 - 2 * b);
  std::vector<float> values(n);
  for (std::size_t k = 0; k < self.size(); ++k) {
    for (std::size_t t = 0; t < n; ++t) values[t] = terms[t].vector[k];
    // Insertion sort: a handful of values.
    for (std::size_t a = 1; a < n; ++a) {
      const float v = values[a];
      std::size_t c = a;
      for (; c > 0 && values[c - 1] > v; --c) values[c] = values[c - 1];
      values[c] = v;
    }
    double sum = self[k];
    for (std::size_t a = b; a < n - b; ++a) sum += values[a];
    out[k] = static_cast<float>(sum / keep - static_cast<double>(self[k]));
  }
}

void RobustMixer::restoreTrust(const std::vector<NeighbourTrust>& trust) {
  trust_.clear();
  distrusted_.clear();
  for (NeighbourTrust t : trust) {
    t.restored = t.distrusted;
    trust_[t.neighbour] = t;
  }
}

std::vector<NeighbourTrust> RobustMixer::trust() const {
  std::vector<NeighbourTrust> out;
  out.reserve(trust_.size());
  for (const auto& [j, t] : trust_) out.push_back(t);
  return out;
}

std::string quarantineReason(const NeighbourTrust& t) {
  char why[300];
  const auto clipped = static_cast<unsigned long long>(t.roundsClipped);
  const auto mixed = static_cast<unsigned long long>(t.roundsMixed);
  if (t.restored) {
    std::snprintf(why, sizeof why,
                  "quarantined again: this peer had quarantined it before its restart (the "
                  "checkpoint's trust: suspicion %.2f after %llu rounds)",
                  t.score, mixed);
  } else if (t.roundsLossy == 0) {
    std::snprintf(why, sizeof why,
                  "quarantined: its messages lay beyond the robust mixing radius in %llu of %llu "
                  "rounds (suspicion %.2f >= algorithm.robust_quarantine)",
                  clipped, mixed, t.score);
  } else {
    std::snprintf(why, sizeof why,
                  "quarantined: of %llu rounds, its messages lay beyond the robust mixing radius "
                  "in %llu and its model's loss on this peer's probe beyond %.1fx its own in %llu "
                  "(suspicion %.2f >= algorithm.robust_quarantine)",
                  mixed, clipped, RobustMixer::kLossSlack,
                  static_cast<unsigned long long>(t.roundsLossy), t.score);
  }
  return why;
}

}  // namespace grapevine::algorithms
