#include "runtime/engine/session_output.h"

#include <sys/resource.h>

#include <chrono>
#include <filesystem>
#include <optional>
#include <system_error>
#include <utility>

#include "runtime/common/elapsed.h"
#include "runtime/common/log.h"
#include "runtime/engine/peer_core.h"
#include "runtime/engine/session_checkpoints.h"
#include "runtime/engine/setup.h"
#include "runtime/engine/summary.h"

namespace grapevine::engine {

SessionOutput::SessionOutput(const RunPlan& plan, int rank, bool external)
    : plan_(plan), rank_(rank), external_(external) {}

Status SessionOutput::open(const std::string& dir) {
  dir_ = dir.empty() ? plan_.config.output.dir : dir;
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  if (ec) return unavailable("cannot create " + dir_ + ": " + ec.message());
  return Status::ok();
}

Status SessionOutput::startMetrics(const PeerCore& core) {
  if (plan_.config.monitoring.prometheusPort == 0) return Status::ok();
  GV_ASSIGN_OR_RETURN(prometheus_, PeerMetrics::start(plan_.config, rank_, core));
  log::info("serving Prometheus metrics on http://", prometheus_->address(), "/metrics");
  return Status::ok();
}

Status SessionOutput::openRecords(std::int64_t resumedFrom) {
  const std::string path = dir_ + "/peer-" + std::to_string(rank_) + ".jsonl";
  return resumedFrom >= 0 ? records_.openResumed(path, resumedFrom) : records_.open(path);
}

Status SessionOutput::report(PeerCore& core, std::int64_t round, const RoundFacts& f) {
  RoundReport due = roundReport(plan_.config, round);
  if (external_) due.evaluate = false;  // the caller reports its own (addMetrics())
  if (!due.due(f.suspects, f.dead, f.revived) && f.skipped == 0 && f.rejoined.empty() &&
      callerMetrics_.empty())
    return Status::ok();
  // f.seconds is from before the evaluation, which the time field leaves out; the part of it that
  // was training: less the evaluations and checkpoints before it.
  const double train = f.seconds - times.eval - f.checkpointSeconds;
  std::optional<train::Workload::Eval> evaluation;
  if (due.evaluate) {
    const auto evalStart = std::chrono::steady_clock::now();
    evaluation = core.workload().evaluateTest(core.model());
    times.eval += secondsSince(evalStart);
  }
  auto rec = reportRecord(core, f.seconds, f.suspects, f.dead, evaluation ? &*evaluation : nullptr,
                          f.revived);
  if (f.skipped > 0) rec["skipped_rounds"] = f.skipped;
  if (!f.rejoined.empty()) rec["rejoined"] = f.rejoined;
  // Evaluation runs inline (and holds up the neighbours' round): time-to-accuracy subtracts it.
  rec["eval_seconds"] = times.eval;
  rec["train_seconds"] = train;
  rec["step_seconds"] = times.step;
  if (times.throttle > 0.0) rec["throttle_seconds"] = times.throttle;
  rec["wait_seconds"] = times.wait;
  rec["mix_seconds"] = times.mix;
  rec.update(callerMetrics_);
  callerMetrics_ = nlohmann::json::object();
  // The evaluation as recorded (the workload's, or the API caller's metrics), for the metrics.
  if (prometheus_) {
    if (auto it = rec.find("test_accuracy"); it != rec.end() && it->is_number())
      recordAccuracy_ = it->get<double>();
    if (auto it = rec.find("test_loss"); it != rec.end() && it->is_number())
      recordTestLoss_ = it->get<double>();
  }
  return records_.write(rec);
}

void SessionOutput::updateMetrics(const PeerCore& core, std::int64_t rounds, const RoundFacts& f) {
  if (!prometheus_) return;
  RoundMetrics m;
  m.rounds = rounds;
  m.phases = {times.step, times.wait, times.mix, times.eval};
  m.suspects = &f.suspects;
  m.dead = &f.dead;
  // Both ways back count as rejoins: revived (heard again) and rejoined (connected again).
  std::vector<int> back = f.revived;
  back.insert(back.end(), f.rejoined.begin(), f.rejoined.end());
  m.revived = &back;
  m.testAccuracy = std::exchange(recordAccuracy_, std::nan(""));
  m.testLoss = std::exchange(recordTestLoss_, std::nan(""));
  prometheus_->update(core, m);
}

Status SessionOutput::writeFinal(PeerCore& core, const FinalFacts& f,
                                 const SessionCheckpoints& checkpoints) {
  const std::string rank = std::to_string(rank_);
  PeerResult result = collectResult(core, f.finished && !f.stopped, false);
  if (rusage ru{}; ::getrusage(RUSAGE_SELF, &ru) == 0 && ru.ru_maxrss > 0) {
    result.peakRssBytes = static_cast<std::uint64_t>(ru.ru_maxrss) * 1024;  // Linux: in KiB
  }
  auto last = finalRecord(core, f.seconds, result.testAccuracy, result.testLoss, result.divergence);
  last.update(callerMetrics_);
  callerMetrics_ = nlohmann::json::object();
  if (times.averaged) last["averaged"] = true;
  if (times.average >= 0) last["average_seconds"] = times.average;
  GV_RETURN_IF_ERROR(records_.write(last));
  GV_RETURN_IF_ERROR(writeModel(dir_ + "/model-" + rank + ".bin", core.model()));
  auto j = peerResultToJson(result);
  j["wall_seconds"] = f.seconds;
  j["rounds_waited_past_timeout"] = times.roundsWaitedPastTimeout;
  if (times.averaged) j["averaged"] = true;
  if (times.average >= 0) j["average_seconds"] = times.average;
  const PeerCounters& counters = core.counters();
  if (counters.collectiveBytes > 0) j["collective_bytes"] = counters.collectiveBytes;
  if (checkpoints.resumedFrom() >= 0) j["resumed_from_round"] = checkpoints.resumedFrom();
  if (counters.stateFrom >= 0) j["state_from_neighbour"] = counters.stateFrom;
  if (counters.quarantined > 0) j["quarantined"] = counters.quarantined;
  if (plan_.config.checkpoint.every > 0) {
    j["checkpoints_written"] = checkpoints.written();
    j["checkpoint_seconds"] = checkpoints.seconds();
  }
  GV_RETURN_IF_ERROR(writeJsonFile(dir_ + "/peer-" + rank + ".final.json", j));
  if (f.diverged) {
    log::info("stopped at round ", f.rounds, " (diverged); the last finite model is in ", dir_,
              "/model-", rank, ".bin");
  } else if (f.finished) {
    log::info("finished all rounds in ", f.seconds, " s");
  } else {
    log::info("stopped at round ", f.rounds, " of ", plan_.config.run.rounds, " in ", f.seconds,
              " s");
  }
  return Status::ok();
}

}  // namespace grapevine::engine
