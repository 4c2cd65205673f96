// network.jitter_ms has one meaning in the simulator (runtime/sim/link_model.h), the emulator
// (runtime/netemu/link_model.h) and the docs: an extra one-way delay drawn uniformly from
// [0, jitter) and added to the latency. The latency stays the floor (a link is never faster than
// latency_ms) and the mean one-way delay is latency + jitter / 2; the simulator's summary line
// prints it as "latency ms (+0-jitter ms)".
//
// Both models turn their random bits into a delay through jitterDelay(), so the same bits give the
// same delay in both; where the bits come from is each model's own (the simulator hashes the edge
// and round so draws do not depend on thread order, the emulator keeps one stream per link).
#pragma once

#include <cstdint>

#include "runtime/common/random_bits.h"

namespace grapevine {

// The extra one-way delay for `jitter` (any unit; the result has the same one) and 64 random bits:
// uniform in [0, jitter). 0 when jitter <= 0.
inline double jitterDelay(double jitter, std::uint64_t bits) {
  return jitter > 0.0 ? jitter * unitInterval(bits) : 0.0;
}

}  // namespace grapevine
