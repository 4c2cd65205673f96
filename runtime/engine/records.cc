#include "runtime/engine/records.h"

#include <sys/stat.h>

#include <cerrno>
#include <cmath>
#include <cstring>

#include "runtime/common/atomic_file.h"

namespace grapevine::engine {
namespace {

// "cannot write PATH: <the system's reason>" (ENOSPC, EMFILE, EACCES, ...), from errno as the
// failed call left it.
Status cannotWrite(const std::string& path) {
  const int err = errno;
  return unavailable("cannot write " + path + (err ? std::string(": ") + std::strerror(err) : ""));
}

}  // namespace

RecordWriter::~RecordWriter() { close(); }

Status RecordWriter::open(const std::string& path) {
  close();
  errno = 0;
  file_ = std::fopen(path.c_str(), "w");
  if (!file_) return cannotWrite(path);
  path_ = path;
  return Status::ok();
}

Status RecordWriter::openResumed(const std::string& path, std::int64_t lastRound) {
  close();
  std::string kept;
  // Our own file, possibly large (a line per round), but read back only when it is a regular file:
  // one linked to /dev/zero would be read forever.
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    return failedPrecondition("cannot resume the records " + path + ": not a regular file");
  }
  if (std::FILE* in = std::fopen(path.c_str(), "r")) {
    std::string line;
    for (int c; (c = std::fgetc(in)) != EOF;) {
      if (c != '\n') {
        line += static_cast<char>(c);
        continue;
      }
      const auto j = nlohmann::json::parse(line, nullptr, false);
      // A torn last line (the crash) is not JSON and goes too.
      if (j.is_object() && !j.value("final", false) && j.value("round", lastRound + 1) <= lastRound)
        kept += line + "\n";
      line.clear();
    }
    std::fclose(in);
  }
  GV_RETURN_IF_ERROR(writeFileAtomically(path, kept));
  errno = 0;
  file_ = std::fopen(path.c_str(), "a");
  if (!file_) return cannotWrite(path);
  path_ = path;
  return Status::ok();
}

Status RecordWriter::write(const nlohmann::json& record) {
  if (!file_) return unavailable("records not open");
  const std::string line = record.dump() + "\n";
  errno = 0;
  const bool written = std::fwrite(line.data(), 1, line.size(), file_) == line.size();
  const bool flushed = written && std::fflush(file_) == 0;
  if (!written || !flushed) return cannotWrite(path_);
  return Status::ok();
}

void RecordWriter::close() {
  if (file_) std::fclose(file_);
  file_ = nullptr;
}

nlohmann::json roundRecord(const PeerCore& peer, double seconds, const std::vector<int>& suspects,
                           const std::vector<int>& deadNow, const std::vector<int>& revivedNow) {
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
  if (!revivedNow.empty()) r["revived"] = revivedNow;
  if (peer.isolated()) r["isolated"] = true;
  nlohmann::json dropped = nlohmann::json::object();
  for (const auto& [reason, n] : c.dropped) dropped[reason] = n;
  r["dropped"] = dropped;
  r["replica_mismatches"] = c.replicaMismatches;
  r["resyncs"] = c.resyncs;
  if (const auto* robust = peer.algorithm().robustMixer()) {
    // The neighbours whose difference reached beyond the radius in the last mix, and how far.
    nlohmann::json clipped = nlohmann::json::object();
    for (const auto& [j, f] : robust->clippedThisRound()) clipped[std::to_string(j)] = f;
    if (!clipped.empty()) r["clipped"] = clipped;
    r["robust_radius"] = robust->radius();
    if (robust->screensLoss()) {
      // Loss screening: each neighbour's loss on the own probe over the own model's.
      nlohmann::json ratios = nlohmann::json::object();
      for (const auto& [j, q] : robust->lossRatios()) ratios[std::to_string(j)] = q;
      r["probe_loss_ratio"] = ratios;
    }
  }
  return r;
}

nlohmann::json trustJson(const algorithms::RobustMixer& robust) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& t : robust.trust()) {
    out.push_back({{"neighbour", t.neighbour},
                   {"rounds_mixed", t.roundsMixed},
                   {"rounds_clipped", t.roundsClipped},
                   {"clip_mean", t.roundsClipped ? t.clipSum / double(t.roundsClipped) : 0.0},
                   {"suspicion", t.score},
                   {"quarantined", t.distrusted}});
    if (robust.screensLoss()) out.back()["rounds_loss_flagged"] = t.roundsLossy;
  }
  return out;
}

RoundReport roundReport(const config::Config& config, std::int64_t round) {
  RoundReport report;
  report.log = (round + 1) % config.output.logEvery == 0 || round + 1 == config.run.rounds;
  report.evaluate = config.workload.evalEvery > 0 && (round + 1) % config.workload.evalEvery == 0;
  return report;
}

nlohmann::json reportRecord(const PeerCore& peer, double seconds, const std::vector<int>& suspects,
                            const std::vector<int>& deadNow,
                            const train::Workload::Eval* evaluation,
                            const std::vector<int>& revivedNow) {
  auto r = roundRecord(peer, seconds, suspects, deadNow, revivedNow);
  r["lr"] = peer.lastLr();
  if (const auto step = peer.algorithm().stepReport()) {
    auto put = [&r](const char* key, double v) {
      if (std::isfinite(v)) r[key] = v;
    };
    put("consensus_step", step->step);
    put("consensus_step_proposed", step->proposed);
    put("compressor_quality", step->compressorQuality);
    put("public_lag", step->publicLag);
    put("local_consensus_distance", step->localConsensus);
    if (step->backoffs) r["step_backoffs"] = step->backoffs;
  }
  if (evaluation) {
    if (std::isfinite(evaluation->accuracy)) r["test_accuracy"] = evaluation->accuracy;
    r["test_loss"] = evaluation->loss;
  }
  return r;
}

nlohmann::json finalRecord(const PeerCore& peer, double seconds, double testAccuracy,
                           double testLoss, const std::optional<Divergence>& divergence) {
  auto r = roundRecord(peer, seconds, {}, {});
  r["final"] = true;
  // At the end a neighbour that finished and closed is no loss (it may close before or after this
  // peer writes its final record).
  r["live_degree"] = peer.unlostDegree();
  if (peer.unlostDegree() > 0) r.erase("isolated");
  if (std::isfinite(testAccuracy)) r["test_accuracy"] = testAccuracy;
  r["test_loss"] = testLoss;
  if (const auto* robust = peer.algorithm().robustMixer())
    r["neighbour_trust"] = trustJson(*robust);
  if (divergence) {
    r["diverged"] = true;
    r["diverged_round"] = divergence->round;
    r["diverged_peer"] = divergence->origin;
  }
  return r;
}

}  // namespace grapevine::engine
