// What the tagged-message backends (runtime/transport/ucx, runtime/transport/ofi) share: the 64-bit
// tag layout, the address-blob header and its validation, the argument checks of
// Context/Connection, the goodbye protocol's constants, pidfd liveness of a same-host peer, and the
// loop-thread bookkeeping of pending operations and ready callbacks. The libraries' own calls stay
// in the backends.
//
// Threading: everything here is used from the loop thread only (the backends' contract), except the
// constants and pure functions.
#pragma once

#include <sys/types.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/common/status.h"
#include "runtime/transport/loop.h"
#include "runtime/transport/transport.h"

namespace grapevine::transport::tagged {

// ---- Tag layout ---------------------------------------------------------------------------------
//
//   bit 63 ............ 40 | 39 ........................ 0
//        sender rank (24)  |        user tag (40)
//
// The receiver of a connection to peer p matches (p << 40 | tag) with a full mask, so receives
// posted for different peers never steal each other's messages even though matching is per
// worker/endpoint, not per peer. Tag 2^40 - 1 is reserved (kControlTag); larger user tags are
// refused with kInvalidArgument; ranks at or above 2^24 are refused when the context is created.
inline constexpr int kUserTagBits = 40;
inline constexpr int kRankBits = 64 - kUserTagBits;
inline constexpr std::uint64_t kMaxUserTag = (std::uint64_t{1} << kUserTagBits) - 1;
inline constexpr std::uint64_t kMaxRank = (std::uint64_t{1} << kRankBits) - 1;
inline constexpr std::uint64_t kFullMask = ~std::uint64_t{0};
// The highest user tag is the backend's own: a connection's "goodbye" message, which close() sends
// so the peer fails its pending operations with kUnavailable at once. User tags are [0,
// kControlTag).
inline constexpr std::uint64_t kControlTag = kMaxUserTag;

constexpr std::uint64_t wireTag(std::uint64_t senderRank, std::uint64_t userTag) {
  return (senderRank << kUserTagBits) | (userTag & kMaxUserTag);
}
constexpr std::uint64_t senderOf(std::uint64_t wire) { return wire >> kUserTagBits; }
constexpr std::uint64_t userTagOf(std::uint64_t wire) { return wire & kMaxUserTag; }

static_assert(senderOf(wireTag(5, 77)) == 5 && userTagOf(wireTag(5, 77)) == 77);

// ---- Goodbye protocol ---------------------------------------------------------------------------

// The payload of the goodbye (kControlTag) message; the control receive buffer is this size.
inline constexpr std::uint8_t kGoodbyeMessage[8] = {'g', 'o', 'o', 'd', 'b', 'y', 'e', 0};
inline constexpr std::size_t kControlBytes = sizeof kGoodbyeMessage;
// How long close() waits for its goodbye to leave before it tears the link down anyway.
inline constexpr auto kGoodbyeGrace = std::chrono::milliseconds(500);

// ---- Argument checks (messages start with the backend's name, e.g. "ucx") -----------------------

// kInvalidArgument "<backend>: <what> <rank> outside [0, 2^24)" unless 0 <= rank <= kMaxRank.
Status checkRank(std::string_view backend, std::string_view what, int rank);
// kInvalidArgument "<backend>: tag above 2^40 - 2" for tag >= kControlTag.
Status checkUserTag(std::string_view backend, Tag tag);
// kResourceExhausted "message of N bytes above maxMessageBytes M" for bytes > maxBytes.
Status checkMessageSize(std::size_t bytes, std::size_t maxBytes);
// What a receive reports for a message from `peer` larger than its buffer: kResourceExhausted
// "message from peer P is larger than the posted receive buffer".
Status truncatedMessage(int peer);

// ---- Address blob -------------------------------------------------------------------------------
//
// Host byte order (peers that exchange it share a host or an architecture):
//   u32 magic | u32 version | u32 rank | u32 pid | u64 host key | backend address (non-empty)
// The pid and host key let a same-host peer watch this process's liveness (PeerProcessWatch).
struct AddressHeader {
  std::uint32_t magic;
  std::uint32_t version;
  std::uint32_t rank;
  std::uint32_t pid;
  std::uint64_t hostKey;
};
inline constexpr std::size_t kAddressHeaderBytes = sizeof(AddressHeader);
static_assert(kAddressHeaderBytes == 24);

struct AddressFormat {
  std::uint32_t magic;
  std::uint32_t version;
  std::string_view backend;  // message prefix, e.g. "ucx"
  std::string_view kind;     // in "not a grapevine <kind> address", e.g. "UCX"
};

// Identifies "same kernel and same pid namespace", where a pid names the same process for both
// peers: FNV-1a over the boot id and the pid namespace link. 0 when either is unreadable.
std::uint64_t hostKey();

// This process's blob: header (rank, getpid(), hostKey()) followed by `backendAddress`.
std::vector<std::uint8_t> encodeAddress(const AddressFormat& format, int rank,
                                        std::span<const std::uint8_t> backendAddress);

struct PeerAddress {
  AddressHeader header;
  std::vector<std::uint8_t> backendAddress;  // an aligned copy of what follows the header
  // The peer runs under this host key (same kernel and pid namespace): header.pid names its
  // process.
  bool sameHost() const;
};

// Validates `remote` as `peer`'s blob. kInvalidArgument when it is too short (no backend address),
// has the wrong magic or version, or belongs to another rank.
Result<PeerAddress> parseAddress(const AddressFormat& format, int peer,
                                 std::span<const std::uint8_t> remote);

// ---- Liveness of a same-host peer process -------------------------------------------------------

// Watches a peer process through a pidfd, which the kernel makes readable the moment it exits.
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

// ---- Loop-thread bookkeeping --------------------------------------------------------------------

// A connection's pending operations: an intrusive doubly linked list through Op::prev / Op::next.
template <class Op>
class PendingOps {
 public:
  Op* head() const { return head_; }
  bool empty() const { return head_ == nullptr; }
  void link(Op* op) {
    op->prev = nullptr;
    op->next = head_;
    if (head_ != nullptr) head_->prev = op;
    head_ = op;
  }
  void unlink(Op* op) {
    if (op->prev != nullptr) op->prev->next = op->next;
    if (op->next != nullptr) op->next->prev = op->prev;
    if (head_ == op) head_ = op->next;
    op->prev = op->next = nullptr;
  }
  // The pending ops for which `keep(op)` holds, newest first: a snapshot to walk while completing
  // or cancelling them unlinks them.
  template <class Pred>
  std::vector<Op*> snapshot(Pred keep) const {
    std::vector<Op*> out;
    for (Op* op = head_; op != nullptr; op = op->next) {
      if (keep(op)) out.push_back(op);
    }
    return out;
  }

