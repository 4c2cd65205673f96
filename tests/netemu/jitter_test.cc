// network.jitter_ms means the same in the simulator and the emulator: an extra one-way delay,
// uniform in [0, jitter], drawn by the one function both call (runtime/common/jitter.h). Checks the
// function itself, that each model repeats its draws for a seed, and that both models' draws have
// the range, mean and distribution that meaning gives.
#include "runtime/common/jitter.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

#include "runtime/netemu/link_model.h"
#include "runtime/sim/link_model.h"

using namespace grapevine;

namespace {

constexpr int kDraws = 20000;
constexpr double kJitterMs = 10.0;
constexpr double kLatencyMs = 20.0;

// The emulator's jitter draws in ms: packets far enough apart that FIFO never binds, so each
// delivery is exactly latency + jitter draw (to the nanosecond).
std::vector<double> netemuDraws(std::uint64_t seed) {
  netemu::LinkModel link({0, kLatencyMs, kJitterMs, 0}, 0, seed);
  std::vector<double> out;
  for (int i = 0; i < kDraws; ++i) {
    const std::int64_t now = std::int64_t{i} * 100'000'000;  // 100 ms apart
    const netemu::Decision d = link.admit(now, 100);
    REQUIRE(d.verdict == netemu::Verdict::kDeliver);
    out.push_back(static_cast<double>(d.deliverAtNs - now) / 1e6 - kLatencyMs);
  }
  return out;
}

// The simulator's jitter draws in ms for one edge, round after round.
std::vector<double> simDraws(std::uint64_t seed) {
  sim::LinkParams p;
  p.latencySeconds = kLatencyMs * 1e-3;
  p.jitterSeconds = kJitterMs * 1e-3;
  const sim::LinkModel link(p, seed);
  std::vector<double> out;
  for (int round = 0; round < kDraws; ++round) {
    const double j = link.jitterSeconds(0, 1, round);
    CHECK(link.delaySeconds(0, 1, round, 0) == p.latencySeconds + j);
    out.push_back(j * 1e3);
  }
  return out;
}

double mean(const std::vector<double>& v) {
  return std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
}

// Two-sample Kolmogorov-Smirnov distance: the largest gap between the empirical CDFs.
double ksDistance(std::vector<double> a, std::vector<double> b) {
  std::sort(a.begin(), a.end());
  std::sort(b.begin(), b.end());
  double worst = 0;
  std::size_t i = 0, k = 0;
  while (i < a.size() && k < b.size()) {
    const double x = std::min(a[i], b[k]);
    while (i < a.size() && a[i] <= x) ++i;
    while (k < b.size() && b[k] <= x) ++k;
    worst = std::max(
        worst, std::abs(static_cast<double>(i) / a.size() - static_cast<double>(k) / b.size()));
  }
  return worst;
}

void checkUniformZeroToJitter(const std::vector<double>& draws) {
  const auto [lo, hi] = std::minmax_element(draws.begin(), draws.end());
  INFO("min " << *lo << " max " << *hi << " mean " << mean(draws));
  CHECK(*lo >= 0.0);  // never earlier than the latency
  CHECK(*hi <= kJitterMs);
  CHECK(*lo < 0.01 * kJitterMs);  // the whole range is used
  CHECK(*hi > 0.99 * kJitterMs);
  // Uniform: mean jitter/2 (standard error jitter / sqrt(12 n) = 0.2% of jitter here).
  CHECK(mean(draws) == Approx(kJitterMs / 2).epsilon(0.02));
  // A quarter of the draws in each quarter of the range.
  const auto below =
      std::count_if(draws.begin(), draws.end(), [](double d) { return d < kJitterMs / 4; });
  CHECK(static_cast<double>(below) / draws.size() == Approx(0.25).margin(0.02));
}

}  // namespace

TEST_CASE("jitterDelay: uniform in [0, jitter) from 64 random bits, 0 without jitter") {
  CHECK(jitterDelay(10.0, 0) == 0.0);
  CHECK(jitterDelay(10.0, ~std::uint64_t{0}) < 10.0);
  CHECK(jitterDelay(10.0, ~std::uint64_t{0}) > 10.0 * (1 - 1e-15));
  CHECK(jitterDelay(10.0, std::uint64_t{1} << 63) == 5.0);
  CHECK(jitterDelay(0.0, std::uint64_t{1} << 63) == 0.0);
  CHECK(jitterDelay(-3.0, std::uint64_t{1} << 63) == 0.0);
  CHECK(unitInterval(std::uint64_t{1} << 62) == 0.25);
}

TEST_CASE("simulator and emulator: the same seed repeats the same jitter draws") {
  CHECK(netemuDraws(7) == netemuDraws(7));
  CHECK(netemuDraws(7) != netemuDraws(8));
  CHECK(simDraws(7) == simDraws(7));
  CHECK(simDraws(7) != simDraws(8));
}

TEST_CASE("simulator and emulator draw network.jitter_ms from the same distribution: U[0, j]") {
  const auto net = netemuDraws(7);
  const auto simulated = simDraws(7);
  {
    INFO("emulator");
    checkUniformZeroToJitter(net);
  }
  {
    INFO("simulator");
    checkUniformZeroToJitter(simulated);
  }
  // Same distribution: the two-sample KS distance of 20000 + 20000 draws from one distribution is
  // below 0.0195 with probability 0.999; [-j, j] against [0, j] would give 0.5.
  CHECK(ksDistance(net, simulated) < 0.0195);
}
