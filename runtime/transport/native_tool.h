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

// Where every run's server and client output goes (appended, each run headed by its command lines):
// <temp dir>/grapevine-native-tools-<pid>.log. Never this process's stdout or stderr, so a caller
// that prints JSON keeps its stdout clean; it may say where the log is.
std::string logPath();

struct ServerClientRun {
  std::string tool;         // executable name, also the prefix of every error message
  std::string installHint;  // e.g. "ucx-utils": kUnavailable "<tool> not found (install <hint>)"
  std::vector<std::string> server;  // argv of the server (output to logPath())
  std::vector<std::string> client;  // argv of the client (stdout+stderr collected, and logged)
  int serverPort = 0;  // the TCP port the server listens on before a client can connect
  // Set in both children's environment (name, value); skipped when the value is empty.
  std::vector<std::pair<std::string, std::string>> env;
  // Text the client prints once it has a result: its presence counts as success like exit code 0.
  std::string resultMarker;
  double timeoutSeconds = 60;
};

// Starts the server, waits until it listens on serverPort (a client started earlier fails with
// "Connection refused"), then runs the client. Both children are killed by the deadline. Returns
// the client's output (a failed client's too: the tool's parser says what is missing). Errors:
// kUnavailable when the tool is missing or the server exits before it listens (the log has its
// output); kDeadlineExceeded past the timeout.
Result<std::string> runServerClient(const ServerClientRun& run);

}  // namespace grapevine::transport::native_tool
