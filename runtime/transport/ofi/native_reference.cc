#include "runtime/transport/ofi/native_reference.h"

#include <sstream>
#include <vector>

#include "runtime/transport/native_tool.h"

namespace grapevine::transport::ofi {

Result<PingpongResult> parsePingpongOutput(std::string_view output) {
  const std::size_t header = output.rfind("usec/xfer");
  if (header == std::string_view::npos)
    return dataLoss("fi_pingpong: no result header in its output");
  const std::size_t start = output.find('\n', header);
  if (start == std::string_view::npos) return dataLoss("fi_pingpong: no result row");
  std::istringstream row(
      std::string(output.substr(start + 1, output.find('\n', start + 1) - start - 1)));
  std::string bytes, sent, ack, total, time;
  double mbPerSec = 0, usecPerXfer = 0;
  if (!(row >> bytes >> sent >> ack >> total >> time >> mbPerSec >> usecPerXfer)) {
    return dataLoss("fi_pingpong: malformed result row");
  }
  PingpongResult r;
  r.latencyUs = usecPerXfer;
  r.bytesPerSecond = mbPerSec * 1e6;
  return r;
}

Result<PingpongResult> runPingpong(std::size_t bytes, const std::string& provider, int iterations,
                                   double timeoutSeconds) {
  const int port = native_tool::freePort();
  if (port == 0) return unavailable("fi_pingpong: no free port");
  const std::vector<std::string> common = {"fi_pingpong",
                                           "-p",
                                           provider,
                                           "-e",
                                           "rdm",
                                           "-m",
                                           "tagged",
                                           "-S",
                                           std::to_string(bytes),
                                           "-I",
                                           std::to_string(iterations)};
  native_tool::ServerClientRun run;
  run.tool = "fi_pingpong";
  run.installHint = "libfabric-bin";
  run.server = common;
  run.client = common;
  run.server.insert(run.server.end(), {"-B", std::to_string(port)});
  run.client.insert(run.client.end(), {"-P", std::to_string(port), "127.0.0.1"});
  run.serverPort = port;
  run.resultMarker = "usec/xfer";
  run.timeoutSeconds = timeoutSeconds;
  GV_ASSIGN_OR_RETURN(std::string out, native_tool::runServerClient(run));
  GV_ASSIGN_OR_RETURN(PingpongResult r, parsePingpongOutput(out));
  std::string command;
  for (const std::string& a : run.client) command += (command.empty() ? "" : " ") + a;
  r.command = command;
  return r;
}

}  // namespace grapevine::transport::ofi