 private:
  Op* head_ = nullptr;
};

// Recycled operations and the "orphans" (their callback already ran, but the library may still hand
// them back). Op must have `bool orphaned`, a `conn` pointer and `void reset()` that clears it for
// reuse. Owns every op it handed out that
// came back through release()/adoptOrphan(); deletes them when destroyed.
template <class Op>
class OpPool {
 public:
  OpPool() = default;
  OpPool(const OpPool&) = delete;
  OpPool& operator=(const OpPool&) = delete;
  ~OpPool() {
    for (Op* op : orphans_) delete op;
    for (Op* op : free_) delete op;
  }

  Op* alloc() {
    if (free_.empty()) return new Op();
    Op* op = free_.back();
    free_.pop_back();
    return op;
  }
  void release(Op* op) {
    op->reset();
    free_.push_back(op);
  }
  // Marks `op` orphaned (it drops its connection) and keeps it until
  // releaseOrphan()/releaseOrphans().
  void adoptOrphan(Op* op) {
    op->orphaned = true;
    op->conn.reset();
    orphans_.push_back(op);
  }
  void releaseOrphan(Op* op) {
    orphans_.erase(std::find(orphans_.begin(), orphans_.end(), op));
    release(op);
  }
  // The library let go of every op (its endpoint or worker is gone): recycle all orphans.
  void releaseOrphans() {
    for (Op* op : orphans_) release(op);
    orphans_.clear();
  }

 private:
  std::vector<Op*> free_;
  std::vector<Op*> orphans_;
};

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

// Drives an engine's progress from the Loop: busy polling or an event fd, a periodic tick, and
// "progress soon" requests. Engine (held by shared_ptr, enable_shared_from_this) provides open(),
// progressAll() and pollOnce() -> bool (true if it did any work). The driver is a member of the
// engine; every closure it hands the Loop holds the engine weakly (or, for schedule(), strongly).
template <class Engine>
class LoopDriver {
 public:
  explicit LoopDriver(Loop& loop) : loop_(loop) {}

  // Busy polling: the loop calls engine->pollOnce() between its own events.
  void poll(const std::weak_ptr<Engine>& engine) {
    loop_.addPoller([engine] {
      auto self = engine.lock();
      return self && self->pollOnce();
    });
  }
  // Sleeping: engine->progressAll() whenever `fd` becomes readable, until detach().
  void watch(int fd, const std::weak_ptr<Engine>& engine) {
    loop_.watchFd(fd, [engine] {
      if (auto self = engine.lock()) self->progressAll();
    });
    watchedFd_ = fd;
  }
  // A progress pass now and then every `interval` while the engine is open, so that the library's
  // connection management and keepalive advance while the loop sleeps.
  void tick(Engine& engine, std::chrono::milliseconds interval) {
    if (!engine.open()) return;
    engine.progressAll();
    std::weak_ptr<Engine> weak = engine.weak_from_this();
    timer_ = loop_.after(interval, [this, weak, interval] {
      if (auto self = weak.lock()) tick(*self, interval);  // `this` lives in *self
    });
  }
  // Makes sure a progress pass runs soon (posted, never inline); requests coalesce until it runs.
  void schedule(std::shared_ptr<Engine> engine) {
    if (scheduled_) return;
    scheduled_ = true;
    loop_.post([this, self = std::move(engine)] {  // `this` lives in *self
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
