// What `grapevine sim` writes into its output folder for the peers it simulates, in the files and
// formats a real peer writes (engine/records.h): DIR/peer-R.jsonl (round records, kept in memory
// and appended in large writes), and at the end DIR/model-R.bin and DIR/peer-R.final.json; and the
// run's DIR/evals.jsonl. With no folder nothing is written and nothing is kept.
//
// Thread: peer R's methods from one thread at a time (the worker that runs peer R); different
// peers' concurrently. prepare() and appendEvaluation() from the simulation's own thread.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "runtime/common/status.h"

namespace grapevine::sim {

class PeerFiles {
 public:
  // `dir` empty: write nothing.
  PeerFiles(std::string dir, std::size_t peers) : dir_(std::move(dir)), pending_(peers) {}

  bool enabled() const { return !dir_.empty(); }

  // Creates the folder, empties every peer's records file and removes an old evals.jsonl: a fresh
  // run starts fresh files.
  Status prepare() const;

  // Adds one record (one JSON line) to peer `rank`'s records; appended to its file once the text
  // kept reaches kFlushBytes (the status of that write; ok otherwise).
  Status appendRecord(std::size_t rank, const nlohmann::json& record);
  // Appends what peer `rank` still keeps (a killed peer: nothing follows).
  Status flush(std::size_t rank);
  // Peer `rank`'s end: its final record after the others, then (with `writeModel`) its model and
  // final.json. Stops at the first write that fails.
  Status finish(std::size_t rank, const nlohmann::json& finalRecord, bool writeModel,
                std::span<const float> model, const nlohmann::json& finalJson);

  // One line of DIR/evals.jsonl.
  Status appendEvaluation(const nlohmann::json& point) const;

  static constexpr std::size_t kFlushBytes = 1 << 16;

 private:
  std::string path(const char* stem, std::size_t rank, const char* ext) const;

  const std::string dir_;
  std::vector<std::string> pending_;  // per peer: records not yet appended to its file
};

}  // namespace grapevine::sim
