// `grapevine sim CONFIG [--peers N] [--out DIR] [--threads T] [--set k=v]`: every peer of a config
// in this process on a worker pool, with a link model on a virtual clock (runtime/sim/simulator.h).
// Writes what `grapevine launch` writes (DIR/summary.json with simulated_seconds, peer-<rank>.jsonl
// with sim_time, model-<rank>.bin, peer-<rank>.final.json) and prints the same table.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>

#include "runtime/common/log.h"
#include "runtime/engine/summary.h"
#include "runtime/sim/simulator.h"
#include "tools/grapevine/command.h"
#include "tools/grapevine/load_config.h"

namespace grapevine::cli {
namespace {

struct SimArgs {
  std::string path;
  int peers = 0;
  std::string out;
  int threads = 0;
  std::vector<std::string> overrides;
  bool quiet = false;
  bool noModels = false;
};

int runSim(const SimArgs& a) {
  std::vector<std::string> overrides = a.overrides;
  // --peers is a flag, so it takes precedence over --set peers.count (flags are applied last).
  if (a.peers > 0) overrides.push_back("peers.count=" + std::to_string(a.peers));
  auto loaded = loadConfig(a.path, overrides);
  if (!loaded.isOk()) return kExitBadInput;
  config::Config c = std::move(*loaded);
  if (refuseExternal("sim", a.path, c)) return kExitBadInput;
  if (refuseFaults("sim", a.path, c)) return kExitBadInput;
  log::setLevel(c.run.logLevel);
  const std::string out = a.out.empty() ? c.output.dir : a.out;
  const bool restarts =
      std::any_of(c.faults.events.begin(), c.faults.events.end(),
                  [](const auto& e) { return e.kind == config::FaultKind::kRestart; });
  if (c.checkpoint.every > 0 && !restarts) {
    std::cerr << "grapevine sim: note: checkpoint.every is for `grapevine peer`/`launch` "
                 "(--resume); a simulation is reproducible from its seed and writes none\n";
  }

  auto plan = engine::makeRunPlan(c);
  if (!plan.isOk()) {
    std::cerr << "grapevine sim: " << plan.status().toString() << "\n";
    return plan.status().code() == ErrorCode::kInvalidArgument ? kExitBadInput : kExitFailure;
  }
  const auto& n = c.network;
  char bandwidth[64] = "unlimited", compute[64] = "measured", links[256];
  if (n.bandwidthMbit > 0) std::snprintf(bandwidth, sizeof bandwidth, "%g Mbit/s", n.bandwidthMbit);
  if (n.computeMs > 0) std::snprintf(compute, sizeof compute, "%g ms/step", n.computeMs);
  std::snprintf(links, sizeof links, "links %s, %g ms (+0-%g ms), loss %g%%; compute %s x%g",
                bandwidth, n.latencyMs, n.jitterMs, n.lossPercent, compute, n.computeScale);
  std::string linkOverrides;
  if (!n.uniform()) {
    linkOverrides = " (overrides: " + std::to_string(n.peers.size()) + " peers, " +
                    std::to_string(n.edges.size()) + " links)";
  }
  std::cout << "grapevine sim: " << c.peers.count << " peers, "
            << topology::kindName(c.topology.kind) << ", "
            << algorithms::algorithmKindName(c.algorithm.name) << " + "
            << compress::methodName(c.compression.method) << ", " << c.run.rounds << " rounds; "
            << links << nodeCapText(n) << linkOverrides << "; output in " << out << "/\n"
            << std::flush;

  sim::SimOptions o;
  o.threads = a.threads;
  o.outDir = out;
  o.writeModels = !a.noModels;
  const bool tty = isatty(STDOUT_FILENO) && !a.quiet;
  const auto start = std::chrono::steady_clock::now();
  auto lastPrint = start;
  o.onRound = [&](std::int64_t round, double simSeconds) {
    const auto now = std::chrono::steady_clock::now();
    if (a.quiet || now - lastPrint < std::chrono::milliseconds(tty ? 500 : 10000)) return;
    lastPrint = now;
    const double wall = std::chrono::duration<double>(now - start).count();
    char line[200];
    std::snprintf(line, sizeof line,
                  "round %lld/%lld  simulated %.2f s  wall %.1f s  %.1f rounds/s",
                  static_cast<long long>(round + 1), static_cast<long long>(c.run.rounds),
                  simSeconds, wall, wall > 0 ? static_cast<double>(round + 1) / wall : 0.0);
    if (tty)
      std::cout << "\r" << line << "   " << std::flush;
    else
      std::cout << line << "\n" << std::flush;
  };
  auto r = sim::runSimulation(**plan, o);
  if (tty) std::cout << "\n";
  if (!r.isOk()) {
    std::cerr << "grapevine sim: " << r.status().toString() << "\n";
    return kExitFailure;
  }
  const auto& s = r->summary;
  char line[256];
  std::snprintf(
      line, sizeof line,
      "%-28s %.3f s (wall %.1f s, %d threads, %.1f rounds/s)\n%-28s %llu\n%-28s %.1f KiB\n",
      "simulated time", r->simulatedSeconds, r->wallSeconds, r->threads,
      s["sim"]["rounds_per_second"].get<double>(), "messages lost",
      static_cast<unsigned long long>(r->messagesLost), "memory per simulated peer",
      s["sim"]["rss_per_peer_bytes"].get<double>() / 1024.0);
  std::cout << "\n" << engine::summaryTable(s) << line << "summary: " << out << "/summary.json\n";
  if (r->divergence) {
    std::cerr << "error: " << r->divergenceMessage << "\n";
    return kExitDiverged;
  }
  return kExitOk;
}

}  // namespace

Command registerSim(CLI::App& root) {
  auto args = std::make_shared<SimArgs>();
  CLI::App* app = root.add_subcommand(
      "sim", "Simulate every peer of a config in this process (link model, virtual clock)");
  app->add_option("config", args->path, "YAML config file")->required();
  app->add_option("--peers", args->peers, "Override peers.count")->check(CLI::PositiveNumber);
  app->add_option("--out", args->out, "Output folder (default: output.dir of the config)");
  app->add_option("--threads", args->threads, "Worker threads (default: one per core)")
      ->check(CLI::Range(1, 1024));
  app->add_option("--set", args->overrides,
                  "Override a key: --set network.latency_ms=5 (repeatable)");
  app->add_flag("--quiet", args->quiet, "No live progress line");
  app->add_flag("--no-models", args->noModels,
                "Do not write model-<rank>.bin and peer-<rank>.final.json");
  return {app, [args] { return runSim(*args); }};
}

}  // namespace grapevine::cli
