#include "runtime/transport/ucx/native_reference.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <sstream>
#include <thread>
#include <vector>

namespace grapevine::transport::ucx {
namespace {

// A TCP port that was free a moment ago (bind to 0, read it back, release it).
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

// Starts `argv` with UCX_TLS set (when given), stdout+stderr into a pipe (or /dev/null).
pid_t spawn(const std::vector<std::string>& argv, const std::string& tls, int* outFd) {
  int pipeFds[2] = {-1, -1};
  if (outFd != nullptr && ::pipe(pipeFds) != 0) return -1;
  const pid_t pid = ::fork();
  if (pid == 0) {
    if (outFd != nullptr) {
      ::dup2(pipeFds[1], 1);
      ::dup2(pipeFds[1], 2);
      ::close(pipeFds[0]);
      ::close(pipeFds[1]);
    } else {
      const int devnull = ::open("/dev/null", O_WRONLY);
      ::dup2(devnull, 1);
      ::dup2(devnull, 2);
    }
    if (!tls.empty()) ::setenv("UCX_TLS", tls.c_str(), 1);
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execvp(args[0], args.data());
    ::_exit(127);
  }
  if (outFd != nullptr) {
    ::close(pipeFds[1]);
    *outFd = pipeFds[0];
  }
  return pid;
}

// Reads `fd` to EOF, waits for `pid`; kills it after the deadline. Returns the exit code or -1.
int collect(pid_t pid, int fd, std::string* out, std::chrono::steady_clock::time_point deadline) {
  char buf[4096];
  while (true) {
    pollfd p{fd, POLLIN, 0};
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      ::kill(pid, SIGKILL);
      break;
    }
    const int r = ::poll(&p, 1, static_cast<int>(std::min<long>(left.count(), 1000)));
    if (r < 0 && errno != EINTR) break;
    if (r <= 0) continue;
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n <= 0) break;
    out->append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace

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
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                            std::chrono::duration<double>(timeoutSeconds));
  const std::string test = kind == PerftestKind::kTagLatency ? "tag_lat" : "tag_bw";
  const int port = freePort();
  if (port == 0) return unavailable("ucx_perftest: no free port");
  std::vector<std::string> server = {"ucx_perftest", "-t", test, "-s", std::to_string(bytes),
                                     "-n", std::to_string(iterations), "-w",
                                     std::to_string(std::max(1, iterations / 10)), "-p",
                                     std::to_string(port)};
  std::vector<std::string> client = server;
  client.insert(client.begin() + 1, "127.0.0.1");
  const pid_t serverPid = spawn(server, ucxTls, nullptr);
  if (serverPid < 0) return unavailable("ucx_perftest: cannot start the server");
  // The client gives up at once if nobody listens yet: retry for a moment while the server starts.
  std::string out;
  int rc = -1;
  for (int attempt = 0; attempt < 20 && std::chrono::steady_clock::now() < deadline; ++attempt) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    int fd = -1;
    const pid_t clientPid = spawn(client, ucxTls, &fd);
    if (clientPid < 0) break;
    out.clear();
    rc = collect(clientPid, fd, &out, deadline);
    if (rc == 0 || out.find("Final:") != std::string::npos) break;
    int status = 0;
    if (::waitpid(serverPid, &status, WNOHANG) == serverPid) break;  // the server died
  }
  ::kill(serverPid, SIGKILL);
  ::waitpid(serverPid, nullptr, 0);
  if (std::chrono::steady_clock::now() >= deadline) {
    return deadlineExceeded("ucx_perftest did not finish in " + std::to_string(timeoutSeconds) + " s");
  }
  if (rc == 127) return unavailable("ucx_perftest not found (install ucx-utils)");
  GV_ASSIGN_OR_RETURN(PerftestResult r, parsePerftestOutput(out, kind));
  std::string command = "UCX_TLS=" + (ucxTls.empty() ? std::string("<default>") : ucxTls);
  for (const std::string& a : client) command += " " + a;
  r.command = command;
  return r;
}

}  // namespace grapevine::transport::ucx
