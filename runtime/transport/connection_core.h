// The part every Connection shares, composed into each backend (TensorPipe's "ConnectionImpl"
// idea): the sticky first error, tag matching of posted receives against arriving messages, the
// bounded buffer of unexpected messages, and completions that are posted to the loop (never inline)
// exactly once. A backend keeps its own send queue and wire logic and calls into this.
//
// Thread: every method is called on the owning Loop's thread (those that change state check it:
// GV_CHECK_LOOP_THREAD, loop.h).
#pragma once

#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <unordered_map>

#include "runtime/common/status.h"
#include "runtime/transport/buffer_pool.h"
#include "runtime/transport/loop.h"
#include "runtime/transport/transport.h"

namespace grapevine::transport {

class ConnectionCore {
 public:
  struct PostedRecv {
    std::span<std::uint8_t> buffer;
    RecvCallback cb;
  };

  // `maxUnexpectedBytes` bounds the bytes of messages buffered while no receive is posted for them
  // (one message is always accepted, however large, as long as the backend checked
  // maxMessageBytes).
  ConnectionCore(Loop& loop, int peer, BufferPool& pool, std::size_t maxUnexpectedBytes);
  ConnectionCore(const ConnectionCore&) = delete;
  ConnectionCore& operator=(const ConnectionCore&) = delete;

  Loop& loop() const { return loop_; }
  int peer() const { return peer_; }
  BufferPool& pool() { return pool_; }
  const Status& error() const { return error_; }
  bool failed() const { return !error_.isOk(); }

  // Posts cb(status) to the loop: runs later, once.
  void completeSend(SendCallback cb, Status status);
  void completeRecv(RecvCallback cb, Status status, std::size_t bytes);

  // For a backend's own loop handlers (a socket or completion-queue event: never inside the user's
  // send/recv/close call). Runs the callback now when no earlier completion of this connection is
  // still queued, else queues it behind them, so completions keep their order. Saves one trip
  // through the loop (and, with Asio, one non-blocking reactor poll) per message: latency. The
  // backend must not hold references into its own state across the call: the callback may send,
  // receive or close.
  void completeSendFromHandler(SendCallback cb, Status status);
  void completeRecvFromHandler(RecvCallback cb, Status status, std::size_t bytes);

  // Posts a receive. A buffered unexpected message with this tag is delivered at once (copied, then
  // completed later on the loop); after a failure the receive completes with the sticky error.
  void postRecv(Tag tag, std::span<std::uint8_t> buffer, RecvCallback cb);
  // The oldest posted receive for `tag`, removed; nullopt when none is posted.
  std::optional<PostedRecv> takeRecv(Tag tag);
  // Delivers a complete message held in `data` to a posted receive taken with takeRecv (copies; a
  // message larger than the receive's buffer completes it with kResourceExhausted).
  void deliver(PostedRecv recv, std::span<const std::uint8_t> data);
  // Whether an unexpected message of `size` bytes may be buffered now (the budget).
  bool canBuffer(std::size_t size) const;
  // Buffers a complete unexpected message; `data` goes back to the pool once a receive consumes it.
  void stash(Tag tag, Buffer data, std::size_t size);
  std::size_t unexpectedBytes() const { return unexpectedBytes_; }

  // Called (on the loop thread, not inline in postRecv's caller's stack frame: it is posted) after
  // a receive was posted, so a backend that paused reading on the budget or waited for a receive
  // can go on.
  void setOnRecvPosted(std::function<void()> fn) { onRecvPosted_ = std::move(fn); }

  // Sets the sticky error (the first one wins) and completes every posted receive with it, dropping
  // buffered unexpected messages. Returns true if this call set the error.
  bool fail(Status status);

 private:
  struct Unexpected {
    Buffer data;
    std::size_t size;
  };
  Loop& loop_;
  const int peer_;
  BufferPool& pool_;
  const std::size_t maxUnexpectedBytes_;
  Status error_;
  // Completions posted to the loop and not yet run (shared: a posted one may outlive this core).
  std::shared_ptr<std::size_t> queued_ = std::make_shared<std::size_t>(0);
  std::unordered_map<Tag, std::deque<PostedRecv>> posted_;
  std::unordered_map<Tag, std::deque<Unexpected>> unexpected_;
  std::size_t unexpectedBytes_ = 0;
  std::function<void()> onRecvPosted_;
  bool recvPostedNotifyScheduled_ = false;
  // Posted lambdas hold a weak reference to this token so they do nothing once the core is gone.
  std::shared_ptr<int> alive_ = std::make_shared<int>(0);
};

}  // namespace grapevine::transport
