#include "runtime/transport/loop.h"

#include <atomic>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cstdlib>
#include <unordered_map>
#include <vector>

#include "runtime/common/log.h"

namespace grapevine::transport {

namespace asio = boost::asio;

// A timer owned by the loop. `cancelled` is atomic because cancel() may be called from any thread;
// the steady_timer itself is only touched on the loop thread.
struct Loop::TimerHandle {
  explicit TimerHandle(asio::io_context& io) : timer(io) {}
  asio::steady_timer timer;
  std::atomic<bool> cancelled{false};
};

namespace {
struct FdWatch {
  FdWatch(asio::io_context& io, int fd, std::function<void()> cb)
      : descriptor(io, fd), onReadable(std::move(cb)) {}
  asio::posix::stream_descriptor descriptor;
  std::function<void()> onReadable;
  bool active = true;
};
}  // namespace

struct Loop::Impl {
  explicit Impl(asio::io_context& io) : guard(asio::make_work_guard(io)) {}
  asio::executor_work_guard<asio::io_context::executor_type> guard;
  std::atomic<bool> stopRequested{false};
  // The thread inside run(), runUntil() or pollOnce(); default (no thread) while none is.
  std::atomic<std::thread::id> runner{};
  std::unordered_map<int, std::shared_ptr<FdWatch>> watches;
  std::vector<std::function<bool()>> pollers;
};

namespace {
// Marks the calling thread as the loop's runner for its scope (nested calls on the same thread
// keep the mark; the outermost one clears it).
class RunnerScope {
 public:
  explicit RunnerScope(std::atomic<std::thread::id>& runner)
      : runner_(runner), prev_(runner.load(std::memory_order_relaxed)) {
    if (prev_ != std::this_thread::get_id()) runner_.store(std::this_thread::get_id());
  }
  ~RunnerScope() {
    if (prev_ != std::this_thread::get_id()) runner_.store(prev_);
  }
  RunnerScope(const RunnerScope&) = delete;
  RunnerScope& operator=(const RunnerScope&) = delete;

 private:
  std::atomic<std::thread::id>& runner_;
  const std::thread::id prev_;
};
}  // namespace

Loop::Loop() : impl_(std::make_unique<Impl>(io_)) {}

Loop::~Loop() {
  // Hand every watched descriptor back to its owner: the loop never closes an fd it did not open.
  for (auto& [fd, w] : impl_->watches) {
    w->active = false;
    w->descriptor.release();
  }
  impl_->watches.clear();
  impl_->guard.reset();
  io_.stop();
}

void Loop::post(std::function<void()> fn) { asio::post(io_, std::move(fn)); }

std::shared_ptr<Loop::TimerHandle> Loop::after(std::chrono::nanoseconds delay,
                                               std::function<void()> fn) {
  auto handle = std::make_shared<TimerHandle>(io_);
  // Arm on the loop thread: asio timers are not safe to touch from two threads at once.
  asio::post(io_, [handle, delay, fn = std::move(fn)]() mutable {
    if (handle->cancelled.load()) return;
    handle->timer.expires_after(delay);
    handle->timer.async_wait([handle, fn = std::move(fn)](const boost::system::error_code& ec) {
      if (ec || handle->cancelled.load()) return;
      handle->cancelled.store(true);  // fired: a later cancel() is a no-op
      fn();
    });
  });
  return handle;
}

void Loop::cancel(const std::shared_ptr<TimerHandle>& timer) {
  if (!timer || timer->cancelled.exchange(true)) return;
  asio::post(io_, [timer] { timer->timer.cancel(); });
}

namespace {
void armWatch(const std::shared_ptr<FdWatch>& w) {
  w->descriptor.async_wait(asio::posix::stream_descriptor::wait_read,
                           [w](const boost::system::error_code& ec) {
                             if (ec || !w->active) return;
                             w->onReadable();
                             if (w->active) armWatch(w);
                           });
}
}  // namespace

void Loop::watchFd(int fd, std::function<void()> onReadable) {
  unwatchFd(fd);
  auto w = std::make_shared<FdWatch>(io_, fd, std::move(onReadable));
  impl_->watches[fd] = w;
  armWatch(w);
}

void Loop::unwatchFd(int fd) {
  auto it = impl_->watches.find(fd);
  if (it == impl_->watches.end()) return;
  it->second->active = false;
  // release() cancels the pending wait (its handler sees operation_aborted) without closing the fd.
  it->second->descriptor.release();
  impl_->watches.erase(it);
}

void Loop::addPoller(std::function<bool()> poll) { impl_->pollers.push_back(std::move(poll)); }

void Loop::run(bool busyPoll) {
  RunnerScope runner(impl_->runner);
  impl_->stopRequested.store(false);
  io_.restart();
  if (!busyPoll) {
    io_.run();
    return;
  }
  while (!impl_->stopRequested.load(std::memory_order_relaxed) && !io_.stopped()) pollOnce();
}

bool Loop::pollOnce() {
  RunnerScope runner(impl_->runner);
  bool worked = io_.poll() > 0;
  for (auto& p : impl_->pollers) worked = p() || worked;
  return worked;
}

bool Loop::runUntil(const std::function<bool()>& done, std::chrono::nanoseconds timeout) {
  RunnerScope runner(impl_->runner);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  impl_->stopRequested.store(false);
  io_.restart();
  while (!done()) {
    if (std::chrono::steady_clock::now() >= deadline) return done();
    io_.run_one_until(deadline);
    if (io_.stopped()) {
      if (impl_->stopRequested.load()) return done();
      io_.restart();
    }
  }
  return true;
}

void Loop::stop() {
  impl_->stopRequested.store(true);
  io_.stop();
}

bool Loop::onLoopThread() const {
  return impl_->runner.load() == std::this_thread::get_id() ||
         const_cast<boost::asio::io_context&>(io_).get_executor().running_in_this_thread();
}

bool Loop::runningElsewhere() const {
  const std::thread::id runner = impl_->runner.load();
  return runner != std::thread::id() && runner != std::this_thread::get_id();
}

namespace detail {
void loopThreadViolation(const char* file, int line, const char* function) {
  log::error(file, ":", line, " ", function,
             ": called off the loop thread while another thread runs the loop (a data race)");
  std::abort();
}
}  // namespace detail

}  // namespace grapevine::transport
