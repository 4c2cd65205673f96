// Death tests without a framework: runs a body in a forked child and returns its wait status, so a
// test can assert that a check aborts (WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT).
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>

namespace grapevine::test_util {

// Runs `body` in a forked child and returns its wait status. The child dies of SIGABRT plainly
// (Catch2's fatal-signal handler would report a failure from the child's copy of the run); a body
// that returns exits 0.
template <class Body>
int inChild(Body body) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    std::signal(SIGABRT, SIG_DFL);
    body();
    std::_Exit(0);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return status;
}

}  // namespace grapevine::test_util
