// Shared by every subcommand that takes a CONFIG: load it (defaults < YAML < environment < --set),
// print every diagnostic compiler-style on stderr, and say whether it is usable.
#pragma once

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

}  // namespace grapevine::cli
