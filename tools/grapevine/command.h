// Subcommands of the `grapevine` CLI. Each lives in its own cmd_<name>.cc and registers itself on
// the root CLI::App; main() runs the one the user named and returns its exit code.
//
// Exit codes: 0 success, 1 runtime failure, 2 bad input (config, flags, files), 3 training
// diverged (peer, launch, sim; the summary says where).
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace grapevine::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitBadInput = 2;
inline constexpr int kExitDiverged = 3;
inline constexpr int kExitDegraded = 4;  // launch --strict: the run was degraded (summary.json)

struct Command {
  CLI::App* app = nullptr;   // the subcommand, owned by the root app
  std::function<int()> run;  // runs after parsing succeeded; returns the exit code
};

// One registrar per subcommand (defined in cmd_<name>.cc).
Command registerValidate(CLI::App& root);
Command registerConfig(CLI::App& root);
Command registerTopo(CLI::App& root);
Command registerPeer(CLI::App& root);
// `command`: the words after the first `--` of `grapevine launch CONFIG ... -- COMMAND [ARGS...]`
// (nullopt without a `--`), split off by main() before parsing: CLI11 would let that `--` end a
// multi-value option (--set) and then read the command's own flags (`sh -c`) as launch's. Read when
// the subcommand runs, so it must outlive the returned Command.
Command registerLaunch(CLI::App& root, const std::optional<std::vector<std::string>>& command);
Command registerInfo(CLI::App& root);
Command registerBenchTransport(CLI::App& root);
Command registerBench(CLI::App& root);  // `bench compress`
Command registerBenchRound(CLI::App& root);
Command registerSim(CLI::App& root);
Command registerSweep(CLI::App& root);
Command registerPlot(CLI::App& root);
Command registerEmulate(CLI::App& root);
Command registerSummarize(CLI::App& root);
Command registerEvaluate(CLI::App& root);
Command registerKeygen(CLI::App& root);

// The `bench` parent app, created on first call: other files add their own `bench <what>` child
// to it and return that child as their Command.
CLI::App* benchApp(CLI::App& root);

}  // namespace grapevine::cli
