// The dense passes of the gossip algorithms over the whole model (CHOCO's and compressed gt's
// public-copy differences, CHOCO's mix), each one sweep over its buffers, AVX2 where the CPU has
// it.
//
// Element-wise results are exact functions of the inputs (float differences; double sums in term
// order, rounded to float once; no fused multiply-add), so both paths give the same bits. Sums
// over elements (the norms the consensus step and the records use) are double sums in 8 lanes:
// element k goes to lane k % 8, in increasing k, and the lanes end as
// ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)). The portable path follows the same order, so
// it too gives the same bits as the AVX2 one (tests/algorithms/dense_passes_test.cc).
#pragma once

#include <cstddef>
#include <span>

namespace grapevine::algorithms::passes {

// out[k] = x[k] - y[k]; returns sum_k out[k]^2. out may alias neither input.
double subtract(std::span<const float> x, std::span<const float> y, std::span<float> out);

// sum_k (x[k] - y[k])^2 and sum_k y[k]^2, the difference taken in double.
struct DistanceAndNorm {
  double distance2 = 0.0;
  double norm2 = 0.0;
};
DistanceAndNorm distanceAndNorm(std::span<const float> x, std::span<const float> y);

// One neighbour's term of a mix: its replica (as long as x), the coefficient of its difference to
// the own copy, and the weight its squared distance counts with.
struct MixTerm {
  const float* replica = nullptr;
  double coefficient = 0.0;  // CHOCO: g_ij * w_ij
  double weight = 0.0;       // w_ij
};
// x[k] <- fl(x[k] + sum_t coefficient_t (replica_t[k] - y[k])), the sum in double in the terms'
// order; returns sum_t weight_t sum_k (replica_t[k] - y[k])^2 (summed per element over the terms,
// tile by tile: see dense_passes.cc). With no terms x is unchanged and the result is 0.
double mixDifferences(std::span<float> x, std::span<const float> y, std::span<const MixTerm> terms);

// Whether the AVX2 path runs on this machine.
bool vectorized();

// The portable path, whatever the machine (tests compare it with the one in use).
namespace portable {
double subtract(std::span<const float> x, std::span<const float> y, std::span<float> out);
DistanceAndNorm distanceAndNorm(std::span<const float> x, std::span<const float> y);
double mixDifferences(std::span<float> x, std::span<const float> y, std::span<const MixTerm> terms);
}  // namespace portable

}  // namespace grapevine::algorithms::passes
