// Liveness of a same-host peer process: a pidfd, which the kernel makes readable the moment that
// process exits, watched by the Loop. The tagged backends use it for peers whose address blob says
// "same host" (address_blob.h), because their libraries notice a dead peer late or not at all.
#pragma once

#include <sys/types.h>

#include <functional>
#include <string_view>

#include "runtime/common/status.h"
#include "runtime/transport/loop.h"

namespace grapevine::transport::tagged {

// Loop thread only; the Loop must outlive the watch (or stop() must run first).
class PeerProcessWatch {
 public:
  PeerProcessWatch() = default;
  PeerProcessWatch(const PeerProcessWatch&) = delete;
  PeerProcessWatch& operator=(const PeerProcessWatch&) = delete;
  ~PeerProcessWatch() { stop(); }

  // Starts watching `pid` (peer `peer`); when it exits, `onExit` runs on the loop thread with
  // kUnavailable "peer P (pid X) exited". It should stop() the watch (the fd stays readable).
  // Errors: kUnavailable "<backend>: cannot watch peer P (pid X): <errno text>".
  Status start(Loop& loop, std::string_view backend, int peer, pid_t pid,
               std::function<void(Status)> onExit);
  // Stops watching and closes the pidfd; a no-op when not watching.
  void stop();

 private:
  Loop* loop_ = nullptr;
  int pidfd_ = -1;  // >= 0 while watching
};

}  // namespace grapevine::transport::tagged
