#include "runtime/transport/native_tool.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "runtime/common/subprocess.h"

namespace grapevine::transport::native_tool {
namespace {

using Clock = std::chrono::steady_clock;

// Whether some socket listens on TCP `port` (any address, IPv4 or IPv6), from /proc/net/tcp{,6}.
// Read-only: unlike a probing connect(), it does not use up a server's one accept().
bool tcpListening(int port) {
  char hex[8];
  std::snprintf(hex, sizeof hex, ":%04X", port);
  for (const char* file : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream in(file);
    std::string line;
    std::getline(in, line);  // header
    while (std::getline(in, line)) {
      std::istringstream fields(line);
      std::string slot, local, remote, state;
      fields >> slot >> local >> remote >> state;
      if (state == "0A" && local.size() > 5 && local.compare(local.size() - 5, 5, hex) == 0) {
        return true;
      }
    }
  }
  return false;
}

std::string commandLine(const std::vector<std::string>& argv,
                        const std::vector<std::pair<std::string, std::string>>& env) {
  std::string s;
  for (const auto& [name, value] : env) {
    if (!value.empty()) s += name + "=" + value + " ";
  }
  for (const std::string& a : argv) s += (s.empty() || s.back() == ' ' ? "" : " ") + a;
  return s;
}

void appendToLog(const std::string& text) { std::ofstream(logPath(), std::ios::app) << text; }

}  // namespace

std::string logPath() {
  static const std::string path =
      (std::filesystem::temp_directory_path() /
       ("grapevine-native-tools-" + std::to_string(::getpid()) + ".log"))
          .string();
  return path;
}

int freePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  int port = 0;
  if (fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
    port = ntohs(a.sin_port);
  }
  if (fd >= 0) ::close(fd);
  return port;
}

Result<std::string> runServerClient(const ServerClientRun& run) {
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(run.timeoutSeconds));
  auto timedOut = [&] {
    return deadlineExceeded(run.tool + " did not finish in " + std::to_string(run.timeoutSeconds) +
                            " s");
  };
  auto notFound = [&] {
    return unavailable(run.tool + " not found (install " + run.installHint + ")");
  };
  if (run.serverPort <= 0) return invalidArgument(run.tool + ": no server port to wait for");
  std::vector<std::pair<std::string, std::string>> env;  // empty values are left unset
  for (const auto& kv : run.env) {
    if (!kv.second.empty()) env.push_back(kv);
  }
  appendToLog("\n$ " + commandLine(run.server, run.env) + " &\n");
  SpawnOptions serverOptions;
  serverOptions.argv = run.server;
  serverOptions.setEnv = env;
  serverOptions.out = ChildStream::file(logPath(), /*append=*/true);
  serverOptions.err = ChildStream::sameAsStdout();
  auto server = Subprocess::spawn(serverOptions);
  if (!server.isOk()) return unavailable(run.tool + ": cannot start the server");

  // The client gives up at once if nobody listens yet: start it once the server listens. Polled
  // (the server's start-up is a few ms to a second), bounded by the deadline.
  auto nap = std::chrono::milliseconds(1);
  while (!tcpListening(run.serverPort)) {
    if (auto st = server->poll()) {
      if (exitCode(*st) == 127) return notFound();
      return unavailable(run.tool + ": the server exited (" + std::to_string(exitCode(*st)) +
                         ") before listening on port " + std::to_string(run.serverPort) + "; see " +
                         logPath());
    }
    if (Clock::now() >= deadline) return timedOut();
    std::this_thread::sleep_for(nap);
    nap = std::min(nap * 2, std::chrono::milliseconds(20));
  }

  appendToLog("$ " + commandLine(run.client, run.env) + "\n");
  SpawnOptions clientOptions;
  clientOptions.argv = run.client;
  clientOptions.setEnv = env;
  clientOptions.out = ChildStream::pipe();
  clientOptions.err = ChildStream::sameAsStdout();
  auto client = Subprocess::spawn(clientOptions);
  if (!client.isOk()) return unavailable(run.tool + ": cannot start the client");
  std::string out;
  const bool complete = readUntilEof(client->stdoutFd(), &out, deadline);
  appendToLog(out);
  if (!complete) return timedOut();  // both children are killed as they go out of scope
  auto status = client->waitUntil(deadline);
  if (!status.isOk()) return timedOut();
  if (exitCode(*status) == 127) return notFound();
  return out;
}

}  // namespace grapevine::transport::native_tool
