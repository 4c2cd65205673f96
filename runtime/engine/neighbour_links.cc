#include "runtime/engine/neighbour_links.h"

#include <utility>

namespace grapevine::engine {
namespace {

constexpr transport::Tag kDataTag = 1;

}  // namespace

void Inbox::push(InboxItem item) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    items_.push_back(std::move(item));
  }
  cv_.notify_one();
}

std::deque<InboxItem> Inbox::takeAll() {
  std::deque<InboxItem> items;
  std::lock_guard<std::mutex> lock(mu_);
  items.swap(items_);
  return items;
}

void Inbox::waitForItem(Clock::time_point until, const std::function<bool()>& wake) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_until(lock, until, [&] { return !items_.empty() || (wake && wake()); });
}

void Inbox::countSends(const SendList& sends) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto now = Clock::now();
  pendingSends_ += static_cast<int>(sends.size());
  for (const auto& [j, bytes] : sends) {
    if (pendingTo_[j]++ == 0) pendingSince_[j] = now;
  }
}

void Inbox::sendDone(int j) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    --pendingSends_;
    --pendingTo_[j];
    ++sendsDone_;
  }
  cv_.notify_one();
}

void Inbox::restartSendClock(int j) {
  std::lock_guard<std::mutex> lock(mu_);
  pendingSince_[j] = Clock::now();
}

bool Inbox::waitSends(Clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_until(lock, deadline, [this] { return pendingSends_ <= 0; });
}

Inbox::Pending Inbox::pendingSends(Clock::time_point stuckBefore,
                                   const std::function<bool(int)>& ignore) {
  Pending p;
  std::lock_guard<std::mutex> lock(mu_);
  p.done = sendsDone_;
  for (const auto& [j, n] : pendingTo_) {
    if (n <= 0 || ignore(j)) continue;
    p.any = true;
    if (pendingSince_[j] <= stuckBefore) p.stuck.push_back(j);
  }
  return p;
}

void Inbox::waitSendDone(std::uint64_t done, Clock::duration timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, timeout, [&] { return sendsDone_ != done; });
}

NeighbourLinks::NeighbourLinks(transport::Loop& loop, Inbox& inbox, std::size_t maxWireBytes)
    : loop_(loop), inbox_(inbox), maxWireBytes_(maxWireBytes) {}

std::shared_ptr<std::vector<LazyBuffer>> NeighbourLinks::newReceiveBuffers() const {
  auto set = std::make_shared<std::vector<LazyBuffer>>();
  set->reserve(kRecvBuffersPerNeighbour);
  for (int b = 0; b < kRecvBuffersPerNeighbour; ++b) set->emplace_back(maxWireBytes_);
  return set;
}

void NeighbourLinks::connected(std::vector<transport::Neighbour> neighbours) {
  GV_CHECK_LOOP_THREAD(loop_);
  for (auto& n : neighbours) {
    const int j = n.peer;
    neighbours_[j] = std::move(n);
    buffers_[j] = newReceiveBuffers();
    for (int b = 0; b < kRecvBuffersPerNeighbour; ++b) receive(j, b, 0);
  }
  sampleArrivals();
}

void NeighbourLinks::receive(int j, int buffer, std::uint64_t gen) {
  GV_CHECK_LOOP_THREAD(loop_);
  auto it = neighbours_.find(j);
  if (it == neighbours_.end() || !it->second.data || gen_[j] != gen) return;
  std::shared_ptr<std::vector<LazyBuffer>> set = buffers_[j];
  auto& buf = set->at(static_cast<std::size_t>(buffer));
  it->second.data->recv(
      kDataTag, buf.span(), [this, j, buffer, gen, set](Status st, std::size_t n) {
        if (st.isOk()) {
          // Data from the neighbour is a sign of life as good as a heartbeat (which may wait behind
          // it).
          if (auto nb = neighbours_.find(j);
              nb != neighbours_.end() && nb->second.control && gen_[j] == gen) {
            nb->second.control->heardFrom();
          }
          InboxItem item{InboxItem::kMessage, j, buffer, n, "", gen, 0, std::nullopt};
          item.buffers = set;
          inbox_.push(std::move(item));
        } else if (st.code() == ErrorCode::kResourceExhausted) {
          if (oversizeLog_.due()) {
            log::warn("peer ", j, " sent a message above the maximum; dropped",
                      oversizeLog_.skipped());
          }
          receive(j, buffer, gen);
        } else if (st.code() != ErrorCode::kCancelled) {
          inbox_.push({InboxItem::kDead, j, -1, 0, "data connection: " + st.toString(), gen, 0,
                       std::nullopt});
        }
      });
}

void NeighbourLinks::rejoined(transport::Neighbour n) {
  GV_CHECK_LOOP_THREAD(loop_);
  const int j = n.peer;
  if (auto it = neighbours_.find(j); it != neighbours_.end()) {
    if (it->second.data) it->second.data->close();
    if (it->second.control) it->second.control->close();
  }
  const std::uint64_t g = ++gen_[j];
  InboxItem item{InboxItem::kRejoin, j, -1, 0, "connected again", g, 0, std::nullopt};
  item.incarnation = static_cast<std::uint32_t>(n.incarnation);
  item.key = n.sessionKey;
  item.cipher = n.cipher;
  item.theirRound = n.runningRound;
  neighbours_[j] = std::move(n);
  inbox_.push(std::move(item));
}

