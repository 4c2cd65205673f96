// Seconds on the steady clock since a time point: the phase timers of the driver and the session's
// records, and the control links' silence.
#pragma once

#include <chrono>

namespace grapevine {

inline double secondsSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace grapevine
