// The in-process simulator behind `grapevine sim`: every peer of a run in one process, on a pool of
// worker threads (one per core, not one per peer), exchanging the exact wire bytes of a real run
// (same PeerCore, algorithms, compressors and codec as `grapevine peer`), with time kept on a
// virtual clock driven by a link model (link_model.h) instead of a network.
//
// A round t, all peers together:
//   1. in parallel, each peer i: beginRound(t) (local steps + its message); its compute time c_i is
//      network.compute_ms * local_steps when compute_ms > 0, else the thread CPU time of
//      beginRound, times network.compute_scale. The message leaves at ready_i = clock_i + c_i.
//   2. in parallel over receivers i: the messages of every sender j with i in sendTo(j) are handed
//   to
//      i in increasing j (the order runLockstep() uses, so the models are bit-identical to it),
//      except lost ones (network.loss_percent, seeded per edge and round; never delivered later:
//      the engine sees a sequence gap and resyncs, as after a real loss).
//   3. in parallel, each peer: [precomputeGradient() when algorithm.overlap] and endRound(); its
//   clock
//      becomes max(ready_i, max_j ready_j + delay_ji) where delay = latency + jitter draw +
//      bytes * 8 / bandwidth, and at least ready_i + algorithm.round_timeout when a message was
//      lost (a real peer waits out its deadline). For peers in step (equal clocks) this is the
//      round time compute + max incoming delay; a slow neighbour delays its neighbours as it would
//      on a network.
//      With node caps (network.node_bandwidth_mbit), each peer's interface is shared: a sender's
//      messages of the round leave through it together, a receiver's arrive through it together,
//      max-min fairly among the transfers in progress and each within its link's bandwidth
//      (sim::shareInterface), so a ring peer capped at its links' rate takes twice as long to send
//      its two messages as without the cap. Transfers of different rounds never share.
//
// Determinism: models, counters and records (except wall-clock fields) are a function of the config
// and run.seed only, whatever the thread count; so is the simulated time when compute_ms > 0.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "runtime/common/status.h"
#include "runtime/engine/setup.h"
#include "runtime/engine/summary.h"

namespace grapevine::sim {

struct SimOptions {
  int threads = 0;          // worker threads, caller included; 0: one per core
  std::string outDir;       // where to write records, models and summary.json; "": write nothing
  bool writeModels = true;  // DIR/model-<rank>.bin and DIR/peer-<rank>.final.json, as a real run
  // Called on the calling thread after every round with the round index and the largest peer clock.
  std::function<void(std::int64_t round, double simulatedSeconds)> onRound;
};

struct SimResult {
  std::vector<engine::PeerResult> peers;  // per rank, with final models
  std::vector<double> clock;              // per rank: simulated seconds at the end of the run
  double simulatedSeconds = 0.0;          // max of clock
  double wallSeconds = 0.0;               // the rounds and the final evaluation
  double roundsWallSeconds = 0.0;         // the rounds alone
  int threads = 0;
  std::uint64_t messagesLost = 0;
  std::uint64_t messagesFaultDropped = 0;  // taken by faults.events (links down, receivers down)
  std::uint64_t rssBeforePeers = 0;        // bytes, after the shared data was loaded
  std::uint64_t rssAfterRounds = 0;        // bytes, before the final results were collected
  nlohmann::json summary;  // engine::makeSummary + simulated_seconds and a "sim" block
  // Training diverged: the run stopped in that round (the peers that diverged, or every peer when
  // it showed after the local steps, abandoned it and keep their last finite model); the message
  // (divergenceMessage with the exact consensus distance) is also the summary's diverged_message.
  std::optional<engine::Divergence> divergence;
  std::string divergenceMessage;
};

// Runs plan.config.run.rounds rounds of plan.config.peers.count peers, or until training diverges
// (SimResult::divergence; still a result, with models, records and summary). Returns the first
// error of any peer (by rank) from construction or beginRound, or an I/O error writing outDir.
Result<SimResult> runSimulation(const engine::RunPlan& plan, const SimOptions& options);

// Resident set size of this process in bytes (0 when /proc is not readable).
std::uint64_t residentBytes();

}  // namespace grapevine::sim
