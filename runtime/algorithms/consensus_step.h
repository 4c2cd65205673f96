// `algorithm.consensus_step: auto`: each peer proposes its own CHOCO consensus step every round
// from what it can measure locally; an edge mixes with the smaller of its two ends' proposals.
//
// Why min on each edge: CHOCO's consensus term x_i += sum_j w_ij g_ij (xhat_j - xhat_i) keeps
// sum_i x_i (the mean of the models) unchanged only if w_ij g_ij = w_ji g_ji. Both ends of an edge
// know both proposals (each rides in the sender's envelope, docs/wire-format.md) and compute
// g_ij = min(g_i, g_j) identically, so with symmetric weights every round conserves the mean.
//
// What limits the step. With e = x - xhat (how far the public copy lags the model) and a compressor
// of quality delta (|C(v) - v|^2 = (1 - delta)|v|^2), one round maps e -> (I - C)(v) with
// v = (1 + g a_i) e_i - g sum_j w_ij e_j + (training and consensus moves), a_i = sum_j w_ij. Too
// large a step and the public copies lag further every round: the consensus term then mixes
// compression noise instead of information, and CHOCO diverges. For a compressor whose error is
// fresh noise each round (rand-k), the bound is about (1 - delta)((1 + g a)^2 + g^2 sum_j w_ij^2)
// < 1, i.e. g ~ delta / (2 a); greedy compressors (top-k, sign) re-select what they left behind
// and tolerate several times more. Measured (docs/algorithms.md), the best fixed steps lie between
// 0.7 and 2.5 times delta / a_i across top-k, sign and int4, on Fashion-MNIST and on the consensus
// workload, and 4 times it diverges on some; the spectral gap sets how fast consensus is reached,
// not where this loop turns unstable, so it is not used.
//
// The rule, per round: delta is measured on the real message (1 - |C(v) - v|^2 / |v|^2, v =
// x_half - xhat_i, the vector CHOCO compresses) and smoothed, a_i comes from the peer's own row of
// the last round's weights, and the proposal is
//     g_i = clamp(kGain * delta / a_i * backoff, kMinStep, kMaxStep).
// backoff in [kMinBackoff, 1] is the feedback for compressors where that is too large (rand-k):
// once every kWindowRounds (after kWarmupRounds) the smoothed log of the relative lag
// |v|^2 / |xhat_i|^2 is compared with its value a window earlier; a rise of more than
// kGrowthTrigger multiplies backoff by kBackoff, a fall by kRaise (up to 1). In a run that trains
// the relative lag falls; when the step is too large it rises, slowly, long before anything is
// non-finite. Everything is computed in double from this peer's own state in a fixed order, so the
// simulator and real processes propose bit-identical steps.
//
// Thread contract: one AutoStep per peer, used from the peer's training thread only.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace grapevine::algorithms {

class AutoStep {
 public:
  static constexpr double kGain = 1.0;
  static constexpr double kMinStep = 0.002;
  static constexpr double kMaxStep = 1.0;
  static constexpr double kMinBackoff = 1.0 / 64;
  static constexpr double kBackoff = 0.5;
  static constexpr double kRaise = 1.25;
  static constexpr int kWindowRounds = 100;
  static constexpr int kWarmupRounds = 100;       // the lag builds up from 0 at the start
  static constexpr double kGrowthTrigger = 0.15;  // rise of log lag over one window

  // One round's compression: |v|^2 and |C(v) - v|^2 of the vector CHOCO compressed, and
  // |xhat_i|^2 after the update. Call once per round, before proposal().
  void observeCompression(double vNorm2, double errorNorm2, double xhatNorm2);
  // The round's mixing row (only the neighbours mixed): a_i = sum_j w_ij. Used from the next
  // proposal on; until the first call, a_i = 1.
  void observeRow(double sumW);

  // This round's proposal (after observeCompression), in [kMinStep, kMaxStep].
  double proposal() const { return proposal_; }
  // The smoothed compressor quality delta in [0, 1] (0 before the first nonzero v).
  double quality() const { return quality_; }
  double backoff() const { return backoff_; }
  // How many times the lag signal made this peer back off.
  std::uint64_t backoffs() const { return backoffs_; }

  // The whole controller state, for checkpoints: save() gives kStateSize values, load() takes them
  // back (false on a size mismatch, the state unchanged).
  static constexpr std::size_t kStateSize = 10;
  std::vector<double> save() const;
  bool load(std::span<const double> state);

 private:
  void update();

  double quality_ = 0.0;
  bool haveQuality_ = false;
  double a_ = 1.0;
  double trend_ = 0.0;        // EMA of log(|v|^2 / |xhat|^2)
  double windowStart_ = 0.0;  // trend_ at the start of the current window
  bool haveLag_ = false;
  double backoff_ = 1.0;
  double proposal_ = kMinStep;
  std::int64_t rounds_ = 0;
  std::uint64_t backoffs_ = 0;
};

}  // namespace grapevine::algorithms
