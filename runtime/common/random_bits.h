// Turning random bits into numbers, one way everywhere (topology's random graphs, the training
// RNG, the link models' jitter), so the same bits give the same value in every library.
#pragma once

#include <cstdint>

namespace grapevine {

// 64 random bits -> a uniform double in [0, 1): the top 53 bits, exactly representable.
inline double unitInterval(std::uint64_t bits) {
  return static_cast<double>(bits >> 11) * 0x1.0p-53;
}

}  // namespace grapevine
