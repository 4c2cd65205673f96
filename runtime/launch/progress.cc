#include "runtime/launch/progress.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace grapevine::launch {

namespace {

// A record's number, or `fallback` when the field is missing or not a number (null included).
double number(const nlohmann::json& record, const char* key, double fallback) {
  const auto it = record.find(key);
  return it != record.end() && it->is_number() ? it->get<double>() : fallback;
}

struct Range {
  double lo = INFINITY, hi = -INFINITY;
  void add(double v) {
    if (!std::isfinite(v)) return;
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  bool any() const { return lo <= hi; }
};

}  // namespace

std::string progressLine(std::vector<PeerProcess>& peers, double elapsedSeconds,
                         std::int64_t rounds, int restarts) {
  const double elapsed = elapsedSeconds;
  double lossSum = 0, mbSent = 0;
  Range acc, testLoss;
  long long minRound = -1;
  int n = 0, withLoss = 0;
  for (auto& p : peers) {
    readNewRecords(p);
    if (p.last.is_null()) continue;
    ++n;
    const long long r = static_cast<long long>(number(p.last, "round", -1));
    minRound = minRound < 0 ? r : std::min(minRound, r);
    // A program's step() without loss= records "loss": null.
    if (const double loss = number(p.last, "loss", NAN); std::isfinite(loss)) {
      lossSum += loss;
      ++withLoss;
    }
    mbSent += number(p.last, "bytes_sent", 0) / 1e6;
    acc.add(p.accuracy);
    testLoss.add(p.testLoss);
  }
  char line[256];
  if (n == 0) {
    std::snprintf(line, sizeof line, "starting %zu peers (%.0f s)", peers.size(), elapsed);
    return line;
  }
  const double done = static_cast<double>(minRound + 1);
  const double rate = elapsed > 0 ? done / elapsed : 0;
  const double eta = rate > 0 ? (rounds - done) / rate : 0;
  // The metric the peers report: accuracy, else test loss (a language model), else none yet.
  char metric[64] = "acc n/a";
  if (acc.any())
    std::snprintf(metric, sizeof metric, "acc %.1f-%.1f%%", 100 * acc.lo, 100 * acc.hi);
  else if (testLoss.any())
    std::snprintf(metric, sizeof metric, "test loss %.4g-%.4g", testLoss.lo, testLoss.hi);
  char loss[32] = "loss n/a";
  if (withLoss > 0) std::snprintf(loss, sizeof loss, "loss %.4f", lossSum / withLoss);
  std::snprintf(line, sizeof line,
                "round %lld/%lld  %s  %s  sent %.1f MB  %.1f rounds/s  ETA %.0f s", minRound + 1,
                static_cast<long long>(rounds), loss, metric, mbSent, rate, eta);
  if (restarts > 0) return std::string(line) + "  restarts " + std::to_string(restarts);
  return line;
}

}  // namespace grapevine::launch
