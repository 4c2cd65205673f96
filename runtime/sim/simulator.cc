#include "runtime/sim/simulator.h"

#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <memory>
#include <optional>

#include "runtime/engine/records.h"
#include "runtime/sim/link_model.h"
#include "runtime/sim/worker_pool.h"

namespace grapevine::sim {
namespace {

using Clock = std::chrono::steady_clock;

// CPU time of the calling thread: a peer's compute cost even when the pool's threads outnumber the
// free cores (wall time would then count the waits for a core). BLAS runs single-threaded in a peer
// (workloadOptions sets workload threads to 1), so the work happens on this thread.
double threadCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

struct PeerState {
  double clock = 0.0;  // simulated seconds at the end of the last round
  double ready = 0.0;  // when this round's message left
  bool anyLost = false;
  std::uint64_t lost = 0;
  double arrival = 0.0;  // latest arrival of a delivered message this round
  std::vector<int> incoming;
  Status status;
  std::string pending;  // records not yet appended to the file
  double testAccuracy = std::numeric_limits<double>::quiet_NaN();  // at the last evaluation
  double testLoss = std::numeric_limits<double>::quiet_NaN();
};

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

Status firstError(const std::vector<PeerState>& states) {
  for (const auto& s : states) {
    if (!s.status.isOk()) return s.status;
  }
  return Status::ok();
}

// One line of DIR/evals.jsonl: what the whole run looks like at an evaluation round (all models are
// in this process, so the consensus distance and the averaged model's accuracy are exact).
Result<nlohmann::json> evaluationPoint(const std::vector<std::unique_ptr<engine::PeerCore>>& peers,
                                       const std::vector<PeerState>& states, std::int64_t round,
                                       double wall) {
  const std::size_t n = peers.front()->model().size();
  std::vector<double> mean(n, 0.0);
  for (const auto& p : peers) {
    const auto m = p->model();
    for (std::size_t k = 0; k < n; ++k) mean[k] += m[k];
  }
  for (double& v : mean) v /= static_cast<double>(peers.size());
  double meanNorm = 0.0, dist = 0.0;
  for (double v : mean) meanNorm += v * v;
  for (const auto& p : peers) {
    const auto m = p->model();
    for (std::size_t k = 0; k < n; ++k) dist += (m[k] - mean[k]) * (m[k] - mean[k]);
  }
  dist /= static_cast<double>(peers.size());
  double simTime = 0.0, acc = 0.0, testLoss = 0.0, trainLoss = 0.0, bytes = 0.0, dense = 0.0;
  for (std::size_t i = 0; i < peers.size(); ++i) {
    simTime = std::max(simTime, states[i].clock);
    acc += states[i].testAccuracy;
    testLoss += states[i].testLoss;
    trainLoss += peers[i]->lastLoss();
    bytes += static_cast<double>(peers[i]->counters().bytesSent);
    dense += static_cast<double>(peers[i]->counters().bytesDenseEquivalent);
  }
  const double np = static_cast<double>(peers.size());
  auto num = [](double v) {
    return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr);
  };
  nlohmann::json j;
  j["round"] = round + 1;  // rounds completed
  j["sim_time"] = simTime;
  j["wall_time"] = wall;
  j["bytes_sent_per_peer"] = bytes / np;
  j["bytes_dense_per_peer"] = dense / np;
  j["train_loss"] = num(trainLoss / np);
  j["test_accuracy_mean"] = num(acc / np);
  j["test_loss_mean"] = num(testLoss / np);
  j["consensus_distance"] =
      num(meanNorm > 0 ? dist / meanNorm : dist);  // (1/n) sum |x_i - xbar|^2 / |xbar|^2
  const std::vector<float> meanF(mean.begin(), mean.end());
  const auto ev = peers.front()->workload().evaluateTest(meanF);
  j["averaged_model_accuracy"] = num(ev.accuracy);
  return j;
}

}  // namespace

std::uint64_t residentBytes() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (!f) return 0;
  unsigned long long size = 0, resident = 0;
  const int n = std::fscanf(f, "%llu %llu", &size, &resident);
  std::fclose(f);
  if (n != 2) return 0;
  return resident * static_cast<std::uint64_t>(sysconf(_SC_PAGESIZE));
}

