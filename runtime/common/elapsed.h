// Seconds on the steady clock since a time point: every elapsed-time reading of the runtime and the
// commands (phase timers, records, silences, log stamps, benchmarks).
#pragma once

#include <chrono>

namespace grapevine {

inline double secondsSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace grapevine
