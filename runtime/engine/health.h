// Divergence detection for one peer: the checks on its model and loss each round (before and after
// mixing), and the divergence notice that carries a detection to every peer through the
// neighbours (its payload codec). No I/O: PeerCore frames and seals the notice.
// Thread contract: the owner's (PeerCore's) thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace grapevine::engine {

// Why a run stops early: training diverged, here (origin == this peer's rank) or at a peer whose
// notice reached this one through its neighbours.
struct Divergence {
  std::int64_t round = 0;  // the round in which `origin` detected it
  int origin = 0;
  double loss = 0.0;       // the origin's local loss then (NaN when not finite)
  double modelNorm = 0.0;  // the origin's |x| then (NaN when not finite)
  std::string reason;      // what was detected, e.g. "the loss is not finite"
};

// "diverged at round R (peer P: REASON; loss L, model norm N[, consensus distance D]): lower
// optimizer.lr or algorithm.consensus_step" — what `peer`, `launch` and `sim` print (exit code 3).
// consensusDistance: NaN where unknown (a real peer sees only its neighbours).
std::string divergenceMessage(const Divergence& d, double consensusDistance);

// The notice's payload: origin u32, round u64, loss f64, model norm f64, reason length u16, reason
// (at most kNoticeMaxReason bytes: a longer one is cut).
constexpr std::size_t kNoticeFixedBytes = 4 + 8 + 8 + 8 + 2;
constexpr std::size_t kNoticeMaxReason = 512;
std::size_t noticeBytes(const Divergence& d);
// Writes the payload of `d` into out[0, noticeBytes(d)).
void writeNotice(const Divergence& d, std::span<std::uint8_t> out);
// Reads a notice's payload; nullopt when malformed (any size, any bytes).
std::optional<Divergence> readNotice(std::span<const std::uint8_t> payload);

// What the checks remember between rounds (a checkpoint keeps it: PeerState).
struct HealthHistory {
  double initialNorm = 0.0;  // |x| at the start
  double firstLoss = 0.0, lossEma = 0.0, minLossEma = 0.0;
  bool lossSeen = false;  // firstLoss is set
};

// |x| on the vectorised kernel (a scalar double loop cost 14 ms per call at 10 M values, and the
// health check runs twice a round). Feeds local decisions only: the summation order may differ
// between kernel tables by rounding.
double modelNorm(std::span<const float> x);

// Thresholds: the loss average (weight kLossEmaWeight on the newest round) over kLossGrowth x its
// lowest and over kLossOverFirst x the first round's loss, a model norm over kNormGrowth x
// max(initial norm, 1), or anything not finite.
class HealthMonitor {
 public:
  static constexpr double kLossEmaWeight = 0.1;
  static constexpr double kLossGrowth = 1000.0;
  static constexpr double kLossOverFirst = 10.0;
  static constexpr double kNormGrowth = 1000.0;

  // lossMayBeUnknown (the API): a NaN loss means "not reported": only the model is checked.
  HealthMonitor(int rank, bool lossMayBeUnknown)
      : rank_(rank), lossMayBeUnknown_(lossMayBeUnknown) {}
  // The norm the growth check compares with: the starting model's.
  void start(std::span<const float> x0) { history_.initialNorm = modelNorm(x0); }

  // The round's check of model x, before mixing (the loss enters the history) or after it; on
  // divergence sets divergence() (origin: this peer) and returns false.
  bool check(std::span<const float> x, double loss, bool afterMixing, std::int64_t round);
  const std::optional<Divergence>& divergence() const { return divergence_; }
  // A notice from a neighbour: kept when this peer knows of no divergence yet.
  void noteDivergence(Divergence d);
  // Adds what else this peer knows of why (after "; ") to the reason of the divergence it found.
  void explain(std::string_view why);

  const HealthHistory& history() const { return history_; }
  void setHistory(const HealthHistory& h) { history_ = h; }

 private:
  int rank_;
  bool lossMayBeUnknown_;
  HealthHistory history_;
  std::optional<Divergence> divergence_;
};

}  // namespace grapevine::engine
