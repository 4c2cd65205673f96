// What one `grapevine launch` runs, decided before anything starts: the options of its command line
// (Options) and, from them and the config, the output folder and the peers whose host is this one
// (Plan). Plain data, read by every other part of the launch library; only the emulated network
// (emulation.h) adds to a Plan after makePlan.
//
// Errors: every function of this library that can fail returns a Status whose message is what to
// tell the user after "grapevine launch: "; kInvalidArgument means the input is at fault (the
// config, the flags, the hosts), any other code that the run could not be done on this machine.
#pragma once

#include <string>
#include <vector>

#include "runtime/common/status.h"
#include "runtime/config/config.h"

namespace grapevine::launch {

// --restart-scope: what --max-restarts restarts after a peer was killed by a signal.
enum class RestartScope {
  kPeer,  // the crashed peer alone, with --resume: it rejoins the others, which train on
  kRun,   // every peer: stopped, then all started again from their newest common checkpoint
};

// The command line of `grapevine launch` (tools/grapevine/cmd_launch.cc).
struct Options {
  std::string configPath;              // CONFIG, as given (each `grapevine peer` reads it too)
  std::string out;                     // --out; "" for the config's output.dir
  std::vector<std::string> overrides;  // --set, for every peer
  // Everything after `--`: the program started once per local rank instead of `grapevine peer`.
  std::vector<std::string> command;
  bool quiet = false;    // no live progress line
  bool emulate = false;  // --emulate (also on with network.emulate: netns; see emulating())
  int mtu = 9000;        // --emulate-mtu
  bool resume = false;   // every peer gets --resume
  int maxRestarts = 0;   // --max-restarts
  bool strict = false;   // --strict: a degraded run exits with its own status (summary "degraded")
  RestartScope restartScope = RestartScope::kPeer;
  // The exit status of a peer whose training diverged (the CLI's exit code for it): such a peer
  // is neither restarted nor reported as failed; the summary says it once for the run.
  int divergedExitStatus = -1;

  bool emulating(const config::Config& c) const {
    return emulate || c.network.emulate == config::Emulation::kNetns;
  }
};

struct Plan {
  config::Config config;
  std::string out;                             // --out, or output.dir; exists
  std::vector<config::PeerAddress> addresses;  // peers.addresses(), every rank
  std::vector<int> ranks;                      // the peers this launch starts, increasing
  std::vector<std::string> peerOverrides;      // --set for every `grapevine peer`, in order

  // DIR/peer-<rank><suffix>: ".jsonl" (records), ".log" (its output), ".final.json" (result).
  std::string peerFile(int rank, const std::string& suffix) const {
    return out + "/peer-" + std::to_string(rank) + suffix;
  }
};

// Creates the output folder and picks the local peers: a peer's host is local when it is one of
// this machine's names or addresses (any 127.x address included), or `auto` (peers.rendezvous:
// whichever machine the peer runs on). kInvalidArgument when no peer is local.
Result<Plan> makePlan(const Options& options, config::Config config);

}  // namespace grapevine::launch
