// The engine loop: one thread that owns the transports and runs every transport callback. It is a
// Boost.Asio io_context, so the TCP backend and the control connections run on it natively;
// backends with their own event descriptor (UCX worker event fd, libfabric wait fd) register it
// with watchFd() and are progressed when it becomes readable, so an idle loop sleeps instead of
// spinning.
#pragma once

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <thread>

namespace grapevine::transport {

class Loop {
 public:
  Loop();
  ~Loop();
  Loop(const Loop&) = delete;
  Loop& operator=(const Loop&) = delete;

  boost::asio::io_context& io() { return io_; }

  // Runs `fn` on the loop thread, later (never inline). Thread-safe.
  void post(std::function<void()> fn);
  // Runs `fn` on the loop thread after `delay`. Thread-safe. Returns a handle; cancel() stops it.
  struct TimerHandle;
  std::shared_ptr<TimerHandle> after(std::chrono::nanoseconds delay, std::function<void()> fn);
  void cancel(const std::shared_ptr<TimerHandle>& timer);

  // Calls `onReadable` on the loop thread each time `fd` becomes readable, until unwatchFd(fd).
  // `onReadable` must drain the source (progress until idle, then re-arm) before returning.
  void watchFd(int fd, std::function<void()> onReadable);
  void unwatchFd(int fd);
  // Registers a function called on every loop iteration when busy polling (backend progress).
  void addPoller(std::function<bool()> poll);  // returns true if it did work

  // Runs the loop on the calling thread until stop(). With busyPoll, spins over the pollers instead
  // of sleeping.
  void run(bool busyPoll = false);
  // One busy-polling pass: runs the handlers that are ready (never blocks), then every poller.
  // Returns true if anything did work.
  bool pollOnce();
  // Runs until `done()` is true or `timeout` passes; returns done(). For tests and blocking
  // helpers.
  bool runUntil(const std::function<bool()>& done, std::chrono::nanoseconds timeout);
  void stop();  // thread-safe
  bool onLoopThread() const;

 private:
  boost::asio::io_context io_{1};  // concurrency hint 1: one thread runs it (cheaper posts)
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace grapevine::transport
