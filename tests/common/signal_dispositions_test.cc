// SavedSignalDispositions puts back what a library changed while it was in scope (libfabric's
// libinfinipath takes SIGINT and SIGTERM when loaded: runtime/transport/ofi/libfabric_api.h).
#include "runtime/common/signal_dispositions.h"

#include <catch2/catch.hpp>
#include <csignal>

namespace {

void mine(int) {}
void theirs(int) {}
void theirsInfo(int, siginfo_t*, void*) {}

void install(int sig, void (*handler)(int)) {
  struct sigaction a {};
  a.sa_handler = handler;
  sigemptyset(&a.sa_mask);
  REQUIRE(sigaction(sig, &a, nullptr) == 0);
}

struct sigaction current(int sig) {
  struct sigaction a {};
  sigaction(sig, nullptr, &a);
  return a;
}

}  // namespace

TEST_CASE("what changed in scope is put back, what did not is left alone") {
  install(SIGINT, mine);
  install(SIGTERM, SIG_DFL);
  install(SIGUSR2, SIG_IGN);
  {
    grapevine::SavedSignalDispositions keep;
    install(SIGINT, theirs);
    struct sigaction info {};
    info.sa_sigaction = theirsInfo;
    info.sa_flags = SA_SIGINFO;
    sigemptyset(&info.sa_mask);
    REQUIRE(sigaction(SIGTERM, &info, nullptr) == 0);
    CHECK(keep.restore() == 2);
    CHECK(keep.restore() == 0);  // once
  }
  CHECK(current(SIGINT).sa_handler == mine);
  CHECK((current(SIGTERM).sa_flags & SA_SIGINFO) == 0);
  CHECK(current(SIGTERM).sa_handler == SIG_DFL);
  CHECK(current(SIGUSR2).sa_handler == SIG_IGN);
  install(SIGINT, SIG_DFL);
  install(SIGUSR2, SIG_DFL);
}

TEST_CASE("the destructor restores when restore() was not called") {
  install(SIGHUP, mine);
  {
    grapevine::SavedSignalDispositions keep;
    install(SIGHUP, theirs);
  }
  CHECK(current(SIGHUP).sa_handler == mine);
  install(SIGHUP, SIG_DFL);
}
