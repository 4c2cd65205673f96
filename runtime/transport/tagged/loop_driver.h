// How a tagged backend's library gets progressed from the Loop, and where the user callbacks wait
// until a progress pass is over. Loop thread only.
#pragma once

#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <utility>

#include "runtime/transport/loop.h"

namespace grapevine::transport::tagged {

// Closures queued to run on the loop thread after a progress pass (so user callbacks never run
// inline in send()/recv()/close() or inside the library's progress call).
class ReadyQueue {
 public:
  void push(std::function<void()> fn) { ready_.push_back(std::move(fn)); }
  bool empty() const { return ready_.empty(); }
  // Runs what was queued so far (closures they queue wait for the next call); true if any ran.
  bool runBatch() {
    if (ready_.empty()) return false;
    std::deque<std::function<void()>> batch;
    batch.swap(ready_);
    for (auto& fn : batch) fn();
    return true;
  }

 private:
  std::deque<std::function<void()>> ready_;
};

// Drives a library's progress from the Loop: busy polling or an event fd, a periodic tick, and
// "progress soon" requests. Owner (the object that owns the library's worker or endpoint, held by
// shared_ptr, enable_shared_from_this) provides open(), progressAll() and pollOnce() -> bool (true
// if it did any work). The driver is a member of the owner; every closure it hands the Loop holds
// the owner weakly (or, for schedule(), strongly).
template <class Owner>
class LoopDriver {
 public:
  explicit LoopDriver(Loop& loop) : loop_(loop) {}

  // Busy polling: the loop calls owner->pollOnce() between its own events.
  void poll(const std::weak_ptr<Owner>& owner) {
    loop_.addPoller([owner] {
      auto self = owner.lock();
      return self && self->pollOnce();
    });
  }
  // Sleeping: owner->progressAll() whenever `fd` becomes readable, until detach().
  void watch(int fd, const std::weak_ptr<Owner>& owner) {
    loop_.watchFd(fd, [owner] {
      if (auto self = owner.lock()) self->progressAll();
    });
    watchedFd_ = fd;
  }
  // A progress pass now and then every `interval` while the owner is open, so that the library's
  // connection management and keepalive advance while the loop sleeps.
  void tick(Owner& owner, std::chrono::milliseconds interval) {
    if (!owner.open()) return;
    owner.progressAll();
    std::weak_ptr<Owner> weak = owner.weak_from_this();
    timer_ = loop_.after(interval, [this, weak, interval] {
      if (auto self = weak.lock()) tick(*self, interval);  // `this` lives in *self
    });
  }
  // Makes sure a progress pass runs soon (posted, never inline); requests coalesce until it runs.
  void schedule(std::shared_ptr<Owner> owner) {
    if (scheduled_) return;
    scheduled_ = true;
    loop_.post([this, self = std::move(owner)] {  // `this` lives in *self
      scheduled_ = false;
      self->progressAll();
    });
  }
  // Stops the tick and the fd watch (before the library's objects go away).
  void detach() {
    if (timer_) {
      loop_.cancel(timer_);
      timer_.reset();
    }
    if (watchedFd_ >= 0) {
      loop_.unwatchFd(watchedFd_);
      watchedFd_ = -1;
    }
  }

 private:
  Loop& loop_;
  int watchedFd_ = -1;  // >= 0 while watched
  bool scheduled_ = false;
  std::shared_ptr<Loop::TimerHandle> timer_;
};

}  // namespace grapevine::transport::tagged
