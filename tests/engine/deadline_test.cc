// algorithm.adaptive_timeout (issue 42): each neighbour's deadline follows its own arrival times
// (runtime/engine/deadline.h), in the driver and the simulator alike.
#include "runtime/engine/deadline.h"

#include <catch2/catch.hpp>
#include <vector>

using grapevine::engine::ArrivalDeadlines;

TEST_CASE("a fixed deadline is round_timeout, whatever arrives", "[deadline]") {
  ArrivalDeadlines d(5.0, false);
  for (int k = 0; k < 40; ++k) d.arrived(1, 0.01);
  d.missed(1);
  CHECK(d.deadline(1) == 5.0);
  CHECK(d.deadline(7) == 5.0);
  const std::vector<int> none;
  CHECK(d.latest(none) == 0.0);
}

TEST_CASE("an adaptive deadline follows each neighbour's 75th percentile", "[deadline]") {
  ArrivalDeadlines d(5.0, true);
  // Before kWarmup arrivals: round_timeout.
  for (int k = 0; k < ArrivalDeadlines::kWarmup - 1; ++k) d.arrived(1, 0.1);
  CHECK(d.deadline(1) == 5.0);
  d.arrived(1, 0.1);
  CHECK(d.deadline(1) == Approx(2 * 0.1 + 0.25));
  // Each neighbour its own: a slower one gets a longer deadline, capped at round_timeout.
  for (int k = 0; k < 10; ++k) d.arrived(2, 1.0);
  CHECK(d.deadline(2) == Approx(2 * 1.0 + 0.25));
  for (int k = 0; k < 10; ++k) d.arrived(3, 4.0);
  CHECK(d.deadline(3) == 5.0);
  const std::vector<int> both = {1, 2};
  CHECK(d.latest(both) == Approx(2.25));
  // Eight outliers in 32 are above the 75th percentile (the 24th of 32); nine are not.
  for (int k = 0; k < 24; ++k) d.arrived(4, 0.05);
  for (int k = 0; k < 8; ++k) d.arrived(4, 2.0);
  CHECK(d.deadline(4) == Approx(2 * 0.05 + 0.25));
  d.arrived(4, 2.0);
  CHECK(d.deadline(4) == Approx(2 * 2.0 + 0.25));
  // Only the last 32 count: the outliers leave the window.
  for (int k = 0; k < 32; ++k) d.arrived(4, 0.05);
  CHECK(d.deadline(4) == Approx(0.35));
}

TEST_CASE("misses in a row double the deadline until a message arrives in time", "[deadline]") {
  ArrivalDeadlines d(5.0, true);
  for (int k = 0; k < 10; ++k) d.arrived(1, 0.05);
  const double base = 2 * 0.05 + 0.25;
  CHECK(d.deadline(1) == Approx(base));
  d.missed(1);
  CHECK(d.deadline(1) == Approx(2 * base));
  d.missed(1);
  CHECK(d.deadline(1) == Approx(4 * base));
  for (int k = 0; k < 10; ++k) d.missed(1);
  CHECK(d.deadline(1) == 5.0);  // capped
  // It came back: its history sets the deadline again.
  d.arrived(1, 0.05);
  CHECK(d.deadline(1) == Approx(base));
  // A miss before the warm-up ends changes nothing (the deadline is round_timeout anyway).
  d.missed(9);
  CHECK(d.deadline(9) == 5.0);
  for (int k = 0; k < 8; ++k) d.arrived(9, 0.0);
  CHECK(d.deadline(9) == Approx(0.25));
}
