#include "runtime/transport/tcp/incoming_frame.h"

#include <algorithm>
#include <cstring>
#include <span>
#include <string>
#include <utility>

namespace grapevine::transport::tcp {

bool IncomingFrame::start(Tag tag, std::size_t size) {
  if (auto r = core_.takeRecv(tag)) {
    const bool fits = size <= r->buffer.size();
    target_ = fits ? Target::kPosted : Target::kDiscard;
    dest_ = fits ? r->buffer.data() : nullptr;
    recv_ = std::move(*r);
  } else {
    if (!core_.canBuffer(size)) return false;
    target_ = Target::kUnexpected;
    buffer_ = core_.pool().acquire(size);
    dest_ = buffer_.data();
  }
  tag_ = tag;
  size_ = size;
  received_ = 0;
  inBody_ = true;
  return true;
}

std::size_t IncomingFrame::take(const std::uint8_t* bytes, std::size_t n) {
  const std::size_t taken = std::min(n, remaining());
  if (taken > 0 && dest_ != nullptr) std::memcpy(dest_ + received_, bytes, taken);
  received_ += taken;
  return taken;
}

void IncomingFrame::finish() {
  inBody_ = false;
  dest_ = nullptr;
  switch (target_) {
    case Target::kPosted: {
      // The callback may receive, send or close: the frame is idle before it runs.
      RecvCallback cb = std::move(recv_->cb);
      recv_.reset();
      core_.completeRecvFromHandler(std::move(cb), Status::ok(), size_);
      return;
    }
    case Target::kDiscard:
      core_.completeRecv(std::move(recv_->cb),
                         resourceExhausted("message of " + std::to_string(size_) +
                                           " bytes does not fit the posted receive of " +
                                           std::to_string(recv_->buffer.size()) + " bytes"),
                         0);
      break;
    case Target::kUnexpected:
      // A receive may have been posted while this body was arriving: hand it over now, or it
      // would wait behind a message that is already here.
      if (auto r = core_.takeRecv(tag_)) {
        core_.deliver(std::move(*r), std::span<const std::uint8_t>(buffer_.data(), size_));
        core_.pool().release(std::move(buffer_));
      } else {
        core_.stash(tag_, std::move(buffer_), size_);
      }
      break;
  }
  recv_.reset();
}

void IncomingFrame::fail(const Status& status) {
  if (!recv_) return;
  core_.completeRecv(std::move(recv_->cb), status, 0);
  recv_.reset();
}

}  // namespace grapevine::transport::tcp
