#include "runtime/launch/signals.h"

#include <signal.h>

#include <atomic>
#include <csignal>

namespace grapevine::launch {
namespace {

std::atomic<int> g_signal{0};
void onSignal(int sig) { g_signal = sig; }

}  // namespace

void installSignalHandlers(bool ignoreUsr1) {
  struct sigaction sa {};
  sa.sa_handler = onSignal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);
  if (ignoreUsr1) signal(SIGUSR1, SIG_IGN);
}

int stopSignal() { return g_signal; }

}  // namespace grapevine::launch
