// Platform-independent random draws for the seeded generators.
//
// std::mt19937_64's output sequence is fixed by the standard, but the distributions
// (std::uniform_int_distribution, ...) are not: libstdc++ and libc++ map the same bits to different
// values. Graphs must be identical for a seed on every platform, so the range mappings live here.
#pragma once

#include <cstdint>
#include <random>

#include "runtime/common/random_bits.h"

namespace grapevine::topology::detail {

// Uniform integer in [0, bound), bound > 0: rejection sampling, so there is no modulo bias.
inline std::uint64_t uniformBelow(std::mt19937_64& rng, std::uint64_t bound) {
  // Values below `threshold` would make the low residues more likely; 2^64 mod bound of them.
  const std::uint64_t threshold = (0 - bound) % bound;
  for (;;) {
    const std::uint64_t x = rng();
    if (x >= threshold) return x % bound;
  }
}

// Uniform double in [0, 1) with 53 random bits.
inline double uniform01(std::mt19937_64& rng) { return unitInterval(rng()); }

}  // namespace grapevine::topology::detail
