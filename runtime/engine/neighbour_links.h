// A peer process's two threads and what passes between them (driver.cc's PeerSession runs both).
//
//   loop thread                                   training thread
//   -----------                                   ---------------
//   NeighbourLinks: the neighbours' connections   PeerSession: rounds, Membership, PeerCore
//     receives complete  --- InboxItem ------->   Inbox::takeAll(), applies them in order
//     control events     --- InboxItem ------->
//     rejoins            --- InboxItem ------->
//     sends complete     --- Inbox::sendDone -->  Inbox::waitSends / pendingSends
//   repost, send, close, startReceiving  <------  Loop::post (each names the generation it knows)
//
// NeighbourLinks is loop-confined: every method but stillArriving() runs on the loop thread and
// checks it (GV_CHECK_LOOP_THREAD: aborts when another thread runs the loop); before the loop
// thread starts and after it was joined the caller holds the loop and may call them too (set-up,
// teardown). The training thread never touches a connection: it talks to the links only through
// the Inbox and tasks posted to the loop. Inbox is thread-safe (one mutex).
//
// Generations: each rejoin of a neighbour begins a new generation of its connections (the loop
// thread's count here; the training thread's view is Membership::gen()). Operations the training
// thread posts carry the generation it knows and do nothing for an older one (a send then
// completes as if the neighbour were gone); items of an older generation are ignored by the
// training thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "runtime/common/lazy_buffer.h"
#include "runtime/common/log.h"
#include "runtime/security/key.h"
#include "runtime/transport/bootstrap.h"
#include "runtime/transport/loop.h"

namespace grapevine::engine {

// Messages to neighbours: (neighbour, bytes). The bytes stay untouched until the send completed.
using SendList = std::vector<std::pair<int, std::span<const std::uint8_t>>>;

// What the loop thread hands the training thread, in arrival order per neighbour.
struct InboxItem {
  // kDead: the edge failed (closed, a send failed): dropped and closed. kSilent: no heartbeat for
  // peers.dead_after: dropped, its connections kept open. kBack: heartbeats again: a kSilent edge
  // is taken back (PeerCore::revive).
  // kRejoin: the neighbour connected again over new connections (it restarted, or a redial after
  // its connection failed): the edge starts afresh (PeerCore::rejoin).
  enum Kind { kMessage, kDead, kSilent, kBack, kRejoin } kind = kMessage;
  int peer = -1;
  int buffer = -1;
  std::size_t bytes = 0;
  std::string why;
  // The neighbour's connections this item is of: each rejoin begins a new generation, and items of
  // older ones are ignored.
  std::uint64_t gen = 0;
  // kRejoin: the neighbour's incarnation, the new connection's session key, and its round in its
  // hello (-1: not training yet).
  std::uint32_t incarnation = 0;
  std::optional<security::Key> key;
  security::Cipher cipher = security::Cipher::kChaCha20Poly1305;  // negotiated with it
  std::int64_t theirRound = -1;
  // kMessage: the receive buffers `buffer` is one of. Shared with the receives still posted into
  // them, so that the buffers of connections replaced by a rejoin are freed once the last of their
  // receives completed and the last message in them was applied.
  std::shared_ptr<std::vector<LazyBuffer>> buffers = nullptr;
  // kDead: raised by the control connection closing (the data connection may still deliver the
  // neighbour's last messages: a finished peer's close overtakes its data on a slow link).
  bool controlClosed = false;
};

// The hand-over between the two threads (thread-safe): the items the loop thread pushes, and the
// sends the training thread handed to the loop that have not completed yet.
class Inbox {
 public:
  using Clock = std::chrono::steady_clock;

  // Loop thread: hands an item over (wakes a waiting training thread).
  void push(InboxItem item);
  // Training thread: every item there, oldest first.
  std::deque<InboxItem> takeAll();
  // Training thread: waits until an item is there, `until` passes, or `wake()` (asked under the
  // lock each time the thread wakes; null: never) is true.
  void waitForItem(Clock::time_point until, const std::function<bool()>& wake = nullptr);

