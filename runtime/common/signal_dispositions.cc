#include "runtime/common/signal_dispositions.h"

#include <cstring>

namespace grapevine {

namespace {
bool sameAction(const struct sigaction& a, const struct sigaction& b) {
  const bool aInfo = (a.sa_flags & SA_SIGINFO) != 0;
  const bool bInfo = (b.sa_flags & SA_SIGINFO) != 0;
  if (aInfo != bInfo || a.sa_flags != b.sa_flags) return false;
  if (aInfo) return a.sa_sigaction == b.sa_sigaction;
  return a.sa_handler == b.sa_handler;
}
}  // namespace

SavedSignalDispositions::SavedSignalDispositions() {
  for (int sig = 1; sig <= SIGRTMAX; ++sig) {
    if (sig == SIGKILL || sig == SIGSTOP) continue;
    Saved s{sig, {}};
    if (::sigaction(sig, nullptr, &s.action) == 0) saved_.push_back(s);
  }
}

SavedSignalDispositions::~SavedSignalDispositions() { restore(); }

int SavedSignalDispositions::restore() {
  if (restored_) return 0;
  restored_ = true;
  int changed = 0;
  for (const Saved& s : saved_) {
    struct sigaction now {};
    if (::sigaction(s.signal, nullptr, &now) != 0 || sameAction(now, s.action)) continue;
    if (::sigaction(s.signal, &s.action, nullptr) == 0) ++changed;
  }
  return changed;
}

}  // namespace grapevine
