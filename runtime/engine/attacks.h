// Attackers for tests and robustness studies (`faults:` kinds sign-flip, noise, alie, ipm,
// dissensus, bias, replay; docs/faults.md "Attackers"). An attacking member holds the key and runs
// the protocol correctly, but publishes a crafted vector instead of its own model: the engine hands
// the algorithm the crafted vector where it would hand it x_half (D-PSGD sends it, CHOCO compresses
// its difference to the public copy, which then follows it), while the attacker's own training goes
// on from its true model. Its messages are well-formed and consistent (replica hashes agree), so
// nothing but robust mixing (runtime/algorithms/robust.h) can tell. The attacker itself does not
// mix (its model trains on its own data alone), so what it crafts comes from a model that learns.
//
// With x its own model of the round, m and s the coordinate-wise mean and standard deviation of the
// latest vectors it holds of its neighbours (Algorithm::neighbourViews: m = x, s = 0 without any)
// and a = the item's scale:
//   sign-flip  -a x                      (the model with every sign flipped; a = 1)
//   noise      x + a rms(x) N(0, 1)      (Gaussian noise as large as the model's own values; a = 1)
//   alie       m - a s                   ("A Little Is Enough", Baruch et al. 2019: inside the
//                                        neighbours' spread, z = a = 1)
//   ipm        -a m                      (inner product manipulation, Xie et al. 2020; a = 0.1)
//   dissensus  m - a (x - m)             (He et al. 2022's dissensus, broadcast form: the
//                                        neighbours' mean pushed away from the attacker's own
//                                        consensus-following model; a = 1)
//   bias       x + a                     (a constant added to every value; a = 0.1)
//   replay     x of the attack's first round, every round (a stale model)
// The noise is deterministic: seeded by run.seed, the rank and the round (the simulator and a real
// peer send the same bits).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "runtime/config/config.h"

namespace grapevine::engine {

class Attacker {
 public:
  // `kind` is an attack (config::isAttack).
  Attacker(config::FaultKind kind, double scale, std::uint64_t seed, int rank)
      : kind_(kind), scale_(scale), seed_(seed), rank_(rank) {}
  config::FaultKind kind() const { return kind_; }

  // out <- what this peer publishes instead of x this round (out as long as x).
  void craft(std::span<const float> x, const std::vector<std::span<const float>>& neighbours,
             std::int64_t round, std::span<float> out);

 private:
  config::FaultKind kind_;
  double scale_;
  std::uint64_t seed_;
  int rank_;
  std::vector<float> replay_;  // replay: the model of the first round
  std::vector<double> mean_, spread_;
};

}  // namespace grapevine::engine
