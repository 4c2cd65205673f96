#include "runtime/launch/report.h"

#include <csignal>
#include <cstring>
#include <iostream>

#include "runtime/engine/setup.h"
#include "runtime/engine/summary.h"
#include "runtime/launch/emulation.h"

namespace grapevine::launch {

Status writeSummary(const Options& options, const Plan& plan, const Supervisor& supervisor,
                    const FaultExecutor& faults, std::unique_ptr<netemu::Network>& network,
                    bool* degraded) {
  const double wall = supervisor.elapsedSeconds();
  const nlohmann::json faultLog = faults.json();  // before the network stops: it reads counters
  const nlohmann::json emulated = stopEmulatedNetwork(network);
  auto runPlan = engine::makeRunPlan(plan.config);
  // Either failure is the run's (exit 1), never the input's: the code is not passed on.
  if (!runPlan.isOk()) return failedPrecondition(runPlan.status().toString());
  const Supervisor::Report report = supervisor.report();
  const std::string interruptedBy = report.stopSignal == SIGINT    ? "SIGINT"
                                    : report.stopSignal == SIGTERM ? "SIGTERM"
                                    : report.stopSignal != 0       ? strsignal(report.stopSignal)
                                                                   : "";
  auto summary =
      engine::makeSummary(**runPlan, engine::readPeerResults(plan.out, supervisor.ranks()), wall,
                          plan.config.transport.backend, interruptedBy);
  if (report.stopSignal || !report.failedAtStartup.empty())
    summary["stopped_peers"] = report.stopped;
  if (!report.failedAtStartup.empty()) summary["failed_at_startup"] = report.failedAtStartup;
  summary["launched_peers"] = report.launched;
  summary["failed_peers"] = report.failed;
  if (options.maxRestarts > 0) summary["restarts"] = report.restarts;
  if (!faultLog.is_null()) summary["faults"] = faultLog;
  if (!emulated.is_null()) summary["network_emulation"] = emulated;
  if (Status st = engine::writeJsonFile(plan.out + "/summary.json", summary); !st.isOk()) {
    return failedPrecondition(st.toString());
  }
  std::cout << "\n"
            << engine::summaryTable(summary) << "summary: " << plan.out << "/summary.json\n";
  if (summary.value("diverged", false)) {
    std::cerr << "error: " << summary.value("diverged_message", std::string()) << "\n";
  }
  if (degraded) *degraded = summary.value("degraded", false);
  return Status::ok();
}

}  // namespace grapevine::launch
