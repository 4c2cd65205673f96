// Shared process plumbing for the bench references
// (runtime/transport/{ucx,ofi}/native_reference.*): a native benchmark tool run as a server and a
// client process on loopback, the client's output collected. The tool-specific parts (command
// lines, output format) stay with each backend.
//
// Blocking: runs child processes to completion (bounded by the timeout); call it from the bench
// harness, never from the engine loop.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "runtime/common/status.h"

namespace grapevine::transport::native_tool {

// A TCP port on 127.0.0.1 that was free a moment ago (bind to 0, read it back, release it); 0 if
// none.
int freePort();

struct ServerClientRun {
  std::string tool;         // executable name, also the prefix of every error message
  std::string installHint;  // e.g. "ucx-utils": kUnavailable "<tool> not found (install <hint>)"
  std::vector<std::string> server;  // argv of the server (output discarded)
  std::vector<std::string> client;  // argv of the client (stdout+stderr collected)
  // Set in both children's environment (name, value); skipped when the value is empty.
  std::vector<std::pair<std::string, std::string>> env;
  // Text the client prints once it has a result: its presence ends the retries like exit code 0.
  std::string resultMarker;
  double timeoutSeconds = 60;
};

// Starts the server, then the client, retrying the client (up to 20 times, 100 ms apart) while the
// server is still coming up. Both children are killed by the deadline. Returns the client's output.
// Errors: kUnavailable when the server cannot be started or the tool is missing; kDeadlineExceeded
// past the timeout.
Result<std::string> runServerClient(const ServerClientRun& run);

}  // namespace grapevine::transport::native_tool
