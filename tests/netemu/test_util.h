// Helpers of the netemu tests: skip without privileges, run commands, read process CPU time.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "runtime/common/subprocess.h"
#include "runtime/netemu/network.h"
#include "tests/test_util/skip.h"

namespace netemu_test {

// Exits the whole binary with the skip code when no Network can be built here: every case of
// netemu_test and netemu_cli_test needs one (a case that needs more, like iperf3, uses GV_SKIP).
inline void requireNetemu() {
  const grapevine::Status s = grapevine::netemu::checkPrerequisites();
  if (!s.isOk()) grapevine::test_util::exitMissing("netemu", s.message());
}

inline bool haveProgram(const std::string& name) {
  return std::system(("command -v " + name + " >/dev/null 2>&1").c_str()) == 0;
}

// A child process running argv with stdout and stderr into `outPath` (runtime/common/subprocess.h).
struct Process {
  pid_t pid = -1;
  std::string outPath;
  grapevine::Subprocess child;

  Process() = default;
  Process(Process&&) = default;
  Process& operator=(Process&&) = default;

  static Process start(const std::vector<std::string>& argv, const std::string& outPath) {
    Process p;
    p.outPath = outPath;
    grapevine::SpawnOptions o;
    o.argv = argv;
    o.out = grapevine::ChildStream::file(outPath);
    o.err = grapevine::ChildStream::sameAsStdout();
    auto made = grapevine::Subprocess::spawn(o);
    if (made.isOk()) {
      p.child = std::move(*made);
      p.pid = p.child.pid();
    }
    return p;
  }

  // Exit status (as from waitpid) or -1 when it ran past the timeout (then it is killed).
  int wait(double timeoutSeconds) {
    const auto deadline = std::chrono::steady_clock::now() +
                          std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                              std::chrono::duration<double>(timeoutSeconds));
    auto status = child.waitUntil(deadline);
    pid = -1;
    if (!status.isOk()) {
      child.kill();
      return -1;
    }
    return *status;
  }

  void stop() {
    if (child.running()) {
      child.signal(SIGTERM);
      wait(3);
    }
  }

  std::string output() const {
    std::ifstream in(outPath);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }

  ~Process() { stop(); }
};

// utime + stime of a process in seconds (from /proc/<pid>/stat), -1 when unreadable.
inline double cpuSeconds(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  if (!std::getline(in, text)) return -1;
  std::istringstream fields(text.substr(text.rfind(')') + 2));
  std::string f;
  long long utime = 0, stime = 0;
  for (int i = 3; fields >> f; ++i) {  // field 3 is the state
    if (i == 14) utime = std::stoll(f);
    if (i == 15) {
      stime = std::stoll(f);
      break;
    }
  }
  return static_cast<double>(utime + stime) / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

// Whether a process exists and is not a zombie.
inline bool processLives(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  if (!std::getline(in, text)) return false;
  const char state = text[text.rfind(')') + 2];
  return state != 'Z' && state != 'X';
}

inline std::string tempPath(const std::string& name) {
  return "/tmp/gv-netemu-test-" + std::to_string(::getpid()) + "-" + name;
}

}  // namespace netemu_test
