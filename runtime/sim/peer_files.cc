#include "runtime/sim/peer_files.h"

#include <cstdio>
#include <filesystem>
#include <system_error>

#include "runtime/engine/summary.h"

namespace grapevine::sim {
namespace {

// Appends `text` to the file at `path` and empties it (left as it was when the write fails).
Status appendFile(const std::string& path, std::string& text) {
  if (text.empty()) return Status::ok();
  std::FILE* f = std::fopen(path.c_str(), "a");
  if (!f) return unavailable("cannot write " + path);
  const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  const bool closed = std::fclose(f) == 0;
  if (!ok || !closed) return unavailable("cannot write " + path);
  text.clear();
  return Status::ok();
}

}  // namespace

std::string PeerFiles::path(const char* stem, std::size_t rank, const char* ext) const {
  return dir_ + "/" + stem + std::to_string(rank) + ext;
}

Status PeerFiles::prepare() const {
  if (!enabled()) return Status::ok();
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  if (ec) return unavailable("cannot create " + dir_ + ": " + ec.message());
  for (std::size_t r = 0; r < pending_.size(); ++r) {
    const std::string records = path("peer-", r, ".jsonl");
    std::FILE* f = std::fopen(records.c_str(), "w");  // truncate
    if (!f) return unavailable("cannot write " + records);
    std::fclose(f);
  }
  std::error_code removeEc;
  std::filesystem::remove(dir_ + "/evals.jsonl", removeEc);
  return Status::ok();
}

Status PeerFiles::appendRecord(std::size_t rank, const nlohmann::json& record) {
  if (!enabled()) return Status::ok();
  std::string& text = pending_[rank];
  text += record.dump();
  text += '\n';
  if (text.size() < kFlushBytes) return Status::ok();
  return appendFile(path("peer-", rank, ".jsonl"), text);
}

Status PeerFiles::flush(std::size_t rank) {
  if (!enabled()) return Status::ok();
  return appendFile(path("peer-", rank, ".jsonl"), pending_[rank]);
}

Status PeerFiles::finish(std::size_t rank, const nlohmann::json& finalRecord, bool writeModel,
                         std::span<const float> model, const nlohmann::json& finalJson) {
  if (!enabled()) return Status::ok();
  std::string& text = pending_[rank];
  text += finalRecord.dump();
  text += '\n';
  GV_RETURN_IF_ERROR(appendFile(path("peer-", rank, ".jsonl"), text));
  if (!writeModel) return Status::ok();
  GV_RETURN_IF_ERROR(engine::writeModel(path("model-", rank, ".bin"), model));
  return engine::writeJsonFile(path("peer-", rank, ".final.json"), finalJson);
}

Status PeerFiles::appendEvaluation(const nlohmann::json& point) const {
  std::string line = point.dump() + "\n";
  return appendFile(dir_ + "/evals.jsonl", line);
}

}  // namespace grapevine::sim
