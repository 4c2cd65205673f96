// `grapevine peer CONFIG --rank R`: one peer of a run (one per machine, or started by srun/mpirun).
// Without --rank the rank comes from GRAPEVINE_RANK (`grapevine launch ... -- COMMAND`), then
// SLURM_PROCID, OMPI_COMM_WORLD_RANK or PMIX_RANK: those variables are a launcher's contract with
// us, not configuration, so they are read here (and by the API) and nowhere else.
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <iostream>

#include "runtime/common/log.h"
#include "runtime/engine/driver.h"
#include "tools/grapevine/command.h"
#include "tools/grapevine/load_config.h"

namespace grapevine::cli {
namespace {

std::atomic<bool> g_stop{false};
void onSignal(int) { g_stop = true; }
// SIGUSR1: no neighbour will come any more (`launch` says so to a restarted peer once every other
// peer has exited).
std::atomic<bool> g_neighboursGone{false};
void onNeighboursGone(int) { g_neighboursGone = true; }

struct PeerArgs {
  std::string path;
  int rank = -1;
  std::string out;
  std::uint32_t incarnation = 0;
  bool resume = false;
  std::vector<std::string> overrides;
};

int runPeer(const PeerArgs& a) {
  auto loaded = loadConfig(a.path, a.overrides);
  if (!loaded.isOk()) return kExitBadInput;
  config::Config c = std::move(*loaded);
  if (refuseExternal("peer", a.path, c)) return kExitBadInput;
  if (refuseInproc("peer", a.path, c)) return kExitBadInput;
  int rank = a.rank;
  if (rank < 0) {
    auto fromEnv = config::rankFromEnvironment();
    if (!fromEnv.isOk()) {
      std::cerr << "grapevine peer: " << fromEnv.status().message() << "\n";
      return kExitBadInput;
    }
    rank = *fromEnv;
  }
  if (rank < 0) {
    std::cerr
        << "grapevine peer: no rank: pass --rank R, or set GRAPEVINE_RANK (grapevine launch does), "
           "or run under srun (SLURM_PROCID) or mpirun (OMPI_COMM_WORLD_RANK, PMIX_RANK)\n";
    return kExitBadInput;
  }
  if (rank >= c.peers.count) {
    std::cerr << "grapevine peer: rank " << rank << " is out of range: the config has "
              << c.peers.count << " peers (ranks 0-" << c.peers.count - 1 << ")\n";
    return kExitBadInput;
  }
  log::setLevel(c.run.logLevel);
  log::setPrefix("peer " + std::to_string(rank));
  auto plan = engine::makeRunPlan(c);
  if (!plan.isOk()) {
    log::error(plan.status().toString());
    return kExitFailure;
  }
  std::signal(SIGINT, onSignal);
  std::signal(SIGTERM, onSignal);
  std::signal(SIGPIPE, SIG_IGN);
  std::signal(SIGUSR1, onNeighboursGone);
  engine::PeerRunOptions o;
  o.rank = rank;
  o.incarnation = a.incarnation;
  if (a.resume && a.incarnation == 0) o.incarnation = engine::freshIncarnation();
  o.resume = a.resume;
  o.outDir = a.out;
  o.stop = &g_stop;
  o.neighboursGone = &g_neighboursGone;
  Status st = engine::runPeerProcess(**plan, o);
  if (st.code() == ErrorCode::kAborted) {
    std::cerr << "error: " << st.message() << "\n";
    return kExitDiverged;
  }
  if (!st.isOk()) {
    log::error(st.toString());
    return kExitFailure;
  }
  return kExitOk;
}

}  // namespace

Command registerPeer(CLI::App& root) {
  auto args = std::make_shared<PeerArgs>();
  CLI::App* app =
      root.add_subcommand("peer", "Run one peer of a config (multi-machine runs, srun, mpirun)");
  app->add_option("config", args->path, "YAML config file")->required();
  app->add_option("--rank", args->rank,
                  "This peer's rank (default: GRAPEVINE_RANK, SLURM_PROCID, OMPI_COMM_WORLD_RANK "
                  "or PMIX_RANK)")
      ->check(CLI::NonNegativeNumber);
  app->add_option("--out", args->out, "Output folder (default: output.dir of the config)");
  app->add_option("--incarnation", args->incarnation,
                  "Restart count of this peer (a rejoining peer; with --resume, default: a fresh "
                  "one from the clock)");
  app->add_flag("--resume", args->resume,
                "Continue from the newest checkpoint every peer of the run has (start every peer "
                "with it), or, when the neighbours are training already, rejoin them from this "
                "peer's newest checkpoint (checkpoint.every; docs/faults.md)");
  app->add_option("--set", args->overrides,
                  "Override a key: --set transport.backend=tcp (repeatable)");
  return {app, [args] { return runPeer(*args); }};
}

}  // namespace grapevine::cli
