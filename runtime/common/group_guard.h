// Process groups that must not outlive this process, even when it is SIGKILLed.
//
// A GroupGuard forks a small guardian process that holds the read end of a pipe from us. We tell it
// each process group we start (add) and each one we have reaped (remove). When the pipe reaches end
// of file while groups are still listed — we died without cleaning up (SIGKILL, a crash) — the
// guardian sends SIGTERM to every listed group, waits up to `grace` for them to exit, SIGKILLs what
// is left, and exits. On our normal exit every group has been removed and the guardian just exits.
// `grapevine launch` uses it so that its peers (and their commands' own children) die with it and
// free their ports.
//
// Contracts: the guardian leads its own process group (a terminal's Ctrl-C does not reach it) and
// closes every inherited descriptor except the pipe, so it keeps no socket or file of ours open.
// It makes only async-signal-safe calls (safe to fork from a multi-threaded process). At most
// `capacity` groups are listed at once; add() beyond that fails. Not thread-safe.
#pragma once

#include <sys/types.h>

#include <chrono>

#include "runtime/common/status.h"
#include "runtime/common/subprocess.h"

namespace grapevine {

class GroupGuard {
 public:
  GroupGuard() = default;
  GroupGuard(GroupGuard&&) = default;
  GroupGuard& operator=(GroupGuard&&) = default;
  // Closes the pipe (the guardian then exits, killing whatever is still listed) and reaps it.
  ~GroupGuard();

  static Result<GroupGuard> start(int capacity,
                                  std::chrono::milliseconds grace = std::chrono::seconds(2));

  // Lists process group `pgid` (a child started with newProcessGroup: its pid).
  Status add(pid_t pgid);
  // Unlists it (after reaping its leader: the id may be reused from then on).
  void remove(pid_t pgid);
  // The guardian's pid (tests).
  pid_t pid() const { return guardian_.pid(); }

 private:
  Subprocess guardian_;
  int listed_ = 0;
  int capacity_ = 0;
};

}  // namespace grapevine
