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

  // True on the thread that is running the loop right now: inside run(), runUntil() or pollOnce(),
  // in its handlers and its pollers. Thread-safe.
  bool onLoopThread() const;
  // True when a thread other than the caller is running the loop right now: touching anything the
  // loop owns from here is a data race. False on the loop thread and while no thread runs the loop
  // (set-up before run(), tests that drive the loop in steps with runUntil(), teardown after the
  // loop thread was joined): then the caller holds the loop. Thread-safe.
  bool runningElsewhere() const;

 private:
  boost::asio::io_context io_{1};  // concurrency hint 1: one thread runs it (cheaper posts)
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

namespace detail {
// Logs "<file>:<line> <function>: called off the loop thread" and aborts.
[[noreturn]] void loopThreadViolation(const char* file, int line, const char* function);
}  // namespace detail

}  // namespace grapevine::transport

// First statement of every loop-confined method (transport.h: "must be called on the loop thread"):
// aborts, naming the method, when another thread is running `loop` (Loop::runningElsewhere()).
//
// Always on, not an assert(): the default build type is RelWithDebInfo, which defines NDEBUG, so an
// assert() would be compiled out of the very builds the tests and real runs use, and a
// debug-only check would catch nothing in practice. The check costs one atomic load and a thread-id
// compare, far below any transport call, and a data race on a connection corrupts state silently,
// so stopping loudly at the first one is the only safe outcome.
#define GV_CHECK_LOOP_THREAD(loop)                                                       \
  do {                                                                                   \
    if (__builtin_expect((loop).runningElsewhere(), 0)) {                                \
      ::grapevine::transport::detail::loopThreadViolation(__FILE__, __LINE__, __func__); \
    }                                                                                    \
  } while (0)
