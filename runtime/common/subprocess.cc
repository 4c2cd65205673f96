#include "runtime/common/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

extern char** environ;

namespace grapevine {
namespace {

std::string errnoText(const char* what) { return std::string(what) + ": " + std::strerror(errno); }

// One standard stream of a child being set up: the fd the child dup2()s onto 0/1/2 (-1: leave it),
// and our end of a pipe.
struct Plumbing {
  int child = -1;
  int ours = -1;
  bool closeChildEnd = false;  // ours to close in the parent after fork (pipe's child end, a file)
};

Status open(const ChildStream& s, bool forWriting, Plumbing* p) {
  switch (s.kind) {
    case ChildStream::Kind::kInherit:
    case ChildStream::Kind::kSameAsStdout:
      return Status::ok();
    case ChildStream::Kind::kNull:
      p->child = ::open("/dev/null", (forWriting ? O_WRONLY : O_RDONLY) | O_CLOEXEC);
      if (p->child < 0) return internalError(errnoText("open /dev/null"));
      p->closeChildEnd = true;
      return Status::ok();
    case ChildStream::Kind::kFile: {
      const int flags =
          forWriting ? (O_WRONLY | O_CREAT | (s.append ? O_APPEND : O_TRUNC)) : O_RDONLY;
      p->child = ::open(s.path.c_str(), flags | O_CLOEXEC, 0644);
      if (p->child < 0) return internalError(errnoText(("open " + s.path).c_str()));
      p->closeChildEnd = true;
      return Status::ok();
    }
    case ChildStream::Kind::kPipe: {
      int fds[2];
      if (::pipe2(fds, O_CLOEXEC) != 0) return internalError(errnoText("pipe"));
      // fds[0] reads, fds[1] writes: the child reads its stdin, writes its stdout/stderr.
      p->child = forWriting ? fds[1] : fds[0];
      p->ours = forWriting ? fds[0] : fds[1];
      p->closeChildEnd = true;
      return Status::ok();
    }
  }
  return Status::ok();
}

void closeAll(Plumbing (&p)[3], bool ours) {
  for (Plumbing& x : p) {
    if (x.closeChildEnd && x.child >= 0) ::close(x.child);
    x.child = -1;
    if (ours && x.ours >= 0) ::close(x.ours);
    if (ours) x.ours = -1;
  }
}

// In the child: the redirections (dup2 clears close-on-exec on the target), process group, hook.
void setUpChild(Plumbing (&p)[3], const SpawnOptions& o) {
  if (p[0].child >= 0) ::dup2(p[0].child, 0);
  if (p[1].child >= 0) ::dup2(p[1].child, 1);
  if (o.err.kind == ChildStream::Kind::kSameAsStdout) {
    ::dup2(1, 2);
  } else if (p[2].child >= 0) {
    ::dup2(p[2].child, 2);
  }
  if (o.newProcessGroup) ::setpgid(0, 0);
  if (o.beforeExec) o.beforeExec();
}

}  // namespace

Subprocess::Subprocess(Subprocess&& o) noexcept
    : pid_(std::exchange(o.pid_, -1)),
      status_(o.status_),
      in_(std::exchange(o.in_, -1)),
      out_(std::exchange(o.out_, -1)),
      err_(std::exchange(o.err_, -1)) {}

Subprocess& Subprocess::operator=(Subprocess&& o) noexcept {
  if (this != &o) {
    if (running()) kill();
    closeFds();
    pid_ = std::exchange(o.pid_, -1);
    status_ = o.status_;
    in_ = std::exchange(o.in_, -1);
    out_ = std::exchange(o.out_, -1);
    err_ = std::exchange(o.err_, -1);
  }
  return *this;
}

Subprocess::~Subprocess() {
  if (running()) kill();
  closeFds();
}

void Subprocess::closeFds() {
  for (int* fd : {&in_, &out_, &err_}) {
    if (*fd >= 0) ::close(*fd);
    *fd = -1;
  }
}

void Subprocess::closeStdin() {
  if (in_ >= 0) ::close(in_);
  in_ = -1;
}

int Subprocess::takeStdout() { return std::exchange(out_, -1); }

namespace {

// Prepares the three streams, forks, and in the child sets them up and calls `run` (which does not
// return). The parent keeps its pipe ends.
Status forkWith(const SpawnOptions& o, const std::function<void()>& run, pid_t* pidOut,
                int (&ours)[3]) {
  Plumbing p[3];
  Status st = open(o.in, false, &p[0]);
  if (st.isOk()) st = open(o.out, true, &p[1]);
  if (st.isOk()) st = open(o.err, true, &p[2]);
  if (!st.isOk()) {
    closeAll(p, true);
    return st;
  }
  const pid_t pid = ::fork();
  if (pid == 0) {
    setUpChild(p, o);
    run();
    ::_exit(127);
  }
  const int forkErrno = errno;
  closeAll(p, pid < 0);
  if (pid < 0) {
    errno = forkErrno;
    return internalError(errnoText("fork"));
  }
  *pidOut = pid;
  for (int i = 0; i < 3; ++i) ours[i] = p[i].ours;
  return Status::ok();
}

}  // namespace

Result<Subprocess> Subprocess::spawn(const SpawnOptions& o) {
  if (o.argv.empty()) return invalidArgument("spawn: empty argv");
  // Everything exec needs, built before fork (no allocation in the child).
  std::vector<char*> argv;
  for (const std::string& a : o.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::vector<std::string> envStrings;
  std::vector<char*> envp;
  if (!o.setEnv.empty()) {
    for (char** e = environ; *e != nullptr; ++e) {
      const std::string_view entry(*e);
      const auto name = entry.substr(0, entry.find('='));
      const bool replaced = std::any_of(o.setEnv.begin(), o.setEnv.end(),
                                        [&](const auto& kv) { return kv.first == name; });
      if (!replaced) envStrings.emplace_back(entry);
    }
    for (const auto& [name, value] : o.setEnv) envStrings.push_back(name + "=" + value);
    for (std::string& e : envStrings) envp.push_back(e.data());
    envp.push_back(nullptr);
  }
  char** envArray = envp.empty() ? environ : envp.data();
  return start(o, [&] { ::execvpe(argv[0], argv.data(), envArray); });
}

Result<Subprocess> Subprocess::forkCall(const std::function<int()>& body, const SpawnOptions& o) {
  return start(o, [&] { ::_exit(body()); });
}

Result<Subprocess> Subprocess::start(const SpawnOptions& o, const std::function<void()>& inChild) {
  pid_t pid = -1;
  int ours[3] = {-1, -1, -1};
  GV_RETURN_IF_ERROR(forkWith(o, inChild, &pid, ours));
  Subprocess s;
  s.pid_ = pid;
  s.in_ = ours[0];
  s.out_ = ours[1];
  s.err_ = ours[2];
  return s;
}

std::optional<int> Subprocess::poll() {
  if (pid_ <= 0) return status_ >= 0 ? std::optional<int>(status_) : std::nullopt;
  int st = 0;
  pid_t r;
  while ((r = ::waitpid(pid_, &st, WNOHANG)) < 0 && errno == EINTR) {
  }
  if (r == 0) return std::nullopt;
  status_ = r == pid_ ? st : -1;  // r < 0: not our child any more (reaped elsewhere)
  pid_ = -1;
  return status_;
}

Result<int> Subprocess::waitUntil(Clock::time_point deadline) {
  // Short sleeps, growing to 10 ms: a quick child is seen at once, a slow one costs little.
  auto nap = std::chrono::microseconds(200);
  for (;;) {
    if (auto st = poll()) return *st;
    const auto now = Clock::now();
    if (now >= deadline) return deadlineExceeded("the child process is still running");
    std::this_thread::sleep_for(std::min<Clock::duration>(nap, deadline - now));
    nap = std::min<std::chrono::microseconds>(nap * 2, std::chrono::milliseconds(10));
  }
}

int Subprocess::wait() {
  if (pid_ <= 0) return status_;
  int st = 0;
  pid_t r;
  while ((r = ::waitpid(pid_, &st, 0)) < 0 && errno == EINTR) {
  }
  status_ = r == pid_ ? st : -1;
  pid_ = -1;
  return status_;
}

void Subprocess::signal(int sig) {
  if (pid_ > 0) ::kill(pid_, sig);
}

int Subprocess::kill() {
  if (pid_ <= 0) return status_;
  ::kill(pid_, SIGKILL);
  return wait();
}

pid_t Subprocess::release() {
  closeFds();
  return std::exchange(pid_, -1);
}

int exitCode(int waitStatus) {
  return waitStatus >= 0 && WIFEXITED(waitStatus) ? WEXITSTATUS(waitStatus) : -1;
}

bool readUntilEof(int fd, std::string* out, Subprocess::Clock::time_point deadline) {
  char buf[4096];
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Subprocess::Clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd, POLLIN, 0};
    const int r = ::poll(&p, 1, static_cast<int>(std::min<long long>(left.count(), 1000)));
    if (r < 0 && errno != EINTR) return false;
    if (r <= 0) continue;
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n == 0) return true;
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return false;
    }
    out->append(buf, static_cast<std::size_t>(n));
  }
}

}  // namespace grapevine
