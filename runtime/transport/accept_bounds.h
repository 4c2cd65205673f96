// Bounds on what connecting strangers can make a listening peer hold (docs/security.md,
// "Bounds"), shared by the bootstrap's control listener and the TCP data backend's listener:
// - accepted connections that have not identified themselves yet (no hello, or no proof) are
//   held in a PendingAccepts table of at most kMaxPendingAccepts, oldest closed first, each with
//   its own deadline (the caller's timer);
// - when accept() fails for lack of descriptors or buffers (EMFILE, ENFILE, ENOBUFS, ENOMEM) the
//   acceptor waits (AcceptBackoff: 10 ms, doubling to 100 ms) instead of accepting again at once:
//   the refused connection stays in the kernel's queue, so an immediate retry fails the same way
//   and spins the loop thread.
// Thread: the Loop thread, like the listeners that use them.
#pragma once

#include <algorithm>
#include <boost/system/error_code.hpp>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>

namespace grapevine::transport {

inline constexpr std::size_t kMaxPendingAccepts = 32;
// The control listener after the bootstrap, open for rejoining neighbours only (bootstrap.h): at
// most this many unidentified connections (plus one per neighbour of lower rank).
inline constexpr std::size_t kMaxPendingRejoins = 8;
inline constexpr std::chrono::milliseconds kAcceptBackoffMin{10};
inline constexpr std::chrono::milliseconds kAcceptBackoffMax{100};

// Whether an accept() error is a shortage of descriptors or memory (then: back off).
inline bool isAcceptShortage(const boost::system::error_code& ec) {
  if (ec.category() != boost::system::system_category()) return false;
  const int e = ec.value();
  return e == EMFILE || e == ENFILE || e == ENOBUFS || e == ENOMEM;
}

// The delay before the next accept after a shortage: doubles from kAcceptBackoffMin to
// kAcceptBackoffMax while shortages repeat; reset() after an accept succeeds.
class AcceptBackoff {
 public:
  std::chrono::milliseconds next() {
    delay_ = delay_.count() == 0 ? kAcceptBackoffMin : std::min(delay_ * 2, kAcceptBackoffMax);
    ++shortages_;
    return delay_;
  }
  void reset() { delay_ = std::chrono::milliseconds{0}; }
  bool backingOff() const { return delay_.count() != 0; }
  std::uint64_t shortages() const { return shortages_; }

 private:
  std::chrono::milliseconds delay_{0};
  std::uint64_t shortages_ = 0;
};

// Accepted connections not identified yet, oldest first. `P` has `void close()`-able state the
// caller reaches through the evicted pointer (closing its socket ends its pending operations).
template <class P>
class PendingAccepts {
 public:
  explicit PendingAccepts(std::size_t limit = kMaxPendingAccepts) : limit_(limit) {}

  // Adds `p`; returns its id for remove(). When the table already holds `limit` entries the oldest
  // is taken out and returned through `evicted` (the caller closes it), else `evicted` is null.
  std::uint64_t add(std::shared_ptr<P> p, std::shared_ptr<P>& evicted) {
    evicted.reset();
    if (items_.size() >= limit_ && !items_.empty()) {
      evicted = std::move(items_.begin()->second);
      items_.erase(items_.begin());
      ++evictions_;
    }
    items_.emplace(next_, std::move(p));
    return next_++;
  }
  // Lowers (or raises) the bound; entries beyond it, oldest first, are handed to `evict` (the
  // caller closes them).
  template <class F>
  void setLimit(std::size_t limit, F&& evict) {
    limit_ = limit;
    while (items_.size() > limit_ && !items_.empty()) {
      auto oldest = std::move(items_.begin()->second);
      items_.erase(items_.begin());
      ++evictions_;
      evict(*oldest);
    }
  }
  // Takes `id` out (it identified itself, failed or timed out). No-op when already gone.
  void remove(std::uint64_t id) { items_.erase(id); }
  std::size_t size() const { return items_.size(); }
  std::uint64_t evictions() const { return evictions_; }
  void clear() { items_.clear(); }
  template <class F>
  void forEach(F&& f) {
    for (auto& [id, p] : items_) f(*p);
  }

 private:
  std::size_t limit_;
  std::uint64_t next_ = 0;
  std::uint64_t evictions_ = 0;
  std::map<std::uint64_t, std::shared_ptr<P>> items_;
};

}  // namespace grapevine::transport
