// `grapevine summarize CONFIG DIR`: DIR/summary.json (and the table `launch` prints) from the files
// every peer of a run wrote into DIR, for peers started by srun, sbatch, mpirun or by hand, where
// no `launch` was there to write it. The same summary as `launch`'s (engine::makeSummary), except
// wall_seconds: the slowest peer's time from its first round to its last record.
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "runtime/engine/setup.h"
#include "runtime/engine/summary.h"
#include "tools/grapevine/command.h"
#include "tools/grapevine/load_config.h"

namespace grapevine::cli {
namespace {

struct SummarizeArgs {
  std::string path;
  std::string dir;
  std::vector<std::string> overrides;
  bool strict = false;  // --strict: exit kExitDegraded when the run was degraded
};

// The "time" of the last record in DIR/peer-<rank>.jsonl (0 when there is none).
double lastRecordTime(const std::string& dir, int rank) {
  std::ifstream in(dir + "/peer-" + std::to_string(rank) + ".jsonl");
  std::string line, last;
  while (std::getline(in, line))
    if (!line.empty()) last = line;
  const auto j = nlohmann::json::parse(last, nullptr, false);
  return j.is_object() ? j.value("time", 0.0) : 0.0;
}

int runSummarize(const SummarizeArgs& a) {
  auto loaded = loadConfig(a.path, a.overrides);
  if (!loaded.isOk()) return kExitBadInput;
  // A program through the API (workload external, e.g. under srun or mpirun) writes the same
  // files: its summary is made the same way (the metrics are what it reported).
  auto plan = engine::makeRunPlan(*loaded);
  if (!plan.isOk()) {
    std::cerr << "grapevine summarize: " << plan.status().toString() << "\n";
    return kExitFailure;
  }
  std::vector<int> ranks;
  double wall = 0;
  for (int r = 0; r < loaded->peers.count; ++r) {
    ranks.push_back(r);
    wall = std::max(wall, lastRecordTime(a.dir, r));
  }
  const auto results = engine::readPeerResults(a.dir, ranks);
  int finished = 0;
  for (const auto& r : results) finished += r.finished ? 1 : 0;
  if (finished == 0) {
    std::cerr << "grapevine summarize: no peer of " << a.path << " finished in " << a.dir
              << " (no peer-<rank>.final.json with its model-<rank>.bin)\n";
    return kExitFailure;
  }
  auto summary = engine::makeSummary(**plan, results, wall, loaded->transport.backend);
  if (Status st = engine::writeJsonFile(a.dir + "/summary.json", summary); !st.isOk()) {
    std::cerr << "grapevine summarize: " << st.toString() << "\n";
    return kExitFailure;
  }
  std::cout << engine::summaryTable(summary) << "summary: " << a.dir << "/summary.json\n";
  if (summary.value("diverged", false)) {
    std::cerr << "error: " << summary.value("diverged_message", std::string()) << "\n";
    return kExitDiverged;
  }
  if (a.strict && summary.value("degraded", false)) {
    std::cerr << "grapevine summarize: the run was degraded (--strict): see DEGRADED above\n";
    return kExitDegraded;
  }
  return kExitOk;
}

}  // namespace

Command registerSummarize(CLI::App& root) {
  auto args = std::make_shared<SummarizeArgs>();
  CLI::App* app = root.add_subcommand(
      "summarize", "Write DIR/summary.json from the peers' files (after srun, sbatch, mpirun)");
  app->add_option("config", args->path, "YAML config file of the run")->required();
  app->add_option("dir", args->dir, "The run's output folder (the peers' --out)")->required();
  app->add_option("--set", args->overrides, "Override a key, as the peers were given (repeatable)");
  app->add_flag("--strict", args->strict,
                "Exit with status 4 when the run was degraded (summary.json \"degraded\")");
  return {app, [args] { return runSummarize(*args); }};
}

}  // namespace grapevine::cli
