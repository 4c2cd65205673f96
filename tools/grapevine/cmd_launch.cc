// `grapevine launch CONFIG [--out DIR] [-- COMMAND [ARGS...]]`: starts every peer whose host is
// local as a child process (`grapevine peer CONFIG --rank R`, or the user's COMMAND once per local
// rank), shows one live progress line, forwards SIGINT/SIGTERM, reports a peer that dies with its
// exit status and last log lines, and at the end prints a table and writes DIR/summary.json. With
// --emulate (or `network.emulate: netns`) every peer runs in its own network namespace behind the
// link emulator (runtime/netemu), listening on its namespace's address.
//
// A COMMAND is told its part through GRAPEVINE_* variables (runtime/launch/peer_command.h lists
// them; include/grapevine/grapevine.hpp reads them). The progress line, the report of a dead peer
// and the summary read the files the API writes (peer-<rank>.jsonl, peer-<rank>.final.json,
// model-<rank>.bin), as for built-in peers.
//
// This file parses the command line and runs the steps; the work is the launch library's
// (runtime/launch/: the plan, the peers' command lines, the supervisor, the fault executor, the
// emulated network's counters, the summary).
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "runtime/launch/emulation.h"
#include "runtime/launch/fault_executor.h"
#include "runtime/launch/peer_command.h"
#include "runtime/launch/plan.h"
#include "runtime/launch/report.h"
#include "runtime/launch/supervisor.h"
#include "tools/grapevine/command.h"
#include "tools/grapevine/load_config.h"

namespace grapevine::cli {
namespace {

// The command line: launch::Options, with --restart-scope as CLI11 checks it (by name).
struct LaunchArgs {
  launch::Options options;
  std::string restartScope = "peer";  // --restart-scope: peer (rejoin) | run (whole-run restart)

