// Checkpoints: one peer's whole state (PeerState) in one file, so that a run killed or preempted
// can continue exactly (`grapevine peer|launch --resume`).
//
// Layout: FOLDER/round-<R, 10 digits>.ckpt, FOLDER = <checkpoint.dir or output.dir/checkpoints>/
// rank-<r>. A file is
//   "GVCKPT1\n"                      8-byte magic (the format version is its 7th byte)
//   u64 header bytes, header         JSON: rank, round, incarnation, workload, algorithm, peers,
//                                    parameters, workload step, divergence history (doubles as
//                                    their IEEE bit patterns, exact and NaN-safe), counters
//   sections                         u32 name bytes, name, u64 count, count float32 values
//   u64 checksum                     FNV-1a 64 of every byte before it
// all integers little-endian (floats as the host lays them: little-endian hosts only, as the
// wire). Written crash-consistently (writeFileAtomically: temporary file, fsync, rename, directory
// fsync); a reader verifies magic, sizes and checksum and refuses a torn or corrupt file, and
// latestCheckpoint() then falls back to the previous one.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
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
};
CheckpointIdentity checkpointIdentity(const config::Config& config, const PeerCore& core);

// This rank's checkpoint folder: checkpoint.dir (relative to the working directory, as output.dir
// is) or <outDir>/checkpoints, then rank-<rank>.
std::string checkpointFolder(const config::Config& config, const std::string& outDir, int rank);

// Writes round state.round's checkpoint into `folder` (created when missing), then deletes all but
// the newest `keep`. kUnavailable naming the file on an I/O error (the previous checkpoints stay).
Status writeCheckpoint(const std::string& folder, const CheckpointIdentity& id,
                       std::uint32_t incarnation, const PeerState& state, int keep);

struct LoadedCheckpoint {
  std::string path;
  std::uint32_t incarnation = 0;
  PeerState state;
};
// Reads and verifies one file. kDataLoss (torn, corrupt: what is wrong) or kInvalidArgument (it is
// another peer's or config's: which field) naming the file.
Result<LoadedCheckpoint> readCheckpoint(const std::string& path, const CheckpointIdentity& id);

// The rounds of the checkpoint files in `folder`, ascending (by name; nothing is verified).
std::vector<std::int64_t> checkpointRounds(const std::string& folder);
std::string checkpointPath(const std::string& folder, std::int64_t round);

// The newest checkpoint in `folder` that verifies, at round <= maxRound; each newer one that does
// not is reported by a warning (path and why) and skipped. nullopt when there is none.
std::optional<LoadedCheckpoint> latestCheckpoint(const std::string& folder,
                                                 const CheckpointIdentity& id,
                                                 std::int64_t maxRound = INT64_MAX);

}  // namespace grapevine::engine
