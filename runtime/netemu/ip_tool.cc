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

#include "runtime/common/subprocess.h"

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
  SpawnOptions o;
  o.argv = {ip};
  o.argv.insert(o.argv.end(), args.begin(), args.end());
  o.in = ChildStream::pipe();
  o.out = ChildStream::null();
  o.err = ChildStream::pipe();
  auto child = Subprocess::spawn(o);
  if (!child.isOk()) return internalError(child.status().message());
  // Feed stdin and drain stderr together so neither pipe can fill up and stall the other side.
  std::size_t written = 0;
  int inFd = child->stdinFd();
  const int errFd = child->stderrFd();
  if (input.empty()) {
    child->closeStdin();
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
    if (errOpen) fds[n++] = {errFd, POLLIN, 0};
    if (inFd >= 0) fds[n++] = {inFd, POLLOUT, 0};
    const int ready = ::poll(fds, n, 30000);
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) {  // error or 30 s of silence: a stuck ip is killed, reaped below
      child->signal(SIGKILL);
      break;
    }
    for (int i = 0; i < n; ++i) {
      if (fds[i].fd == errFd && fds[i].revents) {
        char buf[4096];
        const ssize_t r = ::read(errFd, buf, sizeof buf);
        if (r > 0)
          errText.append(buf, static_cast<std::size_t>(r));
        else if (r == 0 || errno != EINTR)
          errOpen = false;
      } else if (fds[i].fd == inFd && fds[i].revents) {
        const ssize_t w = ::write(inFd, input.data() + written, input.size() - written);
        if (w > 0) written += static_cast<std::size_t>(w);
        if ((w < 0 && errno != EAGAIN && errno != EINTR) || written == input.size()) {
          child->closeStdin();
          inFd = -1;
        }
      }
    }
  }
  child->closeStdin();
  const int status = child->wait();
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
