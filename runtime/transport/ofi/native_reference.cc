#include "runtime/transport/ofi/native_reference.h"

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

namespace grapevine::transport::ofi {
// The process helpers are the same as the UCX backend's (runtime/transport/ucx/native_reference.cc);
// each backend folder stays self-contained.
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

// Starts `argv`, stdout+stderr into a pipe (or /dev/null).
pid_t spawn(const std::vector<std::string>& argv, int* outFd) {
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

Result<PingpongResult> parsePingpongOutput(std::string_view output) {
  const std::size_t header = output.rfind("usec/xfer");
  if (header == std::string_view::npos) return dataLoss("fi_pingpong: no result header in its output");
  const std::size_t start = output.find('\n', header);
  if (start == std::string_view::npos) return dataLoss("fi_pingpong: no result row");
  std::istringstream row(std::string(output.substr(start + 1, output.find('\n', start + 1) - start - 1)));
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
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                            std::chrono::duration<double>(timeoutSeconds));
  const int port = freePort();
  if (port == 0) return unavailable("fi_pingpong: no free port");
  const std::vector<std::string> common = {"fi_pingpong", "-p", provider, "-e", "rdm", "-m",
                                           "tagged", "-S", std::to_string(bytes), "-I",
                                           std::to_string(iterations)};
  std::vector<std::string> server = common, client = common;
  server.insert(server.end(), {"-B", std::to_string(port)});
  client.insert(client.end(), {"-P", std::to_string(port), "127.0.0.1"});
  const pid_t serverPid = spawn(server, nullptr);
  if (serverPid < 0) return unavailable("fi_pingpong: cannot start the server");
  std::string out;
  int rc = -1;
  for (int attempt = 0; attempt < 20 && std::chrono::steady_clock::now() < deadline; ++attempt) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    int fd = -1;
    const pid_t clientPid = spawn(client, &fd);
    if (clientPid < 0) break;
    out.clear();
    rc = collect(clientPid, fd, &out, deadline);
    if (rc == 0 || out.find("usec/xfer") != std::string::npos) break;
    int status = 0;
    if (::waitpid(serverPid, &status, WNOHANG) == serverPid) break;
  }
  ::kill(serverPid, SIGKILL);
  ::waitpid(serverPid, nullptr, 0);
  if (std::chrono::steady_clock::now() >= deadline) {
    return deadlineExceeded("fi_pingpong did not finish in " + std::to_string(timeoutSeconds) + " s");
  }
  if (rc == 127) return unavailable("fi_pingpong not found (install libfabric-bin)");
  GV_ASSIGN_OR_RETURN(PingpongResult r, parsePingpongOutput(out));
  std::string command;
  for (const std::string& a : client) command += (command.empty() ? "" : " ") + a;
  r.command = command;
  return r;
}

}  // namespace grapevine::transport::ofi
