// What each local peer runs: `grapevine peer CONFIG --rank R --out DIR [--resume] --set ...`, or
// the user's COMMAND once per local rank, told its part through the environment (the launcher's
// contract with programs that use the API, include/grapevine/grapevine.hpp, which reads the same
// variables):
//   GRAPEVINE_CONFIG      DIR/config.resolved.yaml: the effective config (overrides, --out and the
//                         emulated addresses applied), written before any command starts
//   GRAPEVINE_RANK        this process's rank
//   GRAPEVINE_WORLD_SIZE  peers.count
//   GRAPEVINE_OUT         DIR (absolute), where records, models and final results go
//   GRAPEVINE_RESUME      1 with --resume and for a --max-restarts restart (the API then continues
//                         from the checkpoints: Options::resume), else 0
//   PYTHONPATH            the Python module's folder first (pythonModuleDir()), when it exists
// With an emulated network, every argv starts with the `ip netns exec` prefix of the peer's
// namespace. Main thread only.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "runtime/common/status.h"
#include "runtime/launch/plan.h"
#include "runtime/netemu/network.h"

namespace grapevine::launch {

// This program's own path (/proc/self/exe): what `grapevine peer` is started from.
std::string selfPath();

// The folder of the `grapevine` Python module that belongs to the binary at `self`, or "" when
// there is none: <bin>/../python in a build tree (build/bin/grapevine, build/python), or
// <prefix>/GRAPEVINE_INSTALL_PYTHONDIR (lib/grapevine/python, with the platform's lib folder) for
// an installed binary (<prefix>/bin/grapevine).
std::string pythonModuleDir(const std::string& self);

class PeerCommand {
 public:
  // `network`: the emulated network, or null; it must outlive every argv() call.
  PeerCommand(const Options& options, const Plan& plan, const netemu::Network* network)
      : options_(options), plan_(plan), network_(network) {}

  // `grapevine peer` (no COMMAND).
  bool builtIn() const { return options_.command.empty(); }

  // With a COMMAND, writes DIR/config.resolved.yaml (GRAPEVINE_CONFIG) and checks that it loads
  // back as the same config; nothing to do for `grapevine peer`. Once, before the first peer
  // starts.
  Status writeResolvedConfig();

  // The argv that starts `rank` (`self`: selfPath()). `resumeAll`: every peer of the run resumes
  // (--resume, or a restart of the run): `--resume` before the overrides. `resuming`: this start
  // resumes (a restarted peer): `--resume` at the end, when not there yet. A COMMAND gets neither.
  std::vector<std::string> argv(int rank, const std::string& self, bool resumeAll,
                                bool resuming) const;

  // The variables a COMMAND gets (see above); empty for `grapevine peer`. `resume`: the command
  // continues from its checkpoints (GRAPEVINE_RESUME=1; 0 otherwise).
  std::vector<std::pair<std::string, std::string>> environment(int rank, const std::string& self,
                                                               bool resume) const;

 private:
  const Options& options_;
  const Plan& plan_;
  const netemu::Network* network_;
  std::string resolvedConfig_;  // absolute path of DIR/config.resolved.yaml (COMMAND only)
};

}  // namespace grapevine::launch
