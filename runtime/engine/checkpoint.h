// Checkpoints: one peer's whole state (PeerState) in one file, so that a run killed or preempted
// can continue exactly (`grapevine peer|launch --resume`).
//
// Layout: FOLDER/round-<R, 10 digits>.ckpt, FOLDER = <checkpoint.dir or output.dir/checkpoints>/
// rank-<r>. A file is
//   "GVCKPT2\n"                      8-byte magic (the format version is its 7th byte)
//   u64 header bytes, header         JSON: rank, round, incarnation, workload, algorithm, peers,
//                                    parameters, workload step, divergence history (doubles as
//                                    their IEEE bit patterns, exact and NaN-safe), counters,
//                                    robust mixing's trust per neighbour (when it has any)
//   sections                         u32 name bytes, name, u64 count, count float32 values
//   u64 checksum                     CRC32C of every byte before it (version 1, still read:
//                                    FNV-1a 64)
// all integers little-endian (floats as the host lays them: little-endian hosts only, as the
// wire). Written crash-consistently (writeFileAtomically: temporary file, fsync, rename, directory
// fsync); a reader verifies magic, sizes and checksum and refuses a torn or corrupt file, and
// latestCheckpoint() then falls back to the previous one.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "runtime/common/status.h"
#include "runtime/config/config.h"
#include "runtime/engine/peer_core.h"

namespace grapevine::engine {

// What a checkpoint must match to be loaded into a peer (another config's checkpoint is refused
// naming the field).
struct CheckpointIdentity {
  int rank = 0;
  int peers = 0;
  std::string workload;
  std::string algorithm;
  std::uint64_t parameters = 0;
  // The run's identity: (key path, effective value) of every key the peers must agree on
  // (mustAgreeKey: graph, algorithm, compression, model shape, run.seed, ...) and of optimizer.*.
  // A checkpoint written under another value of one of them is another run's (checkpoints of
  // builds before this field carry none and are not compared).
  std::vector<std::pair<std::string, std::string>> config;
};
CheckpointIdentity checkpointIdentity(const config::Config& config, const PeerCore& core);

// This rank's checkpoint folder: checkpoint.dir (relative to the working directory, as output.dir
// is) or <outDir>/checkpoints, then rank-<rank>.
std::string checkpointFolder(const config::Config& config, const std::string& outDir, int rank);

// Writes round state.round's checkpoint into `folder` (created when missing), then deletes the
// ones checkpointsToDelete() names. kUnavailable naming the file on an I/O error (the previous
// checkpoints stay).
Status writeCheckpoint(const std::string& folder, const CheckpointIdentity& id,
                       std::uint32_t incarnation, const PeerState& state, int keep,
                       std::int64_t everyoneHas = INT64_MAX);

// Retention: of `rounds` (ascending), the ones to delete. All but the newest `keep`, except that
// the newest one at or below `everyoneHas` (the newest round every peer is known to have a
// checkpoint of, CheckpointKnowledge) and everything after it stay: a whole-run restart resumes
// from the newest round every peer has, which is at or after that one, and peers that went on
// training after a neighbour crashed must still have it. With no round at or below `everyoneHas`
// (-1: some peer's is not known yet) nothing is deleted. INT64_MAX: the newest `keep` only.
std::vector<std::int64_t> checkpointsToDelete(const std::vector<std::int64_t>& rounds, int keep,
                                              std::int64_t everyoneHas);

// Writes checkpoints on a thread of its own, one at a time, so that training goes on while a file
// is written and synced (a peer's state is tens of MB; eight peers syncing at once took 1.3 s a
// checkpoint here, a fifth of the run at one checkpoint every 50 rounds). A checkpoint is on disk
// (and `written` has run) some time after write() returned; the training thread waits only when
// the previous one is not written yet. A failed write is logged, not fatal.
class CheckpointWriter {
 public:
  // `everyoneHas` (writeCheckpoint's) is asked before each write; `written` runs after each
  // successful one, with its round. Both on the writer's thread.
  CheckpointWriter(std::string folder, CheckpointIdentity id, std::uint32_t incarnation, int keep,
                   std::function<std::int64_t()> everyoneHas,
                   std::function<void(std::int64_t)> written);
  // Writes what is pending, then stops.
  ~CheckpointWriter();
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;
  // Once the previous checkpoint is written, copies the core's state (between rounds) into the
  // writer's one state, whose memory is reused from checkpoint to checkpoint (a fresh copy of
  // tens of MB cost the training thread 60 ms here), and hands it over.
  void write(const PeerCore& core);
  // Returns once every checkpoint handed over is written (or failed).
  void flush();
  // Checkpoints written successfully so far.
  std::uint64_t written() const;

