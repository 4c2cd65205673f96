// Per-peer records, DIR/peer-<rank>.jsonl: one JSON object per line, every output.log_every rounds
// and at each event (suspect, dead, isolated). Fields: round, time, loss, test_accuracy/test_loss
// (when evaluated), bytes_sent, bytes_received, suspect, dead, dropped (by reason), lr, the
// consensus step and its inputs (reportRecord). The last
// line has "final": true and the peer's final evaluation.
#pragma once

#include <cstdint>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "runtime/config/config.h"
#include "runtime/engine/peer_core.h"
#include "runtime/train/workload.h"

namespace grapevine::engine {

class RecordWriter {
 public:
  RecordWriter() = default;
  ~RecordWriter();
  RecordWriter(const RecordWriter&) = delete;
  RecordWriter& operator=(const RecordWriter&) = delete;

  Status open(const std::string& path);
  // A resumed run: keeps the records of rounds <= lastRound already in `path` (a run that went on
  // past its checkpoint wrote more, and a final line), rewritten crash-consistently, and appends.
  Status openResumed(const std::string& path, std::int64_t lastRound);
  // Writes one line and flushes it (a reader tails the file for progress). kUnavailable naming the
  // file when the line did not reach it (or when the writer is not open).
  Status write(const nlohmann::json& record);
  void close();

 private:
  std::FILE* file_ = nullptr;
  std::string path_;
};

// The record of one peer after a round. `revivedNow`: dead neighbours taken back in it ("revived").
nlohmann::json roundRecord(const PeerCore& peer, double seconds, const std::vector<int>& suspects,
                           const std::vector<int>& deadNow,
                           const std::vector<int>& revivedNow = {});

// Round reporting shared by the process driver and the simulator, so both decide alike and write
// the same fields. Each adds its own timing fields to the record: the driver eval_seconds,
// step_seconds, wait_seconds and mix_seconds; the simulator sim_time.
//
// What round `round` (0-based) gets: a progress line every output.log_every rounds and at the last
// round; a test evaluation every workload.eval_every rounds (never when it is 0).
struct RoundReport {
  bool log = false;
  bool evaluate = false;
  // Whether the round gets a record: logged, evaluated, or an event (suspects, deaths, revivals)
  // happened.
  bool due(const std::vector<int>& suspects, const std::vector<int>& deadNow,
           const std::vector<int>& revivedNow = {}) const {
    return log || evaluate || !suspects.empty() || !deadNow.empty() || !revivedNow.empty();
  }
};
RoundReport roundReport(const config::Config& config, std::int64_t round);

// A due round's record: roundRecord's fields, lr, and with `evaluation` (the peer's test
// evaluation of this round; nullptr when not evaluated) test_accuracy (when finite) and test_loss.
// CHOCO and DeepSqueeze add the consensus step (algorithms::StepReport), each when defined:
// consensus_step (mean over the edges mixed this round), consensus_step_proposed (this peer's own
// proposal under `auto`), compressor_quality (measured delta), public_lag (|x - xhat|^2 /
// |xhat|^2), local_consensus_distance (sum_j w_ij |xhat_j - xhat_i|^2 / |xhat_i|^2) and
// step_backoffs (auto, when nonzero).
// Robust mixing's view of each neighbour (final.json "neighbour_trust", the final record):
// [{neighbour, rounds_mixed, rounds_clipped, clip_mean (the mean fraction beyond the radius over
// the clipped rounds), suspicion, quarantined}].
nlohmann::json trustJson(const algorithms::RobustMixer& robust);

nlohmann::json reportRecord(const PeerCore& peer, double seconds, const std::vector<int>& suspects,
                            const std::vector<int>& deadNow,
                            const train::Workload::Eval* evaluation,
                            const std::vector<int>& revivedNow = {});

// The last line of DIR/peer-<rank>.jsonl: roundRecord's fields (no events), "final": true, the
// final evaluation (test_accuracy when finite, test_loss), and when the run stopped because
// training diverged "diverged": true, "diverged_round", "diverged_peer".
nlohmann::json finalRecord(const PeerCore& peer, double seconds, double testAccuracy,
                           double testLoss, const std::optional<Divergence>& divergence);

}  // namespace grapevine::engine