  // Training thread, before handing `sends` to the loop: counts each as pending (since now for a
  // neighbour with none pending).
  void countSends(const SendList& sends);
  // Loop thread: a send to j completed (or was dropped unsent).
  void sendDone(int j);
  // Training thread: a send to j pending from before counts from now (its io_timeout).
  void restartSendClock(int j);
  // Training thread: waits until no send is pending or `deadline`; true if none is.
  bool waitSends(Clock::time_point deadline);
  // The neighbours (except those `ignore` names) with a send pending, those of them pending since
  // before `stuckBefore`, and the count of completions so far (for waitSendDone).
  struct Pending {
    bool any = false;
    std::vector<int> stuck;
    std::uint64_t done = 0;
  };
  Pending pendingSends(Clock::time_point stuckBefore, const std::function<bool(int)>& ignore);
  // Waits until a send completed after pendingSends() returned `done`, or `timeout` passed.
  void waitSendDone(std::uint64_t done, Clock::duration timeout);

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<InboxItem> items_;  // guarded by mu_
  int pendingSends_ = 0;         // guarded by mu_
  std::uint64_t sendsDone_ = 0;  // guarded by mu_
  // Per neighbour: sends not completed yet, and since when the count has been above zero.
  std::map<int, int> pendingTo_;                   // guarded by mu_
  std::map<int, Clock::time_point> pendingSince_;  // guarded by mu_
};

// Every neighbour's data and control connections, on the loop thread (see the top of this file).
class NeighbourLinks {
 public:
  using Clock = std::chrono::steady_clock;
  // How often the loop thread looks at the bytes arriving per neighbour, and how recent the last
  // bytes must be for stillArriving() to count them.
  static constexpr auto kArrivalSample = std::chrono::milliseconds(200);
  static constexpr auto kArrivalWindow = std::chrono::milliseconds(500);
  // The window counted in samples too: bytes seen by one of the latest samples are recent however
  // late the samples ran (a loop thread starved on a loaded machine samples less often than every
  // kArrivalSample, and a message arriving at full speed then looked stale by the clock).
  static constexpr std::uint64_t kArrivalWindowSamples = 2;
  static constexpr int kRecvBuffersPerNeighbour = 3;

  // `maxWireBytes`: the largest message a neighbour may send (each receive buffer's size).
  NeighbourLinks(transport::Loop& loop, Inbox& inbox, std::size_t maxWireBytes);
  NeighbourLinks(const NeighbourLinks&) = delete;
  NeighbourLinks& operator=(const NeighbourLinks&) = delete;

  // ---- loop thread ----
  // The bootstrap's completion: keeps the connections, posts the first receives, starts sampling
  // arrivals.
  void connected(std::vector<transport::Neighbour> neighbours);
  // A neighbour connected again (Bootstrap's onRejoin): closes its old connections, keeps the new
  // ones (no receive posted yet) and tells the training thread (kRejoin).
  void rejoined(transport::Neighbour n);
  // After the training thread took the rejoin: receives on the new data connection, into fresh
  // buffers (a cancelled receive of the old connection may still be finishing with the old ones).
  void startReceiving(int j, std::uint64_t gen);
  // Receives into `buffer` of j's current set again (the training thread applied its message).
  void receive(int j, int buffer, std::uint64_t gen);
  // Sends each message to its neighbour's data connection (`gens`: the generation the training
  // thread knows per neighbour); every send ends in Inbox::sendDone, sent or not.
  void send(SendList sends, std::map<int, std::uint64_t> gens);
  // Closes j's connections (when `gen` is still current).
  void close(int j, std::uint64_t gen);
  // Sends each of `messages` to every neighbour's control connection (a closed one: gone).
  void sendControl(std::uint16_t type, const std::vector<std::vector<std::uint8_t>>& messages);
  // A control connection's event (BootstrapOptions::onEvent) as an item: kSilent, kBack or kDead.
  // Events of a connection replaced by a rejoin are the old one's and dropped.
  void controlEvent(const transport::ControlEvent& ev);
  // The generation of j's connections.
  std::uint64_t gen(int j);
  // Stops sampling and closes every neighbour's connections (shutdown).
  void closeAll();
  // After the loop thread was joined: releases the connections (loop-owned objects; the loop must
  // still be alive for their destructors).
  void release();

  // ---- any thread ----
  // Neighbours of `missing` whose bytes arrived after `since` (a round's wait: bytes of an earlier
  // message do not count) and recently: within the last kArrivalWindow, or seen by one of the last
  // kArrivalWindowSamples samples.
  std::vector<int> stillArriving(const std::vector<int>& missing,
                                 Clock::time_point since = Clock::time_point::min());

 private:
  // kRecvBuffersPerNeighbour fresh receive buffers of maxWireBytes_ each (nothing touched yet).
  std::shared_ptr<std::vector<LazyBuffer>> newReceiveBuffers() const;
  // Every kArrivalSample: notes which neighbours' data connections read bytes since the last
  // sample. Reschedules itself until closeAll().
  void sampleArrivals();

  transport::Loop& loop_;
  Inbox& inbox_;
  const std::size_t maxWireBytes_;
  // Loop thread.
  std::map<int, transport::Neighbour> neighbours_;
  // Per neighbour, the receive buffers of its current connections: sized for the largest message,
  // resident only as far as messages filled them (LazyBuffer).
  std::map<int, std::shared_ptr<std::vector<LazyBuffer>>> buffers_;
  std::map<int, std::uint64_t> gen_;
  std::map<int, std::uint64_t> arrivedSeen_;  // bytesArrived() at the last sample
  std::shared_ptr<transport::Loop::TimerHandle> arrivalTimer_;
  log::Throttle oversizeLog_;  // messages above the maximum
  // Per neighbour: when bytes last arrived on its data connection, the sample that saw them, and
  // the samples taken (guarded by arrivalMu_: stillArriving() reads them on the training thread).
  std::mutex arrivalMu_;
  std::map<int, Clock::time_point> arrivingAt_;
  std::map<int, std::uint64_t> arrivingSample_;
  std::uint64_t samples_ = 0;
};

}  // namespace grapevine::engine
