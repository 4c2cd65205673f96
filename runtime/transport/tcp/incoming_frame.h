// The TCP connection's frame being read, after its header: where its body goes and what happens
// once the body is complete. No socket: the connection reads bytes and hands them here.
//
//   idle --start(tag, size)--> in a body --take / advance ... complete--> finish() --> idle
//
// Where a body goes, decided by start():
// - posted:     the oldest receive posted for its tag, when the body fits it; finish() completes
//               the receive (from the socket handler: ConnectionCore::completeRecvFromHandler).
// - discarded:  that receive is smaller than the body: the body is read and dropped (nothing is
//               written anywhere), and finish() fails the receive with kResourceExhausted.
// - unexpected: no receive is posted: a pooled buffer, within ConnectionCore's budget for
//               unexpected messages (start() returns false, changing nothing, when the budget
//               cannot hold it: the connection stops reading until a receive is posted). finish()
//               hands it to a receive posted meanwhile, or stashes it.
//
// Thread: the connection's loop thread, like ConnectionCore.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include "runtime/common/status.h"
#include "runtime/transport/buffer_pool.h"
#include "runtime/transport/connection_core.h"
#include "runtime/transport/transport.h"

namespace grapevine::transport::tcp {

class IncomingFrame {
 public:
  explicit IncomingFrame(ConnectionCore& core) : core_(core) {}
  IncomingFrame(const IncomingFrame&) = delete;
  IncomingFrame& operator=(const IncomingFrame&) = delete;

  // Starts the body of a frame of `size` bytes with `tag` (the header was checked against
  // maxMessageBytes). False, and still idle, when it must wait for the unexpected budget.
  bool start(Tag tag, std::size_t size);

  bool inBody() const { return inBody_; }
  bool discarding() const { return inBody_ && target_ == Target::kDiscard; }
  std::size_t remaining() const { return size_ - received_; }
  bool complete() const { return inBody_ && received_ == size_; }
  // Where the rest of the body goes (nullptr while discarding): remaining() bytes are writable.
  std::uint8_t* dest() const { return dest_ == nullptr ? nullptr : dest_ + received_; }

  // Copies what `bytes` (`n` of them) hold of the body into its destination (or drops it);
  // returns how many it took: at most remaining().
  std::size_t take(const std::uint8_t* bytes, std::size_t n);
  // `n` bytes were written at dest() by the caller.
  void advance(std::size_t n) { received_ += n; }

  // The body is complete: delivers it as start() decided and goes back to idle. May run the
  // receive's callback now, which may receive, send or close: the caller holds no reference into
  // its own state across the call.
  void finish();

  // The connection failed: the receive this body was going into (if any) completes with `status`.
  void fail(const Status& status);

 private:
  enum class Target { kPosted, kUnexpected, kDiscard };

  ConnectionCore& core_;
  bool inBody_ = false;
  Tag tag_ = 0;
  std::size_t size_ = 0;
  std::size_t received_ = 0;
  Target target_ = Target::kDiscard;
  std::uint8_t* dest_ = nullptr;
  Buffer buffer_;                                   // kUnexpected: from the core's pool
  std::optional<ConnectionCore::PostedRecv> recv_;  // kPosted, kDiscard
};

}  // namespace grapevine::transport::tcp
