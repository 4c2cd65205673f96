#include "runtime/netemu/ip_tool.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <sstream>

namespace grapevine::netemu {
namespace {

bool executable(const std::string& p) { return ::access(p.c_str(), X_OK) == 0; }

std::string describe(const std::vector<std::string>& args) {
  std::string s = "ip";
  for (const auto& a : args) s += " " + a;
  return s;
}

}  // namespace

std::string ipBinary() {
  static const std::string path = [] {
    if (const char* env = std::getenv("PATH")) {
      std::stringstream ss(env);
      std::string dir;
      while (std::getline(ss, dir, ':')) {
        if (!dir.empty() && executable(dir + "/ip")) return dir + "/ip";
      }
    }
    for (const char* p : {"/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"}) {
      if (executable(p)) return std::string(p);
    }
    return std::string();
  }();
  return path;
}

Status runIp(const std::vector<std::string>& args, const std::string& input) {
  const std::string ip = ipBinary();
  if (ip.empty()) return failedPrecondition("no `ip` binary; install iproute2: tools/install-deps");
  int in[2], err[2];
  if (::pipe2(in, O_CLOEXEC) != 0)
    return internalError(std::string("pipe: ") + std::strerror(errno));
  if (::pipe2(err, O_CLOEXEC) != 0) {
    ::close(in[0]);
    ::close(in[1]);
    return internalError(std::string("pipe: ") + std::strerror(errno));
  }
  std::vector<std::string> argv = {ip};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char*> cargv;
  for (auto& s : argv) cargv.push_back(s.data());
  cargv.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(in[0], 0);
    ::dup2(err[1], 2);
    const int devnull = ::open("/dev/null", O_WRONLY);
    if (devnull >= 0) ::dup2(devnull, 1);
    ::execv(ip.c_str(), cargv.data());
    _exit(127);
  }
  ::close(in[0]);
  ::close(err[1]);
  if (pid < 0) {
    ::close(in[1]);
    ::close(err[0]);
    return internalError(std::string("fork: ") + std::strerror(errno));
  }
  // Feed stdin and drain stderr together so neither pipe can fill up and stall the other side.
  std::size_t written = 0;
  int inFd = in[1];
  if (input.empty()) {
    ::close(inFd);
    inFd = -1;
  } else {
    ::fcntl(inFd, F_SETFL, O_NONBLOCK);
  }
  std::string errText;
  bool errOpen = true;
  // A child that dies never breaks our writes into a SIGPIPE: ignore it for the duration.
  struct sigaction ignore {
  }, old{};
  ignore.sa_handler = SIG_IGN;
  ::sigaction(SIGPIPE, &ignore, &old);
  while (errOpen || inFd >= 0) {
    pollfd fds[2];
    int n = 0;
    if (errOpen) fds[n++] = {err[0], POLLIN, 0};
    if (inFd >= 0) fds[n++] = {inFd, POLLOUT, 0};
    const int ready = ::poll(fds, n, 30000);
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) {  // error or 30 s of silence: a stuck ip is killed, reaped below
      ::kill(pid, SIGKILL);
      break;
    }
    for (int i = 0; i < n; ++i) {
      if (fds[i].fd == err[0] && fds[i].revents) {
        char buf[4096];
        const ssize_t r = ::read(err[0], buf, sizeof buf);
        if (r > 0)
          errText.append(buf, static_cast<std::size_t>(r));
        else if (r == 0 || errno != EINTR)
          errOpen = false;
      } else if (fds[i].fd == inFd && fds[i].revents) {
        const ssize_t w = ::write(inFd, input.data() + written, input.size() - written);
        if (w > 0) written += static_cast<std::size_t>(w);
        if ((w < 0 && errno != EAGAIN && errno != EINTR) || written == input.size()) {
          ::close(inFd);
          inFd = -1;
        }
      }
    }
  }
  if (inFd >= 0) ::close(inFd);
  ::close(err[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  ::sigaction(SIGPIPE, &old, nullptr);
  while (!errText.empty() && (errText.back() == '\n' || errText.back() == ' ')) errText.pop_back();
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return Status::ok();
  std::string what = describe(args);
  if (what.size() > 200) what = what.substr(0, 200) + "...";
  std::string how = WIFEXITED(status) ? "exited with status " + std::to_string(WEXITSTATUS(status))
                                      : "was killed by signal " + std::to_string(WTERMSIG(status));
  return unavailable("`" + what + "` " + how + (errText.empty() ? "" : ": " + errText));
}

}  // namespace grapevine::netemu