 private:
  void run();

  const std::string folder_;
  const CheckpointIdentity id_;
  const std::uint32_t incarnation_;
  const int keep_;
  const std::function<std::int64_t()> everyoneHas_;
  const std::function<void(std::int64_t)> onWritten_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  PeerState state_;            // filled by write() while the thread is idle
  bool pending_ = false;       // guarded by mu_: state_ is to be written
  bool busy_ = false;          // guarded by mu_: the thread is writing state_
  bool stop_ = false;          // guarded by mu_
  std::uint64_t written_ = 0;  // guarded by mu_
  std::thread thread_;
};

// What this peer knows of every peer's newest checkpoint round, gossiped over the control links
// (the driver sends takeUpdates() to its neighbours once per round and merges what they send):
// each entry only grows, so everyoneHas() is a lower bound of the newest round every peer has,
// whatever the delays. Not thread-safe (the driver guards it).
class CheckpointKnowledge {
 public:
  explicit CheckpointKnowledge(int peers)
      : known_(static_cast<std::size_t>(peers), -1), pending_(known_.size(), 0) {}
  // This peer (or what a neighbour told) has a checkpoint of `round`; older news are ignored.
  void learn(int rank, std::int64_t round);
  // A neighbour's update: pairs (u32 rank, i64 round), little-endian. kDataLoss when malformed
  // (nothing of it is applied).
  Status merge(std::span<const std::uint8_t> message);
  // The minimum over the peers of their known newest checkpoint round (-1: some peer's unknown).
  std::int64_t everyoneHas() const;
  // The entries changed since the last call, as messages of at most `maxBytes` each (none when
  // nothing changed).
  std::vector<std::vector<std::uint8_t>> takeUpdates(std::size_t maxBytes);

 private:
  std::vector<std::int64_t> known_;
  std::vector<int> changed_;   // ranks learnt since the last takeUpdates(), each once
  std::vector<char> pending_;  // per rank: in changed_
};

struct LoadedCheckpoint {
  std::string path;
  std::uint32_t incarnation = 0;
  PeerState state;
};
// Reads and verifies one file: a regular file no larger than checkpointSizeLimit(id), every
// section within it, a model of id.parameters finite values. kDataLoss (torn, corrupt: what is
// wrong), kInvalidArgument (it is another peer's or run's: which field and both values; or not a
// regular file, or too large) or kNotFound, naming the file.
Result<LoadedCheckpoint> readCheckpoint(const std::string& path, const CheckpointIdentity& id);
// The same checks on a file's bytes already read (`path` names it in errors): what readCheckpoint
// runs after reading, and what fuzz_run_files feeds.
Result<LoadedCheckpoint> parseCheckpoint(std::span<const std::uint8_t> bytes,
                                         const std::string& path, const CheckpointIdentity& id);

// The most bytes a checkpoint of `id` can hold (a generous bound: the header, and the model-sized
// buffers of the optimizer and of an algorithm that keeps one or two replicas per peer); a larger
// file is refused before anything is allocated.
std::uint64_t checkpointSizeLimit(const CheckpointIdentity& id);

// The rounds of the checkpoint files in `folder`, ascending (by name; nothing is verified).
std::vector<std::int64_t> checkpointRounds(const std::string& folder);
std::string checkpointPath(const std::string& folder, std::int64_t round);
// Deletes the checkpoint files in `folder` of rounds after `round` (best effort).
void removeCheckpointsAfter(const std::string& folder, std::int64_t round);

// The newest checkpoint in `folder` that verifies, at round <= maxRound; each newer one that does
// not is reported by a warning (path and why) and skipped. nullopt when there is none.
std::optional<LoadedCheckpoint> latestCheckpoint(const std::string& folder,
                                                 const CheckpointIdentity& id,
                                                 std::int64_t maxRound = INT64_MAX);

}  // namespace grapevine::engine
