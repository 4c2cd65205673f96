#include "runtime/launch/progress.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace grapevine::launch {

std::string progressLine(std::vector<PeerProcess>& peers, double elapsedSeconds,
                         std::int64_t rounds, int restarts) {
  const double elapsed = elapsedSeconds;
  double lossSum = 0, accMin = INFINITY, accMax = -INFINITY, mbSent = 0;
  long long minRound = -1;
  int n = 0;
  for (auto& p : peers) {
    readNewRecords(p);
    if (p.last.is_null()) continue;
    ++n;
    const long long r = p.last.value("round", -1LL);
    minRound = minRound < 0 ? r : std::min(minRound, r);
    lossSum += p.last.value("loss", 0.0);
    mbSent += p.last.value("bytes_sent", 0.0) / 1e6;
    if (std::isfinite(p.accuracy)) {
      accMin = std::min(accMin, p.accuracy);
      accMax = std::max(accMax, p.accuracy);
    }
  }
  char line[256];
  if (n == 0) {
    std::snprintf(line, sizeof line, "starting %zu peers (%.0f s)", peers.size(), elapsed);
    return line;
  }
  const double done = static_cast<double>(minRound + 1);
  const double rate = elapsed > 0 ? done / elapsed : 0;
  const double eta = rate > 0 ? (rounds - done) / rate : 0;
  char acc[64] = "acc n/a";
  if (std::isfinite(accMin))
    std::snprintf(acc, sizeof acc, "acc %.1f-%.1f%%", 100 * accMin, 100 * accMax);
  std::snprintf(line, sizeof line,
                "round %lld/%lld  loss %.4f  %s  sent %.1f MB  %.1f rounds/s  ETA %.0f s",
                minRound + 1, static_cast<long long>(rounds), lossSum / n, acc, mbSent, rate, eta);
  if (restarts > 0) return std::string(line) + "  restarts " + std::to_string(restarts);
  return line;
}

}  // namespace grapevine::launch
