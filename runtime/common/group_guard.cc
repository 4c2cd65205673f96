#include "runtime/common/group_guard.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <ctime>
#include <vector>

namespace grapevine {
namespace {

// The guardian's body: fd 0 is the pipe. Only async-signal-safe calls; `groups` was allocated
// before fork.
int guard(std::vector<pid_t>& groups, std::chrono::milliseconds grace) {
  ::close_range(3, ~0U, 0);
  std::size_t count = 0;
  std::int32_t v = 0;
  for (;;) {
    const ssize_t n = ::read(0, &v, sizeof v);
    if (n < 0 && errno == EINTR) continue;
    if (n != static_cast<ssize_t>(sizeof v)) break;  // EOF (or a torn record: we are gone)
    if (v > 0 && count < groups.size()) {
      groups[count++] = v;
    } else if (v < 0) {
      for (std::size_t i = 0; i < count; ++i) {
        if (groups[i] == -v) {
          groups[i] = groups[--count];
          break;
        }
      }
    }
  }
  if (count == 0) return 0;
  for (std::size_t i = 0; i < count; ++i) ::kill(-groups[i], SIGTERM);
  const timespec tick{0, 50 * 1000 * 1000};
  for (auto waited = std::chrono::milliseconds(0); waited < grace;
       waited += std::chrono::milliseconds(50)) {
    bool any = false;
    for (std::size_t i = 0; i < count; ++i) any = any || ::kill(-groups[i], 0) == 0;
    if (!any) return 0;
    ::nanosleep(&tick, nullptr);
  }
  for (std::size_t i = 0; i < count; ++i) ::kill(-groups[i], SIGKILL);
  return 0;
}

}  // namespace

Result<GroupGuard> GroupGuard::start(int capacity, std::chrono::milliseconds grace) {
  std::vector<pid_t> groups(static_cast<std::size_t>(capacity > 0 ? capacity : 1), 0);
  SpawnOptions o;
  o.in = ChildStream::pipe();
  o.out = ChildStream::null();
  o.newProcessGroup = true;
  GroupGuard g;
  GV_ASSIGN_OR_RETURN(g.guardian_,
                      Subprocess::forkCall([&groups, grace] { return guard(groups, grace); }, o));
  g.capacity_ = static_cast<int>(groups.size());
  return g;
}

GroupGuard::~GroupGuard() {
  if (!guardian_.running()) return;
  guardian_.closeStdin();
  guardian_.wait();
}

Status GroupGuard::add(pid_t pgid) {
  if (pgid <= 0) return invalidArgument("GroupGuard::add: bad process group");
  if (listed_ >= capacity_) return resourceExhausted("GroupGuard: more groups than its capacity");
  const std::int32_t v = pgid;
  if (::write(guardian_.stdinFd(), &v, sizeof v) != static_cast<ssize_t>(sizeof v)) {
    return unavailable("GroupGuard: the guardian process is gone");
  }
  ++listed_;
  return Status::ok();
}

void GroupGuard::remove(pid_t pgid) {
  const std::int32_t v = -pgid;
  if (::write(guardian_.stdinFd(), &v, sizeof v) == static_cast<ssize_t>(sizeof v)) --listed_;
}

}  // namespace grapevine
