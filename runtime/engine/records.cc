#include "runtime/engine/records.h"

namespace grapevine::engine {

RecordWriter::~RecordWriter() { close(); }

Status RecordWriter::open(const std::string& path) {
  close();
  file_ = std::fopen(path.c_str(), "w");
  if (!file_) return unavailable("cannot write " + path);
  return Status::ok();
}

void RecordWriter::write(const nlohmann::json& record) {
  if (!file_) return;
  const std::string line = record.dump() + "\n";
  std::fwrite(line.data(), 1, line.size(), file_);
  std::fflush(file_);
}

void RecordWriter::close() {
  if (file_) std::fclose(file_);
  file_ = nullptr;
}

nlohmann::json roundRecord(const PeerCore& peer, double seconds, const std::vector<int>& suspects,
                           const std::vector<int>& deadNow) {
  const auto& c = peer.counters();
  nlohmann::json r;
  r["round"] = peer.round();
  r["time"] = seconds;
  r["loss"] = peer.lastLoss();
  r["bytes_sent"] = c.bytesSent;
  r["bytes_received"] = c.bytesReceived;
  r["bytes_dense_equivalent"] = c.bytesDenseEquivalent;
  r["live_degree"] = peer.liveDegree();
  if (!suspects.empty()) r["suspect"] = suspects;
  if (!deadNow.empty()) r["dead"] = deadNow;
  if (peer.isolated()) r["isolated"] = true;
  nlohmann::json dropped = nlohmann::json::object();
  for (const auto& [reason, n] : c.dropped) dropped[reason] = n;
  r["dropped"] = dropped;
  r["replica_mismatches"] = c.replicaMismatches;
  r["resyncs"] = c.resyncs;
  return r;
}

}  // namespace grapevine::engine
