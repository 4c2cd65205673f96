// The child-process helper (runtime/common/subprocess.h): exit codes, environment changes, every
// kind of redirection, the pre-exec hook, process groups, deadlines, kill, forkCall, release.
#include "runtime/common/subprocess.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

using namespace grapevine;
using Clock = std::chrono::steady_clock;

namespace {

std::string readFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string scratch(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          ("gv-subprocess-test-" + std::to_string(::getpid()) + "-" + name))
      .string();
}

Subprocess sh(const std::string& script, SpawnOptions o = {}) {
  o.argv = {"sh", "-c", script};
  auto p = Subprocess::spawn(o);
  INFO((p.isOk() ? std::string() : p.status().toString()));
  REQUIRE(p.isOk());
  return std::move(*p);
}

std::string readAllOf(int fd) {
  std::string out;
  REQUIRE(readUntilEof(fd, &out, Clock::now() + std::chrono::seconds(10)));
  return out;
}

}  // namespace

TEST_CASE("spawn: exit codes, PATH search, 127 for a program that does not exist") {
  CHECK(exitCode(sh("exit 0").wait()) == 0);
  CHECK(exitCode(sh("exit 3").wait()) == 3);
  SpawnOptions o;
  o.argv = {"/nonexistent/program"};
  auto missing = Subprocess::spawn(o);
  REQUIRE(missing.isOk());
  CHECK(exitCode(missing->wait()) == 127);
  o.argv = {"grapevine-no-such-program-on-path"};
  auto missingOnPath = Subprocess::spawn(o);
  REQUIRE(missingOnPath.isOk());
  CHECK(exitCode(missingOnPath->wait()) == 127);
  o.argv = {};
  CHECK(Subprocess::spawn(o).status().code() == ErrorCode::kInvalidArgument);
}

TEST_CASE("spawn: environment changes reach the child only") {
  SpawnOptions o;
  o.setEnv = {{"GV_SUBPROCESS_TEST", "hello"}, {"HOME", "/elsewhere"}};
  o.out = ChildStream::pipe();
  auto p = sh("echo \"$GV_SUBPROCESS_TEST $HOME\"; test -n \"$PATH\"", o);
  CHECK(readAllOf(p.stdoutFd()) == "hello /elsewhere\n");
  CHECK(exitCode(p.wait()) == 0);
  CHECK(std::getenv("GV_SUBPROCESS_TEST") == nullptr);
}

TEST_CASE("spawn: stdout and stderr to a file, to a pipe, to /dev/null; stdin from a pipe") {
  const std::string log = scratch("log");
  {
    SpawnOptions o;
    o.out = ChildStream::file(log);
    o.err = ChildStream::sameAsStdout();
    CHECK(exitCode(sh("echo out; echo err >&2", o).wait()) == 0);
    CHECK(readFile(log) == "out\nerr\n");
    o.out = ChildStream::file(log, /*append=*/true);
    CHECK(exitCode(sh("echo more", o).wait()) == 0);
    CHECK(readFile(log) == "out\nerr\nmore\n");
    o.out = ChildStream::file(log);  // truncates
    CHECK(exitCode(sh("echo fresh", o).wait()) == 0);
    CHECK(readFile(log) == "fresh\n");
  }
  {
    SpawnOptions o;
    o.out = ChildStream::null();
    o.err = ChildStream::pipe();
    auto p = sh("echo gone; echo kept >&2", o);
    CHECK(p.stdoutFd() == -1);
    CHECK(readAllOf(p.stderrFd()) == "kept\n");
    CHECK(exitCode(p.wait()) == 0);
  }
  {
    SpawnOptions o;
    o.in = ChildStream::pipe();
    o.out = ChildStream::pipe();
    auto p = sh("tr a-z A-Z", o);
    const std::string text = "shout\n";
    REQUIRE(::write(p.stdinFd(), text.data(), text.size()) == static_cast<ssize_t>(text.size()));
    p.closeStdin();
    CHECK(readAllOf(p.stdoutFd()) == "SHOUT\n");
    CHECK(exitCode(p.wait()) == 0);
  }
  std::filesystem::remove(log);
}

