// The end of a launch: DIR/summary.json and the table on stdout.
#pragma once

#include <memory>

#include "runtime/common/status.h"
#include "runtime/launch/fault_executor.h"
#include "runtime/launch/plan.h"
#include "runtime/launch/supervisor.h"
#include "runtime/netemu/network.h"

namespace grapevine::launch {

// Once every peer has exited: the wall time since the peers started, the fault log, the emulated
// network's totals (then stops it: `network` is reset), and summary.json from every local peer's
// final record and model (engine::makeSummary; a peer without them counts as not finished) plus
// launch's own fields: "launched_peers", "failed_peers", "restarts" (with --max-restarts),
// "faults" (with faults.events) and "network_emulation" (with an emulated network). Writes it
// atomically and prints the summary table, and the divergence message on stderr when the run
// diverged. Not ok when the run plan cannot be rebuilt or the file cannot be written. `degraded`
// (optional) is set to the summary's "degraded": a peer trained alone or below half its degree,
// lost neighbours for good, or left no results.
Status writeSummary(const Options& options, const Plan& plan, const Supervisor& supervisor,
                    const FaultExecutor& faults, std::unique_ptr<netemu::Network>& network,
                    bool* degraded = nullptr);

}  // namespace grapevine::launch
