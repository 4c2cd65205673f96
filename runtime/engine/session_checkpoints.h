// One peer process's checkpoints (checkpoint.every, --resume; docs/faults.md): its folder, the
// writer (a background thread writes and syncs each one), what was written and when, and every
// peer's newest checkpoint round as far as this peer knows (CheckpointKnowledge), which the peers
// share with their neighbours so that each keeps the checkpoints a whole-run restart needs.
//
// Thread: the training thread, but merge() (the loop thread: a neighbour's news) and the writer's
// callbacks (its own thread): the knowledge is under a mutex.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "runtime/common/log.h"
#include "runtime/config/config.h"
#include "runtime/engine/checkpoint.h"

namespace grapevine::engine {

class PeerCore;

class SessionCheckpoints {
 public:
  SessionCheckpoints(const config::Config& config, int rank, std::uint32_t incarnation);
  SessionCheckpoints(const SessionCheckpoints&) = delete;
  SessionCheckpoints& operator=(const SessionCheckpoints&) = delete;

  // The run's output folder (DIR/checkpoints/peer-<rank> below it); before anything else.
  void open(const std::string& outDir);
  const std::string& folder() const { return folder_; }
  // This peer's newest checkpoint of `core`'s run that verifies, at round <= maxRound.
  std::optional<LoadedCheckpoint> latest(const PeerCore& core,
                                         std::int64_t maxRound = INT64_MAX) const;
  // The run continues after `round` (a checkpoint of it was restored): this peer has it.
  void restored(std::int64_t round);
  // checkpoint.every: when round `round` is due, hands `core`'s state to the writer (and waits for
  // it to be on disk unless checkpoint.background). A failure is logged by the writer, not fatal.
  void writeIfDue(const PeerCore& core, std::int64_t round);
  // Waits until every checkpoint handed over is written.
  void flush();

  // A neighbour's news of checkpoint rounds (loop thread); a malformed one is logged (at most once
  // a while) and ignored.
  void merge(int from, std::span<const std::uint8_t> bytes);
  // What changed since the last call, in messages of at most `maxBytes`.
  std::vector<std::vector<std::uint8_t>> takeUpdates(std::size_t maxBytes);

  // The round resumed from (-1: none), the newest handed to the writer (-1: none), how many were
  // written, and the training thread's cumulative seconds in writeIfDue().
  std::int64_t resumedFrom() const { return resumedFrom_; }
  std::int64_t lastRound() const { return lastRound_; }
  std::uint64_t written() const { return writer_ ? writer_->written() : 0; }
  double seconds() const { return seconds_; }

 private:
  const config::Config& config_;
  const int rank_;
  const std::uint32_t incarnation_;
  std::string folder_;
  std::int64_t resumedFrom_ = -1;
  std::int64_t lastRound_ = -1;
  double seconds_ = 0.0;
  std::mutex mu_;
  CheckpointKnowledge knowledge_;  // guarded by mu_
  log::Throttle malformedLog_;     // guarded by mu_: malformed checkpoint-round news
  // Created at the first checkpoint; after knowledge_, which it uses, so that it is destroyed
  // first.
  std::unique_ptr<CheckpointWriter> writer_;
};

}  // namespace grapevine::engine
