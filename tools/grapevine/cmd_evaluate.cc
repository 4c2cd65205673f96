// `grapevine evaluate CONFIG DIR`: the deployable model at every checkpointed round of a run, off
// the training's critical path. For each round whose checkpoint every rank wrote (checkpoint.every;
// the folders as the peers used them: checkpoint.dir or DIR/checkpoints), it averages the peers'
// models exactly (in double: what run.final_average or the API's finalize(average) would give
// every peer) and evaluates that average on the test set; with --peers, each peer's own model too.
// One JSON line per round (stdout, or --json FILE):
//   {"round": R, "peers": n, "accuracy": a, "loss": l, "consensus_distance": d
//    [, "peer_accuracy_mean": m, "peer_accuracy_min": x, "peer_accuracy_max": y]}
// consensus_distance: (1/n) sum_i |x_i - xbar|^2 / |xbar|^2.
#include <algorithm>
#include <cmath>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "runtime/common/atomic_file.h"
#include "runtime/engine/checkpoint.h"
#include "runtime/engine/setup.h"
#include "tools/grapevine/command.h"
#include "tools/grapevine/load_config.h"

namespace grapevine::cli {
namespace {

struct EvaluateArgs {
  std::string path;
  std::string dir;
  std::vector<std::string> overrides;
  std::string json;
  bool peers = false;
};

int runEvaluate(const EvaluateArgs& a) {
  auto loaded = loadConfig(a.path, a.overrides);
  if (!loaded.isOk()) return kExitBadInput;
  if (refuseExternal("evaluate", a.path, *loaded)) return kExitBadInput;
  const config::Config& c = *loaded;
  auto plan = engine::makeRunPlan(c);
  if (!plan.isOk()) {
    std::cerr << "grapevine evaluate: " << plan.status().toString() << "\n";
    return kExitFailure;
  }
  // Rank 0's peer gives what every checkpoint must match (workload, algorithm, model size).
  auto core = engine::makePeer(**plan, 0, 0);
  if (!core.isOk()) {
    std::cerr << "grapevine evaluate: " << core.status().toString() << "\n";
    return kExitFailure;
  }
  const engine::CheckpointIdentity id0 = engine::checkpointIdentity(c, **core);
  const train::Workload& workload = (*core)->workload();
  // The rounds every rank checkpointed.
  std::map<std::int64_t, int> seen;
  const int n = c.peers.count;
  for (int r = 0; r < n; ++r) {
    for (std::int64_t round : engine::checkpointRounds(engine::checkpointFolder(c, a.dir, r)))
      ++seen[round];
  }
  std::vector<std::int64_t> rounds;
  for (const auto& [round, count] : seen) {
    if (count == n) rounds.push_back(round);
  }
  if (rounds.empty()) {
    std::cerr << "grapevine evaluate: no round with a checkpoint of every one of the " << n
              << " peers under " << engine::checkpointFolder(c, a.dir, 0)
              << " (and the other ranks' folders); set checkpoint.every (and checkpoint.keep) "
                 "for the run\n";
    return kExitFailure;
  }
  // --json FILE is written once, atomically, when every round is evaluated: a failure (or a
  // Ctrl-C) leaves the file as it was, never half of it.
  std::ostringstream lines;
  std::ostream& out = a.json.empty() ? static_cast<std::ostream&>(std::cout) : lines;
  const std::size_t size = id0.parameters;
  std::vector<double> mean(size);
  std::vector<std::vector<float>> models(static_cast<std::size_t>(n));
  for (std::int64_t round : rounds) {
    std::fill(mean.begin(), mean.end(), 0.0);
    for (int r = 0; r < n; ++r) {
      engine::CheckpointIdentity id = id0;
      id.rank = r;
      const std::string file = engine::checkpointPath(engine::checkpointFolder(c, a.dir, r), round);
      auto ck = engine::readCheckpoint(file, id);
      if (!ck.isOk()) {
        std::cerr << "grapevine evaluate: " << ck.status().toString() << "\n";
        return kExitFailure;
      }
      models[r] = std::move(ck->state.model);
      for (std::size_t k = 0; k < size; ++k) mean[k] += models[r][k];
    }
    for (auto& v : mean) v /= n;
    double norm = 0, spread = 0;
    for (std::size_t k = 0; k < size; ++k) norm += mean[k] * mean[k];
    for (const auto& m : models) {
      for (std::size_t k = 0; k < size; ++k) spread += (m[k] - mean[k]) * (m[k] - mean[k]);
    }
    spread /= n;
    const std::vector<float> meanF(mean.begin(), mean.end());
    const auto ev = workload.evaluateTest(meanF);
    nlohmann::json j = {
        {"round", round},
        {"peers", n},
        {"accuracy", std::isnan(ev.accuracy) ? nlohmann::json() : nlohmann::json(ev.accuracy)},
        {"loss", ev.loss},
        {"consensus_distance", norm > 0 ? spread / norm : spread}};
    if (a.peers) {
      double sum = 0, lo = INFINITY, hi = -INFINITY;
      for (const auto& m : models) {
        const double acc = workload.evaluateTest(m).accuracy;
        sum += acc;
        lo = std::min(lo, acc);
        hi = std::max(hi, acc);
      }
      j["peer_accuracy_mean"] = sum / n;
      j["peer_accuracy_min"] = lo;
      j["peer_accuracy_max"] = hi;
    }
    out << j.dump() << "\n" << std::flush;
  }
  if (!a.json.empty()) {
    if (Status st = writeFileAtomically(a.json, lines.str()); !st.isOk()) {
      std::cerr << "grapevine evaluate: " << st.message() << "\n";
      return kExitFailure;
    }
  }
  return kExitOk;
}

}  // namespace

Command registerEvaluate(CLI::App& root) {
  auto args = std::make_shared<EvaluateArgs>();
  CLI::App* app = root.add_subcommand(
      "evaluate",
      "Evaluate the peers' exact average (the deployable model) at every checkpointed round");
  app->add_option("config", args->path, "YAML config file of the run")->required();
  app->add_option("dir", args->dir, "The run's output folder (the peers' --out)")->required();
  app->add_option("--set", args->overrides, "Override a key, as the peers were given (repeatable)");
  app->add_option("--json", args->json, "Write the JSON lines here instead of stdout");
  app->add_flag("--peers", args->peers, "Also evaluate each peer's own model (mean, min, max)");
  return {app, [args] { return runEvaluate(*args); }};
}

}  // namespace grapevine::cli
