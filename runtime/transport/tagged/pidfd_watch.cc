#include "runtime/transport/tagged/pidfd_watch.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <utility>

namespace grapevine::transport::tagged {

Status PeerProcessWatch::start(Loop& loop, std::string_view backend, int peer, pid_t pid,
                               std::function<void(Status)> onExit) {
  GV_CHECK_LOOP_THREAD(loop);
  stop();
  const int fd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (fd < 0) {
    return unavailable(std::string(backend) + ": cannot watch peer " + std::to_string(peer) +
                       " (pid " + std::to_string(pid) + "): " + std::strerror(errno));
  }
  loop_ = &loop;
  pidfd_ = fd;
  std::string exited = "peer " + std::to_string(peer) + " (pid " + std::to_string(pid) + ") exited";
  loop.watchFd(pidfd_, [onExit = std::move(onExit), exited = std::move(exited)] {
    onExit(unavailable(exited));
  });
  return Status::ok();
}

void PeerProcessWatch::stop() {
  if (pidfd_ < 0) return;
  GV_CHECK_LOOP_THREAD(*loop_);
  loop_->unwatchFd(pidfd_);
  ::close(pidfd_);
  pidfd_ = -1;
}

}  // namespace grapevine::transport::tagged
