// Shared by every subcommand that takes a CONFIG: load it (defaults < YAML < environment < --set),
// print every diagnostic compiler-style on stderr, and say whether it is usable.
#pragma once

#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "runtime/common/status.h"
#include "runtime/config/loader.h"

namespace grapevine::cli {

// The config, or kInvalidArgument when it has errors. Warnings and errors are printed to `err`
// either way, so a caller only maps the error to its exit code (the status message adds nothing
// for the user).
inline Result<config::Config> loadConfig(const std::string& path,
                                         const std::vector<std::string>& overrides,
                                         std::ostream& err = std::cerr) {
  config::LoadOptions options;
  options.overrides = overrides;
  config::LoadResult r = config::loadFile(path, options);
  err << config::formatDiagnostics(r.diagnostics);
  if (!r.ok()) return invalidArgument(path + ": the config has errors");
  return std::move(r.config);
}

// ", node interfaces X Mbit/s" for the one-line network descriptions of emulate, launch and sim
// (network.node_bandwidth_mbit; per-peer values show as overrides), or "" without a default cap.
inline std::string nodeCapText(const config::NetworkSection& n) {
  if (n.nodeBandwidthMbit <= 0) return "";
  char text[96];
  std::snprintf(text, sizeof text, ", node interfaces %g Mbit/s each way", n.nodeBandwidthMbit);
  return text;
}

// `workload.name: external` leaves the model to the user's program (the API, docs/api.md): a
// command that would train a built-in workload has nothing to run. True, after saying so on `err`
// with what to do instead, when `config` is such a config; the caller exits with kExitBadInput.
inline bool refuseExternal(const std::string& command, const std::string& path,
                           const config::Config& config, std::ostream& err = std::cerr) {
  if (config.workload.name != train::WorkloadKind::kExternal) return false;
  err << "grapevine " << command << ": " << path
      << ": workload.name is 'external': the model is your program's, trained through the API "
         "(docs/api.md); start it with `grapevine launch "
      << path << " -- COMMAND [ARGS...]`\n";
  return true;
}

// transport.backend: inproc connects peers that live in one process (the tests' threads, `bench
// transport`); between the processes `peer` and `launch` start, its messages never arrive and every
// round would run without the neighbours. True (and says so) when `config` asks for it.
inline bool refuseInproc(const std::string& command, const std::string& path,
                         const config::Config& config, std::ostream& err = std::cerr) {
  if (config.transport.backend != "inproc") return false;
  err << "grapevine " << command << ": " << path
      << ": transport.backend is 'inproc', which connects peers inside one process only; every "
         "peer here is a process of its own: use tcp, ucx or libfabric\n";
  return true;
}

// faults.events: `sim` executes a schedule by round (at_round, rounds), `launch` by wall time from
// the first round (at_seconds, seconds). True (and says which item and why) when `command` cannot
// execute the schedule.
inline bool refuseFaults(const std::string& command, const std::string& path,
                         const config::Config& config, std::ostream& err = std::cerr) {
  const bool sim = command == "sim";
  for (std::size_t i = 0; i < config.faults.events.size(); ++i) {
    const auto& e = config.faults.events[i];
    const std::string where = "grapevine " + command + ": " + path + ": faults.events: item " +
                              std::to_string(i) + " (" + e.describe() + ")";
    if (sim && !e.byRound()) {
      err << where
          << ": grapevine sim counts rounds: give at_round and rounds (at_seconds and seconds "
             "are for grapevine launch --emulate)\n";
      return true;
    }
    if (!sim && e.byRound()) {
      err << where << ": grapevine " << command
          << " executes faults by wall time: give at_seconds and seconds (at_round and rounds "
             "are for grapevine sim)\n";
      return true;
    }
  }
  return false;
}

}  // namespace grapevine::cli
