#include "runtime/engine/health.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <sstream>
#include <utility>

#include "kernels/ops.h"
#include "runtime/common/byte_order.h"

namespace grapevine::engine {

double modelNorm(std::span<const float> x) {
  return std::sqrt(kernels::cpuOps().sumSquares(x.data(), x.size()));
}

std::string divergenceMessage(const Divergence& d, double consensusDistance) {
  std::ostringstream os;
  os << "diverged at round " << d.round << " (peer " << d.origin << ": " << d.reason << "; loss "
     << d.loss << ", model norm " << d.modelNorm;
  if (!std::isnan(consensusDistance)) os << ", consensus distance " << consensusDistance;
  os << "): lower optimizer.lr or algorithm.consensus_step";
  return os.str();
}

std::size_t noticeBytes(const Divergence& d) {
  return kNoticeFixedBytes + std::min(d.reason.size(), kNoticeMaxReason);
}

void writeNotice(const Divergence& d, std::span<std::uint8_t> out) {
  const std::size_t len = std::min(d.reason.size(), kNoticeMaxReason);
  std::uint8_t* p = out.data();
  storeLe(p, static_cast<std::uint32_t>(d.origin));
  storeLe(p + 4, static_cast<std::uint64_t>(d.round));
  storeLe(p + 12, std::bit_cast<std::uint64_t>(d.loss));
  storeLe(p + 20, std::bit_cast<std::uint64_t>(d.modelNorm));
  storeLe(p + 28, static_cast<std::uint16_t>(len));
  std::memcpy(p + kNoticeFixedBytes, d.reason.data(), len);
}

std::optional<Divergence> readNotice(std::span<const std::uint8_t> m) {
  if (m.size() < kNoticeFixedBytes) return std::nullopt;
  const std::uint8_t* p = m.data();
  const auto len = loadLe<std::uint16_t>(p + 28);
  if (len > kNoticeMaxReason || m.size() != kNoticeFixedBytes + len) return std::nullopt;
  const auto round = loadLe<std::uint64_t>(p + 4);
  if (round > static_cast<std::uint64_t>(INT64_MAX)) return std::nullopt;
  Divergence d;
  d.origin = static_cast<int>(loadLe<std::uint32_t>(p));
  d.round = static_cast<std::int64_t>(round);
  d.loss = std::bit_cast<double>(loadLe<std::uint64_t>(p + 12));
  d.modelNorm = std::bit_cast<double>(loadLe<std::uint64_t>(p + 20));
  d.reason.assign(reinterpret_cast<const char*>(p + kNoticeFixedBytes), len);
  return d;
}

void HealthMonitor::noteDivergence(Divergence d) {
  if (!divergence_) divergence_ = std::move(d);
}

void HealthMonitor::explain(std::string_view why) {
  if (!divergence_ || divergence_->origin != rank_) return;
  divergence_->reason += "; ";
  divergence_->reason += why;
}

bool HealthMonitor::check(std::span<const float> x, double loss, bool afterMixing,
                          std::int64_t round) {
  const double n = modelNorm(x);
  HealthHistory& h = history_;
  // The API's caller may not report a loss: then only the model is checked.
  const bool lossKnown = !(lossMayBeUnknown_ && std::isnan(loss));
  std::string reason;
  if (!afterMixing && lossKnown) {
    if (!h.lossSeen) {
      h.firstLoss = loss;
      h.lossEma = h.minLossEma = loss;
      h.lossSeen = true;
    } else {
      h.lossEma = (1.0 - kLossEmaWeight) * h.lossEma + kLossEmaWeight * loss;
      h.minLossEma = std::min(h.minLossEma, h.lossEma);
    }
  }
  if (lossKnown && !std::isfinite(loss)) {
    reason = "the loss is not finite";
  } else if (!std::isfinite(n)) {
    reason = afterMixing ? "the model is not finite after mixing" : "the model is not finite";
  } else if (n > kNormGrowth * std::max(h.initialNorm, 1.0)) {
    reason = "the model norm grew over " + std::to_string(static_cast<int>(kNormGrowth)) +
             "x its initial value" + (afterMixing ? " in mixing" : "");
  } else if (!afterMixing && lossKnown && h.lossEma > kLossGrowth * h.minLossEma &&
             h.lossEma > kLossOverFirst * h.firstLoss) {
    reason = "the loss average grew over " + std::to_string(static_cast<int>(kLossGrowth)) +
             "x its lowest";
  }
  if (reason.empty()) return true;
  divergence_ = Divergence{round, rank_, loss, n, reason};
  return false;
}

}  // namespace grapevine::engine
