// Per-peer records, DIR/peer-<rank>.jsonl: one JSON object per line, every output.log_every rounds
// and at each event (suspect, dead, isolated). Fields: round, time, loss, test_accuracy/test_loss
// (when evaluated), bytes_sent, bytes_received, suspect, dead, dropped (by reason), lr. The last
// line has "final": true and the peer's final evaluation.
#pragma once

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "runtime/engine/peer_core.h"

namespace grapevine::engine {

class RecordWriter {
 public:
  RecordWriter() = default;
  ~RecordWriter();
  RecordWriter(const RecordWriter&) = delete;
  RecordWriter& operator=(const RecordWriter&) = delete;

  Status open(const std::string& path);
  // Writes one line and flushes it (a reader tails the file for progress).
  void write(const nlohmann::json& record);
  void close();

 private:
  std::FILE* file_ = nullptr;
};

// The record of one peer after a round.
nlohmann::json roundRecord(const PeerCore& peer, double seconds, const std::vector<int>& suspects,
                           const std::vector<int>& deadNow);

}  // namespace grapevine::engine
