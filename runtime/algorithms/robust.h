// Robust mixing (`algorithm.robust`, docs/algorithms.md "Robust mixing"): a member that holds the
// key but sends finite garbage (a flipped sign, noise, a model crafted from its neighbours' to sit
// just inside their spread, a stale model) must not drag its neighbours along with its full weight.
//
// Both rules look at the differences d_j = |v_j - s| between each neighbour's vector v_j (D-PSGD:
// its model of the round; CHOCO: its public copy) and the own one s, and at a radius
//   tau = 2 x the (n - b)-th smallest of the n distances of the round (b =
//         algorithm.robust_byzantine, the neighbours of one peer that may be hostile, less those
//         distrusted already; with n <= b the radius of the last round that had more, 0 before any)
// The (n - b)-th smallest distance is an honest neighbour's whenever at most b of the n are
// hostile, so a hostile neighbour pulls at most twice as hard as an honest one. The factor 2: with
// the bare (n - b)-th distance, a ring (n = 2, b = 1) always clips its farther honest neighbour,
// which drifts farther still (each peer follows its nearer side), and the ring falls apart into
// pairs: on the consensus workload (peers start apart) the honest peers quarantined 5 of 16 edges
// of a clean 8-peer ring within 75 rounds; with 2, none, and the run reaches the optimum (7e-14).
//   clip (ClippedGossip, He, Karimireddy and Jaggi 2022, with this adaptive radius): each
//        difference is clipped to norm tau, v_j - s -> (v_j - s) min(1, tau / d_j), which for a
//        weighted mix is the weight w_ij scaled by min(1, tau / d_j) (the rest goes to the own
//        copy).
//   trim (coordinate-wise trimmed mean, BRIDGE-T, Yang and Bajwa 2019): for each coordinate the b
//        largest and b smallest of the n neighbours' values are dropped and the rest averaged with
//        the own value (unweighted); the mix moves s towards that mean. Needs n >= 2b + 1: on a
//        ring (n = 2) the median of the own value and two neighbours' locks pairs of peers together
//        and consensus stalls (measured: the 16-peer ring's honest peers drifted apart, 20x, by
//        round 500), so validate refuses it there; use clip.
// Trust (both rules): per neighbour, the fraction of its difference beyond twice the radius,
// f_j = max(0, 1 - 2 tau / d_j), is averaged over rounds (exponential, kTrustRate per round) into a
// suspicion score. Under clip a score above half the quarantine score scales the neighbour's
// weight down linearly, to 0 at the quarantine score; a score at the quarantine score (after at
// least kTrustMinRounds rounds: never for one round) distrusts it, and the engine quarantines it.
// Loss screening (algorithm.robust_probe; the performance test of UBAR, Guo et al. 2021, used as
// evidence, not as a per-round filter): each round the own vector and each neighbour's are
// evaluated on a fixed sample of the own shard, and the fraction of the neighbour's loss beyond
// kLossSlack x the own + kLossFloor, max(0, 1 - (kLossSlack l_s + kLossFloor) / l_j), enters the
// suspicion when it exceeds the distance's. It catches what drags slowly and so never stands out
// by distance on a graph of degree 2, where the other neighbour is dragged along too (a replayed
// old model, the dissensus attack): their models are far worse on the own data than the own one.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace grapevine::algorithms {

enum class RobustRule { kNone, kClip, kTrim };

// Names as configs spell them: "none", "clip", "trim" (the config schema's allowed values).
std::string_view robustRuleName(RobustRule rule);
std::optional<RobustRule> parseRobustRule(std::string_view name);
const std::vector<std::string_view>& robustRuleNames();

struct RobustOptions {
  RobustRule rule = RobustRule::kNone;
  int byzantine = 1;             // b: hostile neighbours a peer's neighbourhood may hold
  double quarantineScore = 0.5;  // suspicion at which a neighbour is distrusted (0: never)
  // Loss screening: the mean loss of a vector on a fixed sample of the own shard; empty: off.
  std::function<double(std::span<const float>)> lossProbe;
};

// What a peer knows of one neighbour's messages under robust mixing (records, final.json, metrics).
struct NeighbourTrust {
  int neighbour = -1;
  std::uint64_t roundsMixed = 0;    // rounds its message was mixed (robustly)
  std::uint64_t roundsClipped = 0;  // of these, rounds its difference reached beyond the radius
  double clipSum = 0.0;             // sum over those rounds of the fraction beyond the radius
  double score = 0.0;               // suspicion: moving average of the fraction
  bool distrusted = false;          // score reached the quarantine score
  // Loss screening: rounds its vector's loss on the own probe was beyond the slack.
  std::uint64_t roundsLossy = 0;
  // Distrusted before a restart (RobustMixer::restoreTrust), and quarantined again since.
  bool restored = false;
};

