// What one peer's process session writes, and the time accounting that goes into it: the round
// records (DIR/peer-<rank>.jsonl, when due: records.h), the Prometheus metrics
// (monitoring.prometheus_port), and at the end the final record, the model (DIR/model-<rank>.bin)
// and DIR/peer-<rank>.final.json. The process driver (driver.cc) owns one.
// Thread contract: the training thread (the metrics endpoint serves from its own thread what
// update() set: metrics.h).
#pragma once

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "runtime/common/status.h"
#include "runtime/engine/metrics.h"
#include "runtime/engine/records.h"

namespace grapevine::engine {

class PeerCore;
class SessionCheckpoints;
struct RunPlan;

// Where the session's time went (cumulative seconds, in the records and final.json).
struct SessionTimes {
  double step = 0.0;      // local steps + compression (beginRound), the throttle included
  double wait = 0.0;      // waiting for the neighbours' messages
  double mix = 0.0;       // mixing them in (and a round's averaging collectives)
  double eval = 0.0;      // evaluateTest (inline: time-to-accuracy subtracts it)
  double throttle = 0.0;  // network.compute_scale's sleeps
  double average = -1.0;  // the finalize averaging's wall time (-1: none)
  bool averaged = false;  // the finalize averaging was exact (tree or ring)
  // Rounds that waited past algorithm.round_timeout for a message still arriving.
  std::uint64_t roundsWaitedPastTimeout = 0;
};

// What a round's record and metrics tell besides the core's own state.
struct RoundFacts {
  const std::vector<int>& suspects;  // missing this round
  const std::vector<int>& dead;      // dropped this round
  const std::vector<int>& revived;   // heard again this round
  const std::vector<int>& rejoined;  // connected again this round
  std::int64_t skipped = 0;          // rounds skipped to reach this one (catching up)
  double seconds = 0.0;              // since the rounds started
  double checkpointSeconds = 0.0;    // spent writing checkpoints so far
};

// How the rounds ended, for the final files.
struct FinalFacts {
  std::int64_t rounds = 0;  // completed
  bool finished = false;    // ran every round
  bool stopped = false;     // stopped early on request
  bool diverged = false;
  double seconds = 0.0;  // since the rounds started
};

class SessionOutput {
 public:
  // external: the API's caller drives the rounds and reports its own evaluation (addMetrics()).
  SessionOutput(const RunPlan& plan, int rank, bool external);

  // Creates the output folder (output.dir, or `dir` when set).
  Status open(const std::string& dir);
  const std::string& dir() const { return dir_; }
  // monitoring.prometheus_port: serves /metrics until stopMetrics() (or destruction).
  Status startMetrics(const PeerCore& core);
  void stopMetrics() { prometheus_.reset(); }
  // DIR/peer-<rank>.jsonl: afresh, or keeping the records up to round `resumedFrom` (>= 0).
  Status openRecords(std::int64_t resumedFrom);
  // The caller's metrics, for the next record.
  void addMetrics(const nlohmann::json& metrics) { callerMetrics_.update(metrics); }

  // Writes round `round`'s record when it is due (roundReport(), or anything to tell: dead,
  // revived, rejoined, skipped rounds, the caller's metrics), with the test evaluation when due.
  Status report(PeerCore& core, std::int64_t round, const RoundFacts& facts);
  // Sets the Prometheus metrics after a completed round (when serving them).
  void updateMetrics(const PeerCore& core, std::int64_t rounds, const RoundFacts& facts);
  // The final evaluation, record, model and DIR/peer-<rank>.final.json.
  Status writeFinal(PeerCore& core, const FinalFacts& facts, const SessionCheckpoints& checkpoints);

  SessionTimes times;

 private:
  const RunPlan& plan_;
  int rank_;
  bool external_;
  std::string dir_;
  RecordWriter records_;
  nlohmann::json callerMetrics_ = nlohmann::json::object();
  // monitoring.prometheus_port (null when 0), and the test evaluation of the latest record (NaN:
  // none since the last update) for it.
  std::unique_ptr<PeerMetrics> prometheus_;
  double recordAccuracy_ = std::nan(""), recordTestLoss_ = std::nan("");
};

}  // namespace grapevine::engine
