#include "runtime/engine/deadline.h"

#include <algorithm>
#include <cmath>

namespace grapevine::engine {

void ArrivalDeadlines::add(int j, double seconds) {
  if (!adaptive_) return;
  History& h = history_[j];
  h.seconds[static_cast<std::size_t>(h.next)] = std::max(0.0, seconds);
  h.next = (h.next + 1) % kWindow;
  h.count = std::min(h.count + 1, kWindow);
  h.backoff = 1.0;
}

void ArrivalDeadlines::arrived(int j, double seconds) { add(j, seconds); }

void ArrivalDeadlines::missed(int j) {
  if (!adaptive_) return;
  History& h = history_[j];
  if (deadline(j) < cap_) h.backoff *= 2.0;
}

double ArrivalDeadlines::deadline(int j) const {
  if (!adaptive_) return cap_;
  const auto it = history_.find(j);
  if (it == history_.end() || it->second.count < kWarmup) return cap_;
  const History& h = it->second;
  std::array<double, kWindow> sorted = h.seconds;
  std::sort(sorted.begin(), sorted.begin() + h.count);
  // The percentile by the nearest rank: the ceil(kQuantile n)-th smallest.
  const int rank = static_cast<int>(std::ceil(kQuantile * h.count));
  const double typical = sorted[static_cast<std::size_t>(std::max(rank, 1) - 1)];
  return std::min(cap_, (kFactor * typical + kMargin) * h.backoff);
}

double ArrivalDeadlines::latest(std::span<const int> js) const {
  double d = 0.0;
  for (int j : js) d = std::max(d, deadline(j));
  return d;
}

}  // namespace grapevine::engine
