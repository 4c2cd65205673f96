// Running a config given as YAML text in the simulator from a test (the library, no process):
// fails the test when the run cannot start or a peer fails.
#pragma once

#include <catch2/catch.hpp>
#include <string>
#include <utility>

#include "runtime/sim/simulator.h"
#include "tests/test_util/config.h"

namespace grapevine::test_util {

inline sim::SimResult simulateYaml(const std::string& yaml, int threads,
                                   const std::string& out = "",
                                   const std::string& name = "test.yaml") {
  const auto c = loadYaml(yaml, name);
  auto plan = makePlan(c);
  sim::SimOptions o;
  o.threads = threads;
  o.outDir = out;
  auto r = sim::runSimulation(*plan, o);
  INFO(r.status().toString());
  REQUIRE(r.isOk());
  return std::move(*r);
}

}  // namespace grapevine::test_util
