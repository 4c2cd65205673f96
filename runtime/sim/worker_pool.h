// A fixed pool of worker threads for the simulator: thousands of simulated peers share a few OS
// threads (one per core), never one thread per peer.
//
// Thread contract: one thread (the owner) calls parallelFor(); it blocks until every index ran, and
// the owner runs indices itself too. Workers sleep on a condition variable between calls (no
// spinning). Which thread runs which index is not deterministic: callers keep results
// deterministic by touching only state owned by index i inside fn(i).
#pragma once

#include <condition_variable>
#include <cstddef>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace grapevine::sim {

class WorkerPool {
 public:
  // threads >= 1 in total, the caller included (threads - 1 workers are started). 0: one per core.
  explicit WorkerPool(int threads);
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  int threads() const { return static_cast<int>(workers_.size()) + 1; }

  // Runs fn(i) for every i in [0, n) exactly once across the pool and returns when all are done.
  // fn must not throw and must not call parallelFor() (not reentrant).
  void parallelFor(std::size_t n, const std::function<void(std::size_t)>& fn);

 private:
  void workerLoop();
  void drain();  // runs indices of the current job until none are left

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable wake_, done_;
  const std::function<void(std::size_t)>* fn_ = nullptr;
  std::size_t n_ = 0;
  std::size_t next_ = 0;      // next index to hand out (under mu_)
  std::size_t finished_ = 0;  // indices done (under mu_)
  std::uint64_t generation_ = 0;
  bool stop_ = false;
};

}  // namespace grapevine::sim