  launch::Options resolved() const {
    launch::Options o = options;
    o.restartScope =
        restartScope == "run" ? launch::RestartScope::kRun : launch::RestartScope::kPeer;
    o.divergedExitStatus = kExitDiverged;
    return o;
  }
};

// The launch library's errors: said on stderr; kInvalidArgument is the input's fault.
int fail(const Status& st) {
  const std::string& m = st.message();
  std::cerr << "grapevine launch: " << m << (m.ends_with('\n') ? "" : "\n");
  return st.code() == ErrorCode::kInvalidArgument ? kExitBadInput : kExitFailure;
}

// The config, or nullopt after saying on stderr why launch cannot run it (bad input, every time).
std::optional<config::Config> loadLaunchConfig(const launch::Options& o) {
  auto loaded = loadConfig(o.configPath, o.overrides);
  if (!loaded.isOk()) return std::nullopt;
  const config::Config& c = *loaded;
  if (o.command.empty() && refuseExternal("launch", o.configPath, c)) return std::nullopt;
  if (refuseInproc("launch", o.configPath, c)) return std::nullopt;
  if (refuseFaults("launch", o.configPath, c)) return std::nullopt;
  if (Status st = launch::checkFaultSchedule(c, o.configPath, o.emulating(c)); !st.isOk()) {
    fail(st);
    return std::nullopt;
  }
  return std::move(*loaded);
}

// `sh -c 'exec x'` as one line for the plan (each word shown; those with spaces quoted).
std::string commandText(const std::vector<std::string>& argv) {
  std::string out;
  for (const auto& a : argv) {
    if (!out.empty()) out += ' ';
    out += a.find_first_of(" \t'\"$") == std::string::npos ? a : "'" + a + "'";
  }
  return out;
}

void printNetwork(const config::Config& c, const netemu::Network& network) {
  const auto& n = c.network;
  char bandwidth[64] = "unlimited";
  if (n.bandwidthMbit > 0) std::snprintf(bandwidth, sizeof bandwidth, "%g Mbit/s", n.bandwidthMbit);
  std::cout << "grapevine launch: emulated network " << network.namespaceName(0) << ".."
            << network.namespaceName(c.peers.count - 1) << " (" << network.address(0)
            << "...), links " << bandwidth << ", " << n.latencyMs << " ms (+0-" << n.jitterMs
            << " ms), loss " << n.lossPercent << "%" << nodeCapText(n)
            << (n.uniform() ? "" : " (with per-peer/per-edge overrides)") << "\n";
}

void printPlan(const launch::Options& o, const launch::Plan& plan) {
  const config::Config& c = plan.config;
  std::cout << "grapevine launch: " << plan.ranks.size() << " of " << c.peers.count
            << " peers on this host"
            << (o.command.empty() ? "" : " (" + commandText(o.command) + ")") << ", "
            << topology::kindName(c.topology.kind) << ", "
            << algorithms::algorithmKindName(c.algorithm.name) << " + "
            << compress::methodName(c.compression.method) << " over " << c.transport.backend << ", "
            << c.run.rounds << " rounds; output in " << plan.out << "/\n";
  if (c.monitoring.prometheusPort > 0 && !plan.ranks.empty()) {
    // Where to point a browser or a scrape config (docs/operations.md).
    const int first = plan.ranks.front(), last = plan.ranks.back();
    std::cout << "grapevine launch: metrics at http://" << plan.addresses[first].host << ":"
              << c.monitoring.prometheusPort + first << "/metrics";
    if (plan.ranks.size() > 1) std::cout << " .. :" << c.monitoring.prometheusPort + last;
    std::cout << " (peer r on prometheus_port + r)\n";
  }
  std::cout << std::flush;
}

// A peer killed by a signal (a crash, the OOM killer, a preempted machine) is the fault a
// decentralized run is built to survive: the run succeeds when any peer finished. A peer that
// exited with a status other than 0 and 3 reported an error of its own (a user program's traceback,
// a peer that could not start), which the exit code passes on.
int exitCode(const launch::Supervisor::Report& r) {
  if (r.stopSignal) return kExitFailure;
  if (r.diverged > 0) return kExitDiverged;
  if (r.errored > 0) return kExitFailure;
  return r.failed == r.launched ? kExitFailure : kExitOk;
}

// One `grapevine launch`, step by step: plan (config, output folder, local peers), the emulated
// network if asked for, start the peers, watch them (executing the fault schedule) until all have
// exited, then the summary. Single-threaded (runtime/launch/supervisor.h).
int runLaunch(const LaunchArgs& a) {
  const launch::Options options = a.resolved();
  std::optional<config::Config> config = loadLaunchConfig(options);
  if (!config) return kExitBadInput;
  auto plan = launch::makePlan(options, std::move(*config));
  if (!plan.isOk()) return fail(plan.status());
  // Declared before the network: on an early return the emulator stops (namespaces deleted) before
  // the supervisor's guardian ends the peers that still run.
  launch::Supervisor supervisor(options, *plan);
  std::unique_ptr<netemu::Network> network;
  if (options.emulating(plan->config)) {
    auto started = launch::startEmulatedNetwork(*plan, options.mtu);
    if (!started.isOk()) return fail(started.status());
    network = std::move(*started);
    printNetwork(plan->config, *network);
  }
  printPlan(options, *plan);
  launch::PeerCommand command(options, *plan, network.get());
  if (Status st = command.writeResolvedConfig(); !st.isOk()) return fail(st);
  launch::FaultExecutor faults(plan->config.faults.events, supervisor, network.get());
  if (Status st = supervisor.start(command); !st.isOk()) return fail(st);
  if (Status st = supervisor.watch([&] { faults.poll(); }); !st.isOk()) return fail(st);
  bool degraded = false;
  if (Status st = launch::writeSummary(options, *plan, supervisor, faults, network, &degraded);
      !st.isOk())
    return fail(st);
  const int code = exitCode(supervisor.report());
  if (code == kExitOk && degraded && options.strict) {
    std::cerr << "grapevine launch: the run was degraded (--strict): see DEGRADED above\n";
    return kExitDegraded;
  }
  return code;
}

}  // namespace

Command registerLaunch(CLI::App& root, const std::optional<std::vector<std::string>>& command) {
  auto args = std::make_shared<LaunchArgs>();
  CLI::App* app = root.add_subcommand(
      "launch",
      "Start every local peer of a config (or `-- COMMAND [ARGS...]`, your program, once per local "
      "rank) and follow the run");
  app->add_option("config", args->options.configPath, "YAML config file")->required();
  app->footer(
      "-- COMMAND [ARGS...]: after the options, the program to run once per local rank instead of "
      "`grapevine peer`, with GRAPEVINE_CONFIG (the resolved config), GRAPEVINE_RANK, "
      "GRAPEVINE_WORLD_SIZE, GRAPEVINE_OUT and PYTHONPATH set (workload.name: external: your "
      "model, through the API; docs/api.md)");
  app->add_option("--out", args->options.out, "Output folder (default: output.dir of the config)");
  app->add_option("--set", args->options.overrides, "Override a key for every peer (repeatable)");
  app->add_flag("--quiet", args->options.quiet, "No live progress line");
  app->add_flag(
      "--emulate", args->options.emulate,
      "Run every peer in its own network namespace behind the link emulator (rate, latency, "
      "jitter, loss from the network: section; needs root); same as network.emulate: netns");
  app->add_option("--emulate-mtu", args->options.mtu, "MTU of the emulated interfaces")
      ->check(CLI::Range(576, 65535));
  app->add_flag("--resume", args->options.resume,
                "Every peer continues from the newest checkpoint all of them have "
                "(checkpoint.every; docs/faults.md)");
  app->add_option("--max-restarts", args->options.maxRestarts,
                  "When a peer is killed by a signal, start it again with --resume (it rejoins "
                  "the running training), up to N restarts in all (docs/faults.md)")
      ->check(CLI::NonNegativeNumber);
  app->add_flag(
      "--strict", args->options.strict,
      "Exit with status 4 when the run was degraded: a peer trained alone or with fewer "
      "than half its neighbours, lost neighbours for good, or left no results (summary.json "
      "\"degraded\", \"degraded_peers\")");
  app->add_option("--restart-scope", args->restartScope,
                  "What --max-restarts restarts: peer (the crashed peer, which rejoins; default) "
                  "or run (stop every peer and restart all from the newest common checkpoint: "
                  "bit-identical to an undisturbed run)")
      ->check(CLI::IsMember({"peer", "run"}));
  return {app, [args, &command] {
            if (command && command->empty()) {
              std::cerr << "grapevine launch: nothing after `--`: give the command to run\n";
              return kExitBadInput;
            }
            if (command) args->options.command = *command;
            return runLaunch(*args);
          }};
}

}  // namespace grapevine::cli