class RobustMixer {
 public:
  // Moving average rate of the suspicion score, and the rounds before it may distrust anyone: a
  // neighbour clipped away entirely from its first round reaches the default quarantine score,
  // 0.5, after 11 rounds, and is distrusted after 32.
  static constexpr double kTrustRate = 1.0 / 16.0;
  static constexpr std::uint64_t kTrustMinRounds = 32;
  // The clip radius is kClipSlack times the (n - b)-th smallest distance; suspicion counts what
  // lies beyond kSuspectSlack clip radii.
  static constexpr double kClipSlack = 2.0;
  static constexpr double kSuspectSlack = 2.0;
  // Loss screening counts a neighbour's loss beyond kLossSlack x the own + kLossFloor (nats: a
  // model that fits the probe almost perfectly leaves room for an honest neighbour's noise).
  static constexpr double kLossSlack = 1.5;
  static constexpr double kLossFloor = 0.05;

  explicit RobustMixer(const RobustOptions& options) : options_(options) {}
  RobustRule rule() const { return options_.rule; }

  // One neighbour's term of the round: its vector and its weight in the mix.
  struct Term {
    int neighbour = -1;
    const float* vector = nullptr;
    double weight = 0.0;
  };
  // Measures the round (distances, radius, trust) for the terms (by increasing rank) around the own
  // vector `self`; under clip scales each term's weight by its clip factor and its trust.
  void weigh(std::span<const float> self, std::vector<Term>& terms);
  // The values trim drops at each end among n neighbours' this round: b less the neighbours
  // distrusted already, at most (n - 1) / 2 (a neighbour's value must stay). With none the mix is
  // the plain weighted one (trimming nothing would be the plain mean with other weights).
  std::size_t trimCount(std::size_t n) const {
    return options_.rule == RobustRule::kTrim && n > 0 ? std::min(left_, (n - 1) / 2) : 0;
  }
  bool trimming(std::size_t n) const { return trimCount(n) > 0; }
  // Under trim (BRIDGE-T): out[k] = (mean of self[k] and the neighbours' [k] less the trimCount
  // largest and smallest of these) - self[k].
  void trimmedDifference(std::span<const float> self, const std::vector<Term>& terms,
                         std::span<float> out) const;

  // Neighbours distrusted since the last call (each once, as they stood then), for the engine to
  // quarantine.
  std::vector<NeighbourTrust> takeDistrusted() { return std::exchange(distrusted_, {}); }
  std::vector<NeighbourTrust> trust() const;
  // A restarted peer's trust from its checkpoint (PeerState::trust): the scores and counts go on,
  // and a neighbour distrusted before is distrusted again the first time it is mixed (weight 0
  // under clip, out of the radius; under trim its values enter that one round's trimmed mean, which
  // bounds them) instead of after kTrustMinRounds more rounds.
  void restoreTrust(const std::vector<NeighbourTrust>& trust);
  // (neighbour, fraction beyond the radius) of the last weigh(), for those with one > 0.
  const std::vector<std::pair<int, double>>& clippedThisRound() const { return clipped_; }
  double radius() const { return radius_; }  // tau of the last weigh()
  bool screensLoss() const { return static_cast<bool>(options_.lossProbe); }
  // Loss screening: (neighbour, its loss / the own on the probe) of the last weigh().
  const std::vector<std::pair<int, double>>& lossRatios() const { return lossRatios_; }

 private:
  double trustFactor(const NeighbourTrust& t) const;
  // The fraction of a neighbour's loss beyond the slack (1 for a non-finite loss), noted.
  double lossFraction(NeighbourTrust& t, double ownLoss, std::span<const float> v);

  RobustOptions options_;
  std::map<int, NeighbourTrust> trust_;
  std::vector<NeighbourTrust> distrusted_;
  std::vector<std::pair<int, double>> clipped_;
  std::vector<std::pair<int, double>> lossRatios_;
  std::vector<double> distances_;  // scratch
  std::optional<double> lastRadius_;
  std::size_t left_ = 0;  // b less the neighbours distrusted, as of the last weigh()
  double radius_ = 0.0;
};

// Why the engine quarantines a neighbour robust mixing distrusts (takeDistrusted()): its clipped
// and lossy rounds and its suspicion score, or the checkpoint's trust it was restored with.
std::string quarantineReason(const NeighbourTrust& t);

}  // namespace grapevine::algorithms
