#include "runtime/transport/ucx/native_reference.h"

#include <algorithm>
#include <sstream>
#include <vector>

#include "runtime/transport/native_tool.h"

namespace grapevine::transport::ucx {

Result<PerftestResult> parsePerftestOutput(std::string_view output, PerftestKind kind) {
  const std::size_t at = output.rfind("Final:");
  if (at == std::string_view::npos) return dataLoss("ucx_perftest: no 'Final:' row in its output");
  std::istringstream row(std::string(output.substr(at + 6, output.find('\n', at) - at - 6)));
  double v[8];
  for (double& x : v) {
    if (!(row >> x)) return dataLoss("ucx_perftest: malformed 'Final:' row");
  }
  PerftestResult r;
  if (kind == PerftestKind::kTagLatency) {
    r.latencyUs = v[3];
  } else {
    r.bytesPerSecond = v[5] * 1024.0 * 1024.0;
  }
  return r;
}

Result<PerftestResult> runPerftest(PerftestKind kind, std::size_t bytes, const std::string& ucxTls,
                                   int iterations, double timeoutSeconds) {
  const std::string test = kind == PerftestKind::kTagLatency ? "tag_lat" : "tag_bw";
  const int port = native_tool::freePort();
  if (port == 0) return unavailable("ucx_perftest: no free port");
  native_tool::ServerClientRun run;
  run.tool = "ucx_perftest";
  run.installHint = "ucx-utils";
  run.server = {"ucx_perftest",
                "-t",
                test,
                "-s",
                std::to_string(bytes),
                "-n",
                std::to_string(iterations),
                "-w",
                std::to_string(std::max(1, iterations / 10)),
                "-p",
                std::to_string(port)};
  run.client = run.server;
  run.client.insert(run.client.begin() + 1, "127.0.0.1");
  run.env = {{"UCX_TLS", ucxTls}};
  run.serverPort = port;
  run.resultMarker = "Final:";
  run.timeoutSeconds = timeoutSeconds;
  GV_ASSIGN_OR_RETURN(std::string out, native_tool::runServerClient(run));
  GV_ASSIGN_OR_RETURN(PerftestResult r, parsePerftestOutput(out, kind));
  std::string command = "UCX_TLS=" + (ucxTls.empty() ? std::string("<default>") : ucxTls);
  for (const std::string& a : run.client) command += " " + a;
  r.command = command;
  return r;
}

}  // namespace grapevine::transport::ucx
