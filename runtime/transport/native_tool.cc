#include "runtime/transport/native_tool.h"

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
#include <cstdlib>
#include <thread>

namespace grapevine::transport::native_tool {
namespace {

// Starts `argv` with `env` set, stdout+stderr into a pipe (or /dev/null).
pid_t spawn(const std::vector<std::string>& argv,
            const std::vector<std::pair<std::string, std::string>>& env, int* outFd) {
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
    for (const auto& [name, value] : env) {
      if (!value.empty()) ::setenv(name.c_str(), value.c_str(), 1);
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
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                            std::chrono::duration<double>(run.timeoutSeconds));
  const pid_t serverPid = spawn(run.server, run.env, nullptr);
  if (serverPid < 0) return unavailable(run.tool + ": cannot start the server");
  // The client gives up at once if nobody listens yet: retry for a moment while the server starts.
  std::string out;
  int rc = -1;
  for (int attempt = 0; attempt < 20 && std::chrono::steady_clock::now() < deadline; ++attempt) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    int fd = -1;
    const pid_t clientPid = spawn(run.client, run.env, &fd);
    if (clientPid < 0) break;
    out.clear();
    rc = collect(clientPid, fd, &out, deadline);
    if (rc == 0 || out.find(run.resultMarker) != std::string::npos) break;
    int status = 0;
    if (::waitpid(serverPid, &status, WNOHANG) == serverPid) break;  // the server died
  }
  ::kill(serverPid, SIGKILL);
  ::waitpid(serverPid, nullptr, 0);
  if (std::chrono::steady_clock::now() >= deadline) {
    return deadlineExceeded(run.tool + " did not finish in " + std::to_string(run.timeoutSeconds) +
                            " s");
  }
  if (rc == 127) return unavailable(run.tool + " not found (install " + run.installHint + ")");
  return out;
}

}  // namespace grapevine::transport::native_tool
