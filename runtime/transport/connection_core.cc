#include "runtime/transport/connection_core.h"

#include <cstring>
#include <string>

namespace grapevine::transport {

ConnectionCore::ConnectionCore(Loop& loop, int peer, BufferPool& pool,
                               std::size_t maxUnexpectedBytes)
    : loop_(loop), peer_(peer), pool_(pool), maxUnexpectedBytes_(maxUnexpectedBytes) {}

void ConnectionCore::completeSend(SendCallback cb, Status status) {
  GV_CHECK_LOOP_THREAD(loop_);
  ++*queued_;
  loop_.post([cb = std::move(cb), status = std::move(status), queued = queued_]() mutable {
    --*queued;
    cb(std::move(status));
  });
}

void ConnectionCore::completeRecv(RecvCallback cb, Status status, std::size_t bytes) {
  GV_CHECK_LOOP_THREAD(loop_);
  ++*queued_;
  loop_.post([cb = std::move(cb), status = std::move(status), bytes, queued = queued_]() mutable {
    --*queued;
    cb(std::move(status), bytes);
  });
}

void ConnectionCore::completeSendFromHandler(SendCallback cb, Status status) {
  GV_CHECK_LOOP_THREAD(loop_);
  if (*queued_ > 0) return completeSend(std::move(cb), std::move(status));
  cb(std::move(status));
}

void ConnectionCore::completeRecvFromHandler(RecvCallback cb, Status status, std::size_t bytes) {
  GV_CHECK_LOOP_THREAD(loop_);
  if (*queued_ > 0) return completeRecv(std::move(cb), std::move(status), bytes);
  cb(std::move(status), bytes);
}

void ConnectionCore::postRecv(Tag tag, std::span<std::uint8_t> buffer, RecvCallback cb) {
  GV_CHECK_LOOP_THREAD(loop_);
  if (failed()) {
    completeRecv(std::move(cb), error_, 0);
    return;
  }
  auto it = unexpected_.find(tag);
  if (it != unexpected_.end() && !it->second.empty()) {
    Unexpected u = std::move(it->second.front());
    it->second.pop_front();
    if (it->second.empty()) unexpected_.erase(it);
    unexpectedBytes_ -= u.size;
    deliver(PostedRecv{buffer, std::move(cb)},
            std::span<const std::uint8_t>(u.data.data(), u.size));
    pool_.release(std::move(u.data));
  } else {
    posted_[tag].push_back(PostedRecv{buffer, std::move(cb)});
  }
  if (onRecvPosted_ && !recvPostedNotifyScheduled_) {
    recvPostedNotifyScheduled_ = true;
    loop_.post([this, alive = std::weak_ptr<int>(alive_)] {
      if (alive.expired()) return;
      recvPostedNotifyScheduled_ = false;
      if (onRecvPosted_) onRecvPosted_();
    });
  }
}

std::optional<ConnectionCore::PostedRecv> ConnectionCore::takeRecv(Tag tag) {
  GV_CHECK_LOOP_THREAD(loop_);
  auto it = posted_.find(tag);
  if (it == posted_.end() || it->second.empty()) return std::nullopt;
  PostedRecv r = std::move(it->second.front());
  it->second.pop_front();
  if (it->second.empty()) posted_.erase(it);
  return r;
}

void ConnectionCore::deliver(PostedRecv recv, std::span<const std::uint8_t> data) {
  GV_CHECK_LOOP_THREAD(loop_);
  if (data.size() > recv.buffer.size()) {
    completeRecv(std::move(recv.cb),
                 resourceExhausted("message of " + std::to_string(data.size()) +
                                   " bytes does not fit the posted receive of " +
                                   std::to_string(recv.buffer.size()) + " bytes"),
                 0);
    return;
  }
  if (!data.empty()) std::memcpy(recv.buffer.data(), data.data(), data.size());
  completeRecv(std::move(recv.cb), Status::ok(), data.size());
}

bool ConnectionCore::canBuffer(std::size_t size) const {
  return unexpectedBytes_ == 0 || unexpectedBytes_ + size <= maxUnexpectedBytes_;
}

void ConnectionCore::stash(Tag tag, Buffer data, std::size_t size) {
  GV_CHECK_LOOP_THREAD(loop_);
  unexpectedBytes_ += size;
  unexpected_[tag].push_back(Unexpected{std::move(data), size});
}

bool ConnectionCore::fail(Status status) {
  GV_CHECK_LOOP_THREAD(loop_);
  if (failed()) return false;
  error_ = std::move(status);
  for (auto& [tag, q] : posted_) {
    for (PostedRecv& r : q) completeRecv(std::move(r.cb), error_, 0);
  }
  posted_.clear();
  for (auto& [tag, q] : unexpected_) {
    for (Unexpected& u : q) pool_.release(std::move(u.data));
  }
  unexpected_.clear();
  unexpectedBytes_ = 0;
  onRecvPosted_ = nullptr;
  return true;
}

}  // namespace grapevine::transport
