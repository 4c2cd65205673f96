// faults.events in the simulator, by round (docs/faults.md "Fault schedules"): before each round,
// who is down (paused, restarting, killed), which links are down, who starts or stops corrupting or
// attacking, the kills and restarts (a restarted peer is a new core of the next incarnation from
// its in-memory checkpoint), and who hears whose heartbeats (Liveness); after each round, the
// in-memory checkpoints a restart will come back from and the clocks of the peers that are down.
// Each executed event goes to summary.json's "faults" (log()).
//
// Thread: the simulation's calling thread, between the parallel phases.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <span>
#include <utility>
#include <vector>

#include "runtime/common/status.h"
#include "runtime/engine/peer_core.h"
#include "runtime/engine/setup.h"
#include "runtime/sim/liveness.h"

namespace grapevine::sim {

class FaultRunner {
 public:
  // `peers` and `liveness` are the simulation's (a restart replaces a core in `peers`).
  FaultRunner(const engine::RunPlan& plan, std::vector<std::unique_ptr<engine::PeerCore>>& peers,
              Liveness& liveness);

  // Before round t; `clocks`: each peer's clock at the end of its last round. An error when a
  // restart has no checkpoint to come back from.
  Status before(std::int64_t t, std::span<const double> clocks);
  // After round t: the in-memory checkpoints (every checkpoint.every rounds, of the peers a
  // restart will bring back).
  void after(std::int64_t t);

  bool down(std::size_t i) const { return down_[i] != 0; }      // this round
  bool killed(std::size_t i) const { return killed_[i] != 0; }  // for good
  bool live(std::size_t i) const { return !down_[i] && !killed_[i]; }
  bool linkDown(int a, int b) const {
    return linksDown_.count(std::pair(std::min(a, b), std::max(a, b))) != 0;
  }
  // The executed events (engine::faultEventJson's fields, executed_at_round; a restart's "back").
  const nlohmann::json& log() const { return log_; }

 private:
  // The ranks that have `p` as a neighbour.
  std::vector<int> neighboursOf(int p) const;
  Status restart(const config::FaultEvent& e, std::int64_t t);
  // Who hears whose heartbeats this round (see simulator.cc's use).
  void updateHearing(std::span<const double> clocks);
  void note(const config::FaultEvent& e, std::int64_t t, const engine::PeerState* restored);

  const engine::RunPlan& plan_;
  const std::vector<config::FaultEvent>& events_;
  std::vector<std::unique_ptr<engine::PeerCore>>& peers_;
  Liveness& liveness_;
  std::vector<char> down_, killed_;
  std::set<std::pair<int, int>> linksDown_;  // (a, b) with a < b
  std::vector<std::optional<engine::PeerState>> saved_;
  std::vector<std::uint32_t> incarnation_;  // per peer: its restarts
  nlohmann::json log_ = nlohmann::json::array();
};

}  // namespace grapevine::sim