void NeighbourLinks::startReceiving(int j, std::uint64_t gen) {
  GV_CHECK_LOOP_THREAD(loop_);
  if (gen_[j] != gen) return;
  // The old connection's buffers go once its last receive completed (they hold a reference).
  buffers_[j] = newReceiveBuffers();
  for (int b = 0; b < kRecvBuffersPerNeighbour; ++b) receive(j, b, gen);
}

void NeighbourLinks::send(SendList sends, std::map<int, std::uint64_t> gens) {
  GV_CHECK_LOOP_THREAD(loop_);
  for (auto& [j, bytes] : sends) {
    auto it = neighbours_.find(j);
    if (it == neighbours_.end() || !it->second.data || gen_[j] != gens[j]) {
      inbox_.sendDone(j);
      continue;
    }
    it->second.data->send(kDataTag, bytes, [this, j = j, gen = gens[j]](Status st) {
      inbox_.sendDone(j);
      if (!st.isOk() && st.code() != ErrorCode::kCancelled) {
        inbox_.push(
            {InboxItem::kDead, j, -1, 0, "send failed: " + st.toString(), gen, 0, std::nullopt});
      }
    });
  }
}

void NeighbourLinks::close(int j, std::uint64_t gen) {
  GV_CHECK_LOOP_THREAD(loop_);
  auto it = neighbours_.find(j);
  if (it == neighbours_.end() || gen_[j] != gen) return;
  if (it->second.data) it->second.data->close();
  if (it->second.control) it->second.control->close();
}

void NeighbourLinks::sendControl(std::uint16_t type,
                                 const std::vector<std::vector<std::uint8_t>>& messages) {
  GV_CHECK_LOOP_THREAD(loop_);
  for (auto& [j, n] : neighbours_) {
    if (!n.control) continue;
    for (const auto& m : messages) (void)n.control->send(type, m);  // closed: gone
  }
}

void NeighbourLinks::controlEvent(const transport::ControlEvent& ev) {
  GV_CHECK_LOOP_THREAD(loop_);
  // Silence drops the edge but keeps its connections (the neighbour may be paused or cut off);
  // heartbeats again take it back; a closed control connection is the end.
  InboxItem::Kind kind = InboxItem::kDead;
  if (ev.kind == transport::ControlEventKind::kMissedHeartbeats) kind = InboxItem::kSilent;
  if (ev.kind == transport::ControlEventKind::kHeartbeatsResumed) kind = InboxItem::kBack;
  auto it = neighbours_.find(ev.peer);
  if (it != neighbours_.end() && it->second.control.get() != ev.channel) return;
  InboxItem item{kind, ev.peer, -1, 0, ev.message, gen_[ev.peer], 0, std::nullopt};
  item.controlClosed = kind == InboxItem::kDead;
  inbox_.push(std::move(item));
}

std::uint64_t NeighbourLinks::gen(int j) {
  GV_CHECK_LOOP_THREAD(loop_);
  return gen_[j];
}

void NeighbourLinks::closeAll() {
  GV_CHECK_LOOP_THREAD(loop_);
  if (arrivalTimer_) loop_.cancel(arrivalTimer_);
  for (auto& [j, n] : neighbours_) close(j, gen_[j]);
}

void NeighbourLinks::release() {
  GV_CHECK_LOOP_THREAD(loop_);
  neighbours_.clear();
}

void NeighbourLinks::sampleArrivals() {
  GV_CHECK_LOOP_THREAD(loop_);
  const auto now = Clock::now();
  std::vector<int> grew;
  for (auto& [j, n] : neighbours_) {
    if (!n.data) continue;
    const std::uint64_t a = n.data->bytesArrived();
    if (a != arrivedSeen_[j]) {
      arrivedSeen_[j] = a;
      grew.push_back(j);
    }
  }
  {
    std::lock_guard<std::mutex> lock(arrivalMu_);
    ++samples_;
    for (int j : grew) {
      arrivingAt_[j] = now;
      arrivingSample_[j] = samples_;
    }
  }
  arrivalTimer_ = loop_.after(kArrivalSample, [this] { sampleArrivals(); });
}

std::vector<int> NeighbourLinks::stillArriving(const std::vector<int>& missing,
                                               Clock::time_point since) {
  const auto now = Clock::now();
  std::vector<int> out;
  std::lock_guard<std::mutex> lock(arrivalMu_);
  for (int j : missing) {
    auto it = arrivingAt_.find(j);
    if (it == arrivingAt_.end() || it->second <= since) continue;
    if (now - it->second <= kArrivalWindow ||
        arrivingSample_[j] + kArrivalWindowSamples > samples_) {
      out.push_back(j);
    }
  }
  return out;
}

}  // namespace grapevine::engine
