// Configs and run plans from inline YAML, for the engine, driver and simulator tests. The
// environment is ignored (GRAPEVINE_* variables of the shell running the tests change nothing);
// `name` is the file name diagnostics show, under the build folder.
#pragma once

#include <catch2/catch.hpp>
#include <memory>
#include <string>
#include <vector>

#include "runtime/config/loader.h"
#include "runtime/engine/setup.h"

namespace grapevine::test_util {

inline config::Config loadYaml(const std::string& yaml, const std::string& name) {
  config::LoadOptions o;
  o.useEnvironment = false;
  auto r = config::loadString(yaml, std::string(GRAPEVINE_BINARY_DIR) + "/" + name, o);
  INFO(config::formatDiagnostics(r.diagnostics));
  REQUIRE(r.ok());
  return r.config;
}

// Every peer of a plan, ranks 0..n-1, incarnation 0 (for runLockstep).
inline std::vector<std::unique_ptr<engine::PeerCore>> makePeers(const engine::RunPlan& plan) {
  std::vector<std::unique_ptr<engine::PeerCore>> peers;
  for (int r = 0; r < plan.config.peers.count; ++r) {
    auto p = engine::makePeer(plan, r, 0);
    INFO(p.status().toString());
    REQUIRE(p.isOk());
    peers.push_back(std::move(*p));
  }
  return peers;
}

inline std::shared_ptr<engine::RunPlan> makePlan(const config::Config& c) {
  auto plan = engine::makeRunPlan(c);
  INFO(plan.status().toString());
  REQUIRE(plan.isOk());
  return *plan;
}

// The plan of a YAML config (into *plan, which the peers refer to) and every peer of it.
inline std::vector<std::unique_ptr<engine::PeerCore>> peersFromYaml(
    const std::string& yaml, const std::string& name, std::shared_ptr<engine::RunPlan>* plan) {
  *plan = makePlan(loadYaml(yaml, name));
  return makePeers(**plan);
}

}  // namespace grapevine::test_util