TEST_CASE("spawn: our pipe ends are not inherited by a later child") {
  SpawnOptions o;
  o.out = ChildStream::pipe();
  auto first = sh("cat >/dev/null; echo done", [] {
    SpawnOptions x;
    x.in = ChildStream::pipe();
    x.out = ChildStream::pipe();
    return x;
  }());
  // A second child that outlives the first: if it held a copy of first's stdin, `cat` never sees
  // EOF.
  auto second = sh("exec sleep 5", o);  // exec: kill() ends the sleep itself, not only a shell
  first.closeStdin();
  CHECK(readAllOf(first.stdoutFd()) == "done\n");
  CHECK(exitCode(first.wait()) == 0);
  second.kill();
}

TEST_CASE("spawn: the pre-exec hook runs in the child; a new process group") {
  SpawnOptions o;
  o.out = ChildStream::pipe();
  o.newProcessGroup = true;
  o.beforeExec = [] {  // async-signal-safe, and visible after exec: the working directory
    if (::chdir("/") != 0) ::_exit(99);
  };
  REQUIRE(std::filesystem::current_path() != "/");
  auto p = sh("pwd; ps -o pgid= -p $$ | tr -d ' '", o);
  const std::string out = readAllOf(p.stdoutFd());
  CHECK(out == "/\n" + std::to_string(p.pid()) + "\n");
  CHECK(std::filesystem::current_path() != "/");  // ours is unchanged
  CHECK(exitCode(p.wait()) == 0);
}

TEST_CASE("waitUntil: a deadline leaves the child running; kill ends it; the destructor too") {
  auto p = sh("exec sleep 30");  // exec: the pid is the sleep, so nothing outlives the test
  const auto t0 = Clock::now();
  auto r = p.waitUntil(Clock::now() + std::chrono::milliseconds(200));
  CHECK(r.status().code() == ErrorCode::kDeadlineExceeded);
  CHECK(Clock::now() - t0 >= std::chrono::milliseconds(200));
  CHECK(Clock::now() - t0 < std::chrono::seconds(5));
  CHECK(p.running());
  CHECK_FALSE(p.poll().has_value());
  const int status = p.kill();
  CHECK(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGKILL);
  CHECK(exitCode(status) == -1);
  CHECK_FALSE(p.running());

  auto quick = sh("exit 4");
  auto done = quick.waitUntil(Clock::now() + std::chrono::seconds(10));
  REQUIRE(done.isOk());
  CHECK(exitCode(*done) == 4);
  CHECK(quick.status() == *done);

  pid_t pid = -1;
  {
    auto doomed = sh("exec sleep 30");
    pid = doomed.pid();
    CHECK(::kill(pid, 0) == 0);
  }
  CHECK(::kill(pid, 0) != 0);  // killed and reaped: no such process
}

TEST_CASE("signal: the child sees it") {
  SpawnOptions o;
  o.out = ChildStream::pipe();
  auto p = sh("trap 'echo term; exit 7' TERM; echo ready; while :; do sleep 0.01; done", o);
  char buf[6] = {};
  REQUIRE(::read(p.stdoutFd(), buf, 6) == 6);  // "ready\n": the trap is set
  p.signal(SIGTERM);
  CHECK(readAllOf(p.stdoutFd()) == "term\n");
  CHECK(exitCode(p.wait()) == 7);
}

TEST_CASE("forkCall runs a function of this program in the child; release hands over the pid") {
  int value = 41;
  SpawnOptions o;
  o.out = ChildStream::pipe();
  auto p = Subprocess::forkCall(
      [&] {
        ++value;  // the child's copy
        const std::string s = std::to_string(value);
        return ::write(1, s.data(), s.size()) == static_cast<ssize_t>(s.size()) ? 5 : 6;
      },
      o);
  REQUIRE(p.isOk());
  CHECK(readAllOf(p->stdoutFd()) == "42");
  CHECK(exitCode(p->wait()) == 5);
  CHECK(value == 41);

  auto q = sh("exit 9");
  const pid_t pid = q.release();
  CHECK_FALSE(q.running());
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);  // ours to reap now
  CHECK(exitCode(status) == 9);
}
