// How long a round waits for each neighbour's message (algorithm.round_timeout, and with
// algorithm.adaptive_timeout a deadline that follows that neighbour's own arrival times). Both the
// process driver (wall clock) and the simulator (virtual clock) ask it, so they agree on the rule.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <span>

namespace grapevine::engine {

class ArrivalDeadlines {
 public:
  // The samples kept per neighbour, and how many it takes before the deadline adapts.
  static constexpr int kWindow = 32;
  static constexpr int kWarmup = 8;
  // deadline = min(round_timeout, (kFactor x the kQuantile-th of the kept arrivals + kMargin)
  // x 2^(misses in a row)). The 75th percentile, not a higher one: a wait for one neighbour makes
  // this peer's next message late to the others, so every loss or miss adds late samples around
  // it; with the 95th a 3% message loss on a ring filled a tenth of the window with them and the
  // deadlines climbed to round_timeout (sim_test: 196 s against 231 s fixed, 22 s with the 75th).
  static constexpr double kQuantile = 0.75;
  static constexpr double kFactor = 2.0;
  static constexpr double kMargin = 0.25;  // seconds

  // `cap`: algorithm.round_timeout; `adaptive`: algorithm.adaptive_timeout (false: always cap).
  explicit ArrivalDeadlines(double cap = 5.0, bool adaptive = false)
      : cap_(cap), adaptive_(adaptive) {}
  bool adaptive() const { return adaptive_; }

  // j's message of the round arrived `seconds` after this peer began waiting for it (0: it was
  // already there).
  void arrived(int j, double seconds);
  // j's message did not arrive within its deadline (the round went on without it): its next
  // deadline doubles, and again after each further miss, until a message of it arrives in time
  // (then its history, which a slower pace of it has entered meanwhile, sets it again). A paused
  // or suddenly slower neighbour costs a short wait at first, a late one is found again.
  void missed(int j);
  // Seconds after the start of the wait that the round waits for j's message.
  double deadline(int j) const;
  // The latest of the deadlines of `js` (0 for none).
  double latest(std::span<const int> js) const;

 private:
  struct History {
    std::array<double, kWindow> seconds{};
    int count = 0;         // samples kept, at most kWindow
    int next = 0;          // where the next one goes
    double backoff = 1.0;  // 2^(misses in a row)
  };
  void add(int j, double seconds);

  double cap_;
  bool adaptive_;
  std::map<int, History> history_;
};

}  // namespace grapevine::engine
