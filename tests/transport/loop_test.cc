// The engine Loop: posted work runs later on the loop thread, timers fire and cancel, watched fds
// wake it, stop() is thread-safe, an idle run() sleeps, and GV_CHECK_LOOP_THREAD stops a call from
// another thread while the loop runs.
#include "runtime/transport/loop.h"

#include <sys/eventfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <thread>

#include "runtime/transport/buffer_pool.h"
#include "tests/test_util/in_child.h"

using namespace grapevine::transport;
using namespace std::chrono_literals;
using grapevine::test_util::inChild;

TEST_CASE("post runs later, on the loop thread, in order") {
  Loop loop;
  std::vector<int> order;
  bool onLoop = true;
  loop.post([&] {
    order.push_back(1);
    onLoop = onLoop && loop.onLoopThread();
  });
  loop.post([&] { order.push_back(2); });
  CHECK(order.empty());  // never inline
  CHECK(!loop.onLoopThread());
  REQUIRE(loop.runUntil([&] { return order.size() == 2; }, 1s));
  CHECK(order == std::vector<int>{1, 2});
  CHECK(onLoop);
}

TEST_CASE("timers fire after their delay; cancelled timers never fire") {
  Loop loop;
  int fired = 0, cancelledFired = 0;
  const auto t0 = std::chrono::steady_clock::now();
  auto t = loop.after(30ms, [&] { ++fired; });
  auto c = loop.after(10ms, [&] { ++cancelledFired; });
  loop.cancel(c);
  REQUIRE(loop.runUntil([&] { return fired == 1; }, 2s));
  CHECK(std::chrono::steady_clock::now() - t0 >= 30ms);
  loop.runUntil([] { return false; }, 30ms);
  CHECK(fired == 1);
  CHECK(cancelledFired == 0);
  loop.cancel(t);  // after firing: harmless
}

TEST_CASE("a watched fd wakes the loop; unwatchFd stops it and leaves the fd open") {
  Loop loop;
  const int fd = ::eventfd(0, EFD_NONBLOCK);
  REQUIRE(fd >= 0);
  int wakeups = 0;
  loop.watchFd(fd, [&] {
    std::uint64_t v;
    while (::read(fd, &v, sizeof v) == sizeof v) {
    }
    ++wakeups;
  });
  std::thread writer([fd] {
    std::this_thread::sleep_for(20ms);
    const std::uint64_t one = 1;
    (void)!::write(fd, &one, sizeof one);
  });
  REQUIRE(loop.runUntil([&] { return wakeups == 1; }, 2s));
  writer.join();
  loop.unwatchFd(fd);
  const std::uint64_t one = 1;
  REQUIRE(::write(fd, &one, sizeof one) == sizeof one);  // fd still open
  loop.runUntil([] { return false; }, 30ms);
  CHECK(wakeups == 1);
  ::close(fd);
}

TEST_CASE("run() sleeps when idle and stop() from another thread ends it") {
  Loop loop;
  std::thread stopper([&] {
    std::this_thread::sleep_for(200ms);
    loop.stop();
  });
  const std::clock_t c0 = std::clock();
  loop.run();
  const double cpu = double(std::clock() - c0) / CLOCKS_PER_SEC;
  stopper.join();
  CHECK(cpu < 0.05);
}

TEST_CASE("busy polling runs the pollers until stop()") {
  Loop loop;
  int polls = 0;
  loop.addPoller([&] {
    if (++polls == 1000) loop.stop();
    return false;
  });
  loop.run(/*busyPoll=*/true);
  CHECK(polls == 1000);
}

TEST_CASE("pollOnce runs ready handlers and every poller, and says whether anything worked") {
  Loop loop;
  int polls = 0, posted = 0;
  bool pollerWorks = false;
  loop.addPoller([&] {
    ++polls;
    return pollerWorks;
  });
  CHECK_FALSE(loop.pollOnce());  // nothing ready, the poller idle
  CHECK(polls == 1);
  loop.post([&] { ++posted; });
  CHECK(loop.pollOnce());
  CHECK(posted == 1);
  CHECK(polls == 2);
  pollerWorks = true;
  CHECK(loop.pollOnce());
  CHECK(polls == 3);
}

TEST_CASE("onLoopThread holds in handlers and pollers; runningElsewhere only off a running loop") {
  Loop loop;
  CHECK_FALSE(loop.runningElsewhere());  // nobody runs it: the caller holds it
  bool inPoller = false;
  loop.addPoller([&] {
    inPoller = loop.onLoopThread() && !loop.runningElsewhere();
    return false;
  });
  loop.pollOnce();
  CHECK(inPoller);
  CHECK_FALSE(loop.onLoopThread());

  std::atomic<bool> running{false}, elsewhere{false}, onLoop{true};
  loop.post([&] { running = true; });
  std::thread runner([&] { loop.runUntil([&] { return elsewhere.load(); }, 5s); });
  while (!running) std::this_thread::sleep_for(1ms);
  onLoop = loop.onLoopThread();
  elsewhere = loop.runningElsewhere();
  loop.post([] {});  // wake the runner so it sees `elsewhere`
  runner.join();
  CHECK(elsewhere);
  CHECK_FALSE(onLoop);
  CHECK_FALSE(loop.runningElsewhere());  // the runner returned: the caller holds the loop again
}

TEST_CASE("GV_CHECK_LOOP_THREAD aborts a call from another thread while the loop runs") {
  // Off the loop while another thread runs it: abort.
  const int violation = inChild([] {
    Loop loop;
    std::atomic<bool> running{false};
    loop.post([&] { running = true; });
    std::thread runner([&] { loop.run(); });
    while (!running) std::this_thread::sleep_for(1ms);
    GV_CHECK_LOOP_THREAD(loop);
    loop.stop();
    runner.join();
  });
  CHECK(WIFSIGNALED(violation));
  CHECK(WTERMSIG(violation) == SIGABRT);
  // On the loop thread, and on any thread while nobody runs the loop: no abort.
  const int fine = inChild([] {
    Loop loop;
    GV_CHECK_LOOP_THREAD(loop);
    bool ran = false;
    loop.post([&] {
      GV_CHECK_LOOP_THREAD(loop);
      ran = true;
    });
    loop.runUntil([&] { return ran; }, 5s);
    std::_Exit(ran ? 0 : 1);
  });
  CHECK(WIFEXITED(fine));
  CHECK(WEXITSTATUS(fine) == 0);
}

TEST_CASE("the buffer pool reuses buffers instead of allocating") {
  BufferPool pool(64 << 20);
  for (int i = 0; i < 10; ++i) {
    Buffer b = pool.acquire(1 << 20);
    REQUIRE(b.capacity() >= (1u << 20));
    pool.release(std::move(b));
  }
  CHECK(pool.allocations() == 1);
  Buffer a = pool.acquire(100), b = pool.acquire(100);  // two live at once: two allocations
  CHECK(pool.allocations() == 3);
  pool.release(std::move(a));
  pool.release(std::move(b));
  BufferPool tiny(1000);
  tiny.release(Buffer(4096));  // over the pooled-bytes bound: dropped
  CHECK(tiny.pooledBytes() == 0);
}
