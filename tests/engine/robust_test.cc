// Robust mixing (runtime/algorithms/robust.h) and the attackers (runtime/engine/attacks.h), on
// vectors small enough to check by hand: the clip radius is the (n - b)-th smallest distance, a far
// neighbour's weight shrinks to radius / distance, trust builds over rounds (never one), a
// distrusted neighbour leaves b - 1 to find, BRIDGE-T trims b values of each end of the neighbours'
// and keeps the own, loss screening counts a neighbour far worse on the own probe, and each attack
// publishes what docs/faults.md says.
#include "runtime/algorithms/robust.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <span>
#include <vector>

#include "runtime/engine/attacks.h"

using namespace grapevine;
using algorithms::RobustMixer;
using algorithms::RobustOptions;
using algorithms::RobustRule;

namespace {

RobustMixer mixer(RobustRule rule, int b = 1, double quarantine = 0.8) {
  RobustOptions o;
  o.rule = rule;
  o.byzantine = b;
  o.quarantineScore = quarantine;
  return RobustMixer(o);
}

}  // namespace

TEST_CASE("clip: the radius is twice the (n - b)-th smallest distance; farther ones shrink to it",
          "[robust]") {
  auto m = mixer(RobustRule::kClip);
  const std::vector<float> self = {0, 0};
  const std::vector<float> a = {3, 4};        // distance 5
  const std::vector<float> b = {0, 1};        // 1
  const std::vector<float> c = {-2, 0};       // 2
  const std::vector<float> far = {600, 800};  // 1000
  std::vector<RobustMixer::Term> terms = {
      {1, a.data(), 0.2}, {2, b.data(), 0.2}, {3, c.data(), 0.2}, {4, far.data(), 0.2}};
  m.weigh(self, terms);
  // Distances 5, 1, 2, 1000; b = 1: twice the 3rd smallest, 10.
  CHECK(m.radius() == Approx(10.0));
  CHECK(terms[0].weight == Approx(0.2));
  CHECK(terms[1].weight == Approx(0.2));
  CHECK(terms[2].weight == Approx(0.2));
  CHECK(terms[3].weight == Approx(0.2 * 10.0 / 1000.0));
  REQUIRE(m.clippedThisRound().size() == 1);
  CHECK(m.clippedThisRound()[0].first == 4);
  CHECK(m.clippedThisRound()[0].second == Approx(1.0 - 10.0 / 1000.0));
  // b = 2: the radius is twice the 2nd smallest, 4; the neighbour at 5 is clipped too.
  auto two = mixer(RobustRule::kClip, 2);
  std::vector<RobustMixer::Term> again = {
      {1, a.data(), 0.2}, {2, b.data(), 0.2}, {3, c.data(), 0.2}, {4, far.data(), 0.2}};
  two.weigh(self, again);
  CHECK(two.radius() == Approx(4.0));
  CHECK(again[0].weight == Approx(0.2 * 4.0 / 5.0));
  // trim weighs nothing down; it only measures.
  auto t = mixer(RobustRule::kTrim);
  std::vector<RobustMixer::Term> same = {
      {1, a.data(), 0.2}, {2, b.data(), 0.2}, {3, c.data(), 0.2}, {4, far.data(), 0.2}};
  t.weigh(self, same);
  CHECK(same[3].weight == 0.2);
  CHECK(t.clippedThisRound().size() == 1);
}

TEST_CASE(
    "trust: a neighbour far beyond the radius round after round is distrusted, not in one "
    "round, and then b - 1 are left to find",
    "[robust]") {
  auto m = mixer(RobustRule::kClip);
  const std::vector<float> self = {0};
  const std::vector<float> near = {1};
  const std::vector<float> farther = {7};  // beyond the radius (6): clipped, never suspected
  const std::vector<float> hostile = {1000};
  int distrustedAt = -1;
  for (int round = 0; round < 100 && distrustedAt < 0; ++round) {
    std::vector<RobustMixer::Term> terms = {
        {1, near.data(), 0.25}, {2, farther.data(), 0.25}, {3, hostile.data(), 0.25}};
    m.weigh(self, terms);
    CHECK(m.radius() == Approx(14.0));  // twice the 2nd smallest distance, 7
    CHECK(terms[1].weight == 0.25);
    const auto out = m.takeDistrusted();
    if (!out.empty()) {
      REQUIRE(out.size() == 1);
      CHECK(out[0].neighbour == 3);
      CHECK(out[0].distrusted);
      CHECK(out[0].roundsMixed == RobustMixer::kTrustMinRounds);
      distrustedAt = round;
    }
    // Its weight shrinks once suspicion passes half the quarantine score.
    if (round == 5) CHECK(terms[2].weight == Approx(0.25 * 14.0 / 1000.0));
    if (round == 30) CHECK(terms[2].weight < 0.25 * 14.0 / 1000.0 * 0.5);
  }
  // Not before kTrustMinRounds rounds (the moving average of 0.972, the fraction beyond 2 radii,
  // passes 0.8 in round 26), then at once.
  CHECK(distrustedAt == static_cast<int>(RobustMixer::kTrustMinRounds) - 1);
  for (const auto& t : m.trust()) {
    INFO("neighbour " << t.neighbour);
    CHECK(t.distrusted == (t.neighbour == 3));
    if (t.neighbour == 2) CHECK(t.score == 0.0);
  }
  // With the hostile one out, b = 1 is used up: the radius is twice the largest distance.
  const std::vector<float> farthest = {30};
  std::vector<RobustMixer::Term> rest = {{1, near.data(), 0.25}, {2, farthest.data(), 0.25}};
  m.weigh(self, rest);
  CHECK(m.radius() == Approx(60.0));
  CHECK(rest[1].weight == 0.25);
  // At 100, 0.72 of the difference lies beyond 2 radii: suspected, never distrusted.
  auto some = mixer(RobustRule::kClip);
  const std::vector<float> odd = {100};
  for (int round = 0; round < 300; ++round) {
    std::vector<RobustMixer::Term> terms = {
        {1, near.data(), 0.25}, {2, farther.data(), 0.25}, {3, odd.data(), 0.25}};
    some.weigh(self, terms);
    CHECK(some.takeDistrusted().empty());
  }
  CHECK(some.trust().back().score == Approx(0.72).margin(1e-3));
  // quarantine 0: never distrusted.
  auto never = mixer(RobustRule::kClip, 1, 0.0);
  for (int round = 0; round < 200; ++round) {
    std::vector<RobustMixer::Term> terms = {{1, near.data(), 0.25}, {3, hostile.data(), 0.25}};
    never.weigh(self, terms);
    CHECK(never.takeDistrusted().empty());
  }
}

