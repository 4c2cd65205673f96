// The one way this code base starts a child process: argv with environment changes, where the
// child's stdin / stdout / stderr go (inherited, /dev/null, a file, a pipe), an optional hook run
// in the child just before exec, then waiting with a deadline, signalling and killing. forkCall()
// runs a function of this program in the child instead of exec-ing another one.
//
// Contracts:
//   * Everything the child needs (argv, environment, file names) is prepared before fork(); between
//     fork() and exec the child makes only async-signal-safe calls, plus `beforeExec` (which must
//     do the same). So spawning is safe from a multi-threaded process.
//   * A program that cannot be exec'd (not found, not executable) exits with code 127, as a shell
//     reports it; spawn() itself fails only when fork() or a pipe fails.
//   * Pipes and files are opened close-on-exec on our side: no other child inherits them.
//   * A Subprocess owns its child: the destructor of one still running kills it (SIGKILL) and reaps
//     it. release() hands the pid to a caller that reaps children itself (e.g. waitpid(-1)).
//   * Not thread-safe: one thread uses a Subprocess at a time. wait() / waitUntil() block.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "runtime/common/status.h"

namespace grapevine {

// Where one standard stream of the child goes.
struct ChildStream {
  enum class Kind { kInherit, kNull, kFile, kPipe, kSameAsStdout };
  Kind kind = Kind::kInherit;
  std::string path;  // kFile: created (0644) and truncated, or appended to
  bool append = false;

  static ChildStream inherit() { return {}; }
  static ChildStream null() { return {Kind::kNull, {}, false}; }
  static ChildStream file(std::string path, bool append = false) {
    return {Kind::kFile, std::move(path), append};
  }
  static ChildStream pipe() { return {Kind::kPipe, {}, false}; }
  // stderr only: the same destination as stdout (`2>&1`).
  static ChildStream sameAsStdout() { return {Kind::kSameAsStdout, {}, false}; }
};

struct SpawnOptions {
  // argv[0] is searched on PATH unless it contains a '/'.
  std::vector<std::string> argv;
  // Set in the child's environment (on top of ours); an empty value sets an empty variable.
  std::vector<std::pair<std::string, std::string>> setEnv;
  ChildStream in = ChildStream::inherit();
  ChildStream out = ChildStream::inherit();
  ChildStream err = ChildStream::inherit();
  // The child leads a new process group (setpgid(0, 0)): a terminal's Ctrl-C then reaches only us.
  bool newProcessGroup = false;
  // Runs in the child after the redirections, just before exec (or before the body of forkCall).
  // Async-signal-safe calls only (prctl, setpriority, ...).
  std::function<void()> beforeExec;
};

class Subprocess {
 public:
  using Clock = std::chrono::steady_clock;

  Subprocess() = default;
  Subprocess(Subprocess&& other) noexcept;
  Subprocess& operator=(Subprocess&& other) noexcept;
  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;
  ~Subprocess();

  // Starts options.argv. Errors: kInvalidArgument (empty argv), kInternal (pipe, fork).
  static Result<Subprocess> spawn(const SpawnOptions& options);
  // Forks and runs `body` in the child, whose return value is the child's exit code (argv and
  // setEnv of `options` are ignored). For code that must run in a child of its own, e.g. with
  // file descriptors or memory of this process; the usual fork rules apply to what `body` calls.
  static Result<Subprocess> forkCall(const std::function<int()>& body,
                                     const SpawnOptions& options = {});

  pid_t pid() const { return pid_; }
  // Started and not yet reaped.
  bool running() const { return pid_ > 0; }
  // Our ends of the kPipe streams (-1 otherwise). Owned by this object until taken.
  int stdinFd() const { return in_; }
  int stdoutFd() const { return out_; }
  int stderrFd() const { return err_; }
  void closeStdin();
  // Hands our end to the caller, who closes it.
  int takeStdout();

  // The wait status (as waitpid() gives it) once the child has exited, nullopt while it runs.
  // Non-blocking.
  std::optional<int> poll();
  // Blocks until the child exits or the deadline passes: the wait status, or kDeadlineExceeded (the
  // child is left running).
  Result<int> waitUntil(Clock::time_point deadline);
  // Blocks until the child exits: its wait status.
  int wait();
  // Sends `signal` to the child while it runs (no-op otherwise).
  void signal(int signal);
  // SIGKILL, then reap: the wait status (or the earlier one if it had exited).
  int kill();
  // Forget the child without waiting: the caller reaps it. Returns its pid (-1 if none).
  pid_t release();
  // The wait status of a child that has been reaped, -1 before.
  int status() const { return status_; }

 private:
  // Forks with options' redirections, runs `inChild` in the child (it must not return), and returns
  // the parent's handle holding the child's pid and our ends of its pipes.
  static Result<Subprocess> start(const SpawnOptions& options,
                                  const std::function<void()>& inChild);
  void closeFds();

  pid_t pid_ = -1;
  int status_ = -1;
  int in_ = -1, out_ = -1, err_ = -1;
};

// Exit code of a wait status; -1 when the child was killed by a signal.
int exitCode(int waitStatus);

// Reads `fd` until EOF or the deadline; true on EOF. Appends what was read to `out`.
bool readUntilEof(int fd, std::string* out, Subprocess::Clock::time_point deadline);

}  // namespace grapevine