Result<SimResult> runSimulation(const engine::RunPlan& plan, const SimOptions& options) {
  const config::Config& c = plan.config;
  const int n = c.peers.count;
  const std::size_t count = static_cast<std::size_t>(n);
  const LinkModel link(c.network, c.run.seed);
  const double fixedCompute = c.network.computeMs > 0.0
                                  ? c.network.computeMs * 1e-3 * std::max(1, c.algorithm.localSteps)
                                  : -1.0;
  const std::string& dir = options.outDir;
  auto path = [&dir](const char* stem, int rank, const char* ext) {
    return dir + "/" + stem + std::to_string(rank) + ext;
  };

  SimResult result;
  WorkerPool pool(options.threads);
  result.threads = pool.threads();
  result.rssBeforePeers = residentBytes();

  std::vector<std::unique_ptr<engine::PeerCore>> peers(count);
  std::vector<PeerState> states(count);
  pool.parallelFor(count, [&](std::size_t i) {
    auto p = engine::makePeer(plan, static_cast<int>(i), 0);
    if (p.isOk())
      peers[i] = std::move(*p);
    else
      states[i].status = p.status();
  });
  GV_RETURN_IF_ERROR(firstError(states));

  if (!dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) return unavailable("cannot create " + dir + ": " + ec.message());
    for (int r = 0; r < n; ++r) {
      std::FILE* f = std::fopen(path("peer-", r, ".jsonl").c_str(), "w");  // truncate
      if (!f) return unavailable("cannot write " + path("peer-", r, ".jsonl"));
      std::fclose(f);
    }
    std::error_code removeEc;
    std::filesystem::remove(dir + "/evals.jsonl", removeEc);  // a fresh run starts a fresh file
  }

  const auto start = Clock::now();
  auto wallSeconds = [&start] {
    return std::chrono::duration<double>(Clock::now() - start).count();
  };
  constexpr std::size_t kFlushBytes = 1 << 16;

  for (std::int64_t t = 0; t < c.run.rounds; ++t) {
    // 1. Local steps and messages.
    pool.parallelFor(count, [&](std::size_t i) {
      PeerState& s = states[i];
      const double cpu0 = threadCpuSeconds();
      s.status = peers[i]->beginRound(t);
      const double compute = fixedCompute >= 0.0 ? fixedCompute : threadCpuSeconds() - cpu0;
      s.ready = s.clock + compute * c.network.computeScaleOf(static_cast<int>(i));
      s.incoming.clear();
      s.anyLost = false;
      s.arrival = s.ready;
    });
    GV_RETURN_IF_ERROR(firstError(states));
    // Who sends to whom, in increasing sender rank (O(edges), serial: it fixes the delivery order).
    for (std::size_t j = 0; j < count; ++j) {
      for (int i : peers[j]->sendTo())
        states[static_cast<std::size_t>(i)].incoming.push_back(static_cast<int>(j));
    }
    // 2. Delivery: a receiver mutates only itself; senders' outgoing buffers are only read.
    pool.parallelFor(count, [&](std::size_t i) {
      PeerState& s = states[i];
      const int to = static_cast<int>(i);
      for (int j : s.incoming) {
        if (link.lost(j, to, t)) {
          s.anyLost = true;
          ++s.lost;
          continue;
        }
        const auto bytes = peers[static_cast<std::size_t>(j)]->outgoing(to);
        peers[i]->onMessage(j, bytes);
        s.arrival = std::max(s.arrival, states[static_cast<std::size_t>(j)].ready +
                                            link.delaySeconds(j, to, t, bytes.size()));
      }
    });
    // 3. Mixing, clocks, records.
    const engine::RoundReport due = engine::roundReport(c, t);
    const double wall = wallSeconds();
    pool.parallelFor(count, [&](std::size_t i) {
      PeerState& s = states[i];
      engine::PeerCore& p = *peers[i];
      double end = s.arrival;
      if (c.algorithm.overlap) {
        // The real driver computes the next gradient while it waits for its neighbours.
        const double cpu0 = threadCpuSeconds();
        p.precomputeGradient();
        const double g = fixedCompute >= 0.0 ? fixedCompute : threadCpuSeconds() - cpu0;
        end = std::max(end, s.ready + g * c.network.computeScaleOf(static_cast<int>(i)));
      }
      if (s.anyLost) end = std::max(end, s.ready + c.algorithm.roundTimeout);
      s.clock = end;
      const auto suspects = p.endRound();
      if (due.due(suspects, {})) {
        std::optional<train::Workload::Eval> ev;
        if (due.evaluate) {
          ev = p.workload().evaluateTest(p.model());
          s.testAccuracy = ev->accuracy;
          s.testLoss = ev->loss;
        }
        auto rec = engine::reportRecord(p, wall, suspects, {}, ev ? &*ev : nullptr);
        rec["sim_time"] = s.clock;
        s.pending += rec.dump();
        s.pending += '\n';
        if (!dir.empty() && s.pending.size() >= kFlushBytes) {
          s.status = appendFile(path("peer-", static_cast<int>(i), ".jsonl"), s.pending);
        }
        if (dir.empty()) s.pending.clear();
      }
    });
    GV_RETURN_IF_ERROR(firstError(states));
    if (due.evaluate && !dir.empty()) {
      auto point = evaluationPoint(peers, states, t, wall);
      GV_RETURN_IF_ERROR(point.status());
      std::string line = point->dump() + "\n";
      GV_RETURN_IF_ERROR(appendFile(dir + "/evals.jsonl", line));
    }
    if (options.onRound) {
      double latest = 0.0;
      for (const auto& s : states) latest = std::max(latest, s.clock);
      options.onRound(t, latest);
    }
  }
  result.roundsWallSeconds = wallSeconds();
  result.rssAfterRounds = residentBytes();

  // Final evaluation, record, model and final.json of every peer, as `grapevine peer` writes them.
  result.peers.resize(count);
  pool.parallelFor(count, [&](std::size_t i) {
    PeerState& s = states[i];
    engine::PeerCore& p = *peers[i];
    engine::PeerResult& r = result.peers[i];
    r = engine::collectResult(p, true);
    if (dir.empty()) return;
    auto rec = engine::finalRecord(p, wallSeconds(), r.testAccuracy, r.testLoss);
    rec["sim_time"] = s.clock;
    s.pending += rec.dump();
    s.pending += '\n';
    const int rank = static_cast<int>(i);
    s.status = appendFile(path("peer-", rank, ".jsonl"), s.pending);
    if (!s.status.isOk() || !options.writeModels) return;
    s.status = engine::writeModel(path("model-", rank, ".bin"), r.model);
    if (!s.status.isOk()) return;
    auto j = engine::peerResultToJson(r);
    j["wall_seconds"] = wallSeconds();
    j["sim_time"] = s.clock;
    s.status = engine::writeJsonFile(path("peer-", rank, ".final.json"), j);
  });
  GV_RETURN_IF_ERROR(firstError(states));
  result.wallSeconds = wallSeconds();

  result.clock.reserve(count);
  for (const auto& s : states) {
    result.clock.push_back(s.clock);
    result.simulatedSeconds = std::max(result.simulatedSeconds, s.clock);
    result.messagesLost += s.lost;
  }
  peers.clear();  // the summary evaluates the averaged model with a fresh workload

  auto& summary = result.summary;
  summary = engine::makeSummary(plan, result.peers, result.wallSeconds, "sim");
  summary["simulated_seconds"] = result.simulatedSeconds;
  const double perPeer =
      result.rssAfterRounds > result.rssBeforePeers
          ? static_cast<double>(result.rssAfterRounds - result.rssBeforePeers) / n
          : 0.0;
  summary["sim"] = {
      {"threads", result.threads},
      {"messages_lost", result.messagesLost},
      {"rounds_wall_seconds", result.roundsWallSeconds},
      {"rounds_per_second", result.roundsWallSeconds > 0
                                ? static_cast<double>(c.run.rounds) / result.roundsWallSeconds
                                : 0.0},
      {"compute", fixedCompute >= 0.0 ? "fixed" : "measured"},
      {"rss_before_peers_bytes", result.rssBeforePeers},
      {"rss_after_rounds_bytes", result.rssAfterRounds},
      {"rss_per_peer_bytes", perPeer},
  };
  if (!dir.empty()) GV_RETURN_IF_ERROR(engine::writeJsonFile(dir + "/summary.json", summary));
  return result;
}

}  // namespace grapevine::sim