TEST_CASE("clip with no more neighbours than b keeps the last radius (0 before any)", "[robust]") {
  auto m = mixer(RobustRule::kClip);
  const std::vector<float> self = {0};
  const std::vector<float> v = {8};
  std::vector<RobustMixer::Term> one = {{1, v.data(), 0.5}};
  m.weigh(self, one);
  CHECK(m.radius() == 0.0);
  CHECK(one[0].weight == 0.0);
  const std::vector<float> w = {2};
  std::vector<RobustMixer::Term> two = {{1, v.data(), 0.3}, {2, w.data(), 0.3}};
  m.weigh(self, two);
  CHECK(m.radius() == Approx(4.0));
  CHECK(two[0].weight == Approx(0.15));
  std::vector<RobustMixer::Term> alone = {{1, v.data(), 0.5}};
  m.weigh(self, alone);
  CHECK(m.radius() == Approx(4.0));
  CHECK(alone[0].weight == Approx(0.25));
}

TEST_CASE(
    "loss screening: a neighbour close by distance but far worse on the own probe is "
    "distrusted after 32 rounds, one within the slack never",
    "[robust]") {
  RobustOptions o;
  o.rule = RobustRule::kClip;
  o.quarantineScore = 0.5;
  // The loss of a vector: 1 + 100 x its first value (the second sets its distance, about 1).
  int probes = 0;
  o.lossProbe = [&probes](std::span<const float> v) {
    ++probes;
    return 1.0 + 100.0 * static_cast<double>(v[0]);
  };
  RobustMixer m(o);
  CHECK(m.screensLoss());
  const std::vector<float> self = {0, 0};
  const std::vector<float> honest = {0.004f, 1};  // loss 1.4: within 1.5 x 1 + 0.05
  const std::vector<float> worse = {0.03f, 1};    // loss 4: 1 - 1.55 / 4 counts
  const std::vector<float> other = {0.001f, -1};
  std::uint64_t distrustedAt = 0;
  for (std::uint64_t round = 1; round <= 40 && distrustedAt == 0; ++round) {
    std::vector<RobustMixer::Term> terms = {
        {1, honest.data(), 0.3}, {2, worse.data(), 0.3}, {3, other.data(), 0.3}};
    m.weigh(self, terms);
    // Its distance never stands out: nothing is clipped, and the honest weights stay.
    CHECK(m.clippedThisRound().empty());
    CHECK(terms[0].weight == Approx(0.3));
    CHECK(terms[2].weight == Approx(0.3));
    REQUIRE(m.lossRatios().size() == 3);
    CHECK(m.lossRatios()[1].first == 2);
    CHECK(m.lossRatios()[1].second == Approx(4.0));
    // Once its suspicion passes half the quarantine score its weight shrinks.
    if (round == 1) CHECK(terms[1].weight == Approx(0.3));
    if (round == 31) CHECK(terms[1].weight < 0.3 * 0.5);
    for (const auto& t : m.takeDistrusted()) {
      CHECK(t.neighbour == 2);
      distrustedAt = round;
    }
  }
  CHECK(probes == 4 * static_cast<int>(distrustedAt));  // the own vector and each neighbour's
  CHECK(distrustedAt == RobustMixer::kTrustMinRounds);
  const auto trust = m.trust();
  REQUIRE(trust.size() == 3);
  CHECK(trust[0].roundsLossy == 0);
  CHECK(trust[1].roundsLossy == distrustedAt);
  CHECK(trust[1].score > 0.5);
  CHECK(trust[1].roundsClipped == 0);
  CHECK_FALSE(trust[0].distrusted);
  CHECK_FALSE(trust[2].distrusted);
}

TEST_CASE("loss screening: a non-finite loss counts whole, a non-finite own loss tells nothing",
          "[robust]") {
  RobustOptions o;
  o.rule = RobustRule::kClip;
  o.lossProbe = [](std::span<const float> v) { return static_cast<double>(v[0]); };
  RobustMixer m(o);
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> self = {1.0f}, broken = {inf}, fine = {1.2f};
  std::vector<RobustMixer::Term> terms = {{1, broken.data(), 0.3}, {2, fine.data(), 0.3}};
  m.weigh(self, terms);
  auto trust = m.trust();
  CHECK(trust[0].roundsLossy == 1);
  CHECK(trust[0].score == Approx(RobustMixer::kTrustRate));
  CHECK(trust[1].roundsLossy == 0);
  const std::vector<float> nanSelf = {std::numeric_limits<float>::quiet_NaN()};
  std::vector<RobustMixer::Term> again = {{2, fine.data(), 0.3}};
  m.weigh(nanSelf, again);
  CHECK(m.trust()[1].roundsLossy == 0);
  CHECK(m.lossRatios().empty());
  // Without a probe nothing is evaluated and no ratio is kept.
  RobustOptions plain;
  plain.rule = RobustRule::kClip;
  RobustMixer p(plain);
  CHECK_FALSE(p.screensLoss());
}

TEST_CASE("trim: BRIDGE-T drops b of each end of the neighbours' values and keeps the own",
          "[robust]") {
  auto m = mixer(RobustRule::kTrim);
  const std::vector<float> self = {1, 10};
  const std::vector<float> a = {2, -100}, b = {3, 11}, c = {1000, 12}, d = {4, 13};
  std::vector<RobustMixer::Term> terms = {
      {1, a.data(), 0.2}, {2, b.data(), 0.2}, {3, c.data(), 0.2}, {4, d.data(), 0.2}};
  m.weigh(self, terms);
  REQUIRE(m.trimming(4));
  std::vector<float> out(2);
  m.trimmedDifference(self, terms, out);
  // Coordinate 0: neighbours 2, 3, 1000, 4 -> 3, 4 stay; (1 + 3 + 4) / 3 - 1.
  CHECK(out[0] == Approx(8.0 / 3.0 - 1.0));
  // Coordinate 1: -100, 11, 12, 13 -> 11, 12; (10 + 11 + 12) / 3 - 10.
  CHECK(out[1] == Approx(1.0));
  // Two neighbours: nothing can be trimmed (one must stay): the plain mix.
  CHECK_FALSE(m.trimming(2));
  CHECK(m.trimming(3));
  CHECK_FALSE(mixer(RobustRule::kClip).trimming(5));
}

TEST_CASE("each attack publishes what docs/faults.md says", "[robust]") {
  using config::FaultKind;
  const std::vector<float> x = {1, -2, 3};
  const std::vector<float> n1 = {0, 0, 0}, n2 = {2, 4, 6};  // mean {1, 2, 3}, sd {1, 2, 3}
  const std::vector<std::span<const float>> views = {n1, n2};
  std::vector<float> out(3);
  const auto craft = [&](FaultKind kind, double scale, std::int64_t round = 0) {
    engine::Attacker a(kind, scale, 7, 2);
    a.craft(x, views, round, out);
    return out;
  };
  CHECK(craft(FaultKind::kSignFlip, 1) == std::vector<float>{-1, 2, -3});
  CHECK(craft(FaultKind::kAlie, 1) == std::vector<float>{0, 0, 0});
  CHECK(craft(FaultKind::kAlie, 0.5) == std::vector<float>{0.5, 1, 1.5});
  CHECK(craft(FaultKind::kIpm, 0.5) == std::vector<float>{-0.5, -1, -1.5});
  CHECK(craft(FaultKind::kDissensus, 1) == std::vector<float>{1, 6, 3});
  CHECK(craft(FaultKind::kBias, 0.25) == std::vector<float>{1.25, -1.75, 3.25});
  // Noise: deterministic per (seed, rank, round), another round another draw, about rms(x) large.
  const auto a = craft(FaultKind::kNoise, 1, 4);
  CHECK(craft(FaultKind::kNoise, 1, 4) == a);
  CHECK(craft(FaultKind::kNoise, 1, 5) != a);
  CHECK(a != x);
  // Replay: the first round's model, whatever comes later.
  engine::Attacker replay(FaultKind::kReplay, 0, 7, 2);
  replay.craft(x, views, 0, out);
  const std::vector<float> later = {9, 9, 9};
  replay.craft(later, views, 1, out);
  CHECK(out == x);
  // Without neighbours the statistics are its own model's.
  engine::Attacker lone(FaultKind::kIpm, 1, 7, 2);
  lone.craft(x, {}, 0, out);
  CHECK(out == std::vector<float>{-1, 2, -3});
}
