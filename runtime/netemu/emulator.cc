#include "runtime/netemu/emulator.h"

#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <queue>
#include <thread>

namespace grapevine::netemu {

std::string rankAddress(int rank) {
  return "10.77." + std::to_string(rank / 250) + "." + std::to_string(rank % 250 + 1);
}

int rankOfAddress(std::uint32_t a, int peers) {
  if ((a >> 16) != ((10u << 8) | 77u)) return -1;
  const int hi = static_cast<int>((a >> 8) & 0xff);
  const int lo = static_cast<int>(a & 0xff);
  if (lo < 1 || lo > 250) return -1;
  const int rank = hi * 250 + lo - 1;
  return rank < peers ? rank : -1;
}

// ---- StatsTable ----

Result<std::unique_ptr<StatsTable>> StatsTable::map(int peers) {
  // Counters per link, unknown destinations per rank, then a down flag per link.
  const std::size_t words = static_cast<std::size_t>(peers) * peers * kFields +
                            static_cast<std::size_t>(peers) +
                            static_cast<std::size_t>(peers) * peers;
  const std::size_t bytes = words * sizeof(std::uint64_t);
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) {
    return resourceExhausted("mmap of " + std::to_string(bytes) +
                             " bytes of link counters: " + std::strerror(errno));
  }
  return std::unique_ptr<StatsTable>(new StatsTable(static_cast<std::uint64_t*>(p), bytes, peers));
}

StatsTable::~StatsTable() { ::munmap(base_, bytes_); }

void StatsTable::add(int from, int to, Field f, std::uint64_t v) {
  std::uint64_t& w = base_[(static_cast<std::size_t>(from) * peers_ + to) * kFields + f];
  std::atomic_ref<std::uint64_t>(w).fetch_add(v, std::memory_order_relaxed);
}

void StatsTable::addUnknown(int from) {
  std::uint64_t& w = base_[static_cast<std::size_t>(peers_) * peers_ * kFields + from];
  std::atomic_ref<std::uint64_t>(w).fetch_add(1, std::memory_order_relaxed);
}

LinkStats StatsTable::read(int from, int to) const {
  std::uint64_t* w = base_ + (static_cast<std::size_t>(from) * peers_ + to) * kFields;
  auto get = [&](Field f) {
    return std::atomic_ref<std::uint64_t>(w[f]).load(std::memory_order_relaxed);
  };
  return {get(kPackets),      get(kBytes),        get(kDroppedLoss),
          get(kDroppedQueue), get(kDroppedWrite), get(kDroppedDown)};
}

void StatsTable::setDown(int from, int to, bool down) {
  std::uint64_t& w = base_[static_cast<std::size_t>(peers_) * peers_ * kFields + peers_ +
                           static_cast<std::size_t>(from) * peers_ + to];
  std::atomic_ref<std::uint64_t>(w).store(down ? 1 : 0, std::memory_order_relaxed);
}

bool StatsTable::isDown(int from, int to) const {
  std::uint64_t& w = base_[static_cast<std::size_t>(peers_) * peers_ * kFields + peers_ +
                           static_cast<std::size_t>(from) * peers_ + to];
  return std::atomic_ref<std::uint64_t>(w).load(std::memory_order_relaxed) != 0;
}

std::uint64_t StatsTable::unknownDestination(int from) const {
  std::uint64_t& w = base_[static_cast<std::size_t>(peers_) * peers_ * kFields + from];
  return std::atomic_ref<std::uint64_t>(w).load(std::memory_order_relaxed);
}

// ---- the loop ----
namespace {

std::int64_t monotonicNs() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

struct Packet {
  std::int64_t deliverAtNs = 0;  // or, while atIngress, when it reaches the receiver's interface
  std::uint64_t seq = 0;         // admission order: ties in deliverAt keep FIFO
  int from = 0, to = 0;
  bool atIngress = false;  // still to pass the receiver's interface (PathModel::receive)
  std::uint32_t len = 0;
  std::uint8_t* data = nullptr;
};

// Fixed-size packet buffers reused through a free list; grows in chunks up to maxPackets so the
// steady state never allocates.
class PacketPool {
 public:
  PacketPool(std::size_t bufBytes, std::size_t maxPackets)
      : bufBytes_(bufBytes), maxPackets_(maxPackets) {}
  Packet* get() {
    if (free_.empty() && !grow()) return nullptr;
    Packet* p = free_.back();
    free_.pop_back();
    return p;
  }
  void put(Packet* p) { free_.push_back(p); }
  std::size_t bufBytes() const { return bufBytes_; }

 private:
  static constexpr std::size_t kChunk = 64;
  bool grow() {
    if (total_ + kChunk > maxPackets_) return false;
    auto packets = std::make_unique<Packet[]>(kChunk);
    auto bytes = std::make_unique<std::uint8_t[]>(kChunk * bufBytes_);
    free_.reserve(total_ + kChunk);
    for (std::size_t i = 0; i < kChunk; ++i) {
      packets[i].data = bytes.get() + i * bufBytes_;
      free_.push_back(&packets[i]);
    }
    total_ += kChunk;
    packetChunks_.push_back(std::move(packets));
    byteChunks_.push_back(std::move(bytes));
    return true;
  }
  std::size_t bufBytes_, maxPackets_, total_ = 0;
  std::vector<Packet*> free_;
  std::vector<std::unique_ptr<Packet[]>> packetChunks_;
  std::vector<std::unique_ptr<std::uint8_t[]>> byteChunks_;
};

struct Later {
  bool operator()(const Packet* a, const Packet* b) const {
    return a->deliverAtNs != b->deliverAtNs ? a->deliverAtNs > b->deliverAtNs : a->seq > b->seq;
  }
};

constexpr std::uint32_t kControlTag = 0xffffffffu;
constexpr std::uint32_t kTimerTag = 0xfffffffeu;
constexpr int kReadBurst =
    32;  // packets per TUN per wake-up, so one busy sender cannot starve others
constexpr std::size_t kPoolBytes = 256u << 20;

class Loop {
 public:
  explicit Loop(const EmulatorSetup& s)
      : s_(s),
        pool_(static_cast<std::size_t>(s.mtu) + 64,
              std::max<std::size_t>(1024, kPoolBytes / (static_cast<std::size_t>(s.mtu) + 64))),
        scratch_(pool_.bufBytes()),
        paths_(PathOptions{s.peers, s.link, s.nodeBandwidthMbit, s.queueBytes, s.seed}) {}

  ~Loop() {
    if (timer_ >= 0) ::close(timer_);
    if (epoll_ >= 0) ::close(epoll_);
  }

  Status setUp() {
    // Deliveries are due at exact nanoseconds; the default 50 us timer slack would add to latency.
    ::prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
    epoll_ = ::epoll_create1(EPOLL_CLOEXEC);
    if (epoll_ < 0) return sysError("epoll_create1");
    timer_ = ::timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (timer_ < 0) return sysError("timerfd_create");
    GV_RETURN_IF_ERROR(watch(timer_, kTimerTag));
    GV_RETURN_IF_ERROR(watch(s_.controlFd, kControlTag));
    for (int r = 0; r < s_.peers; ++r)
      GV_RETURN_IF_ERROR(watch(s_.tunFds[r], static_cast<std::uint32_t>(r)));
    return Status::ok();
  }

  Status run() {
    epoll_event events[64];
    for (;;) {
      const int n = ::epoll_wait(epoll_, events, 64, -1);
      if (n < 0) {
        if (errno == EINTR) continue;
        return sysError("epoll_wait");
      }
      for (int i = 0; i < n; ++i) {
        const std::uint32_t tag = events[i].data.u32;
        if (tag == kControlTag) return Status::ok();  // the Network closed its end: stop
        if (tag == kTimerTag) {
          std::uint64_t expirations;
          [[maybe_unused]] ssize_t r = ::read(timer_, &expirations, sizeof expirations);
          timerArmedNs_ = 0;
          continue;
        }
        readBurst(static_cast<int>(tag));
      }
      deliverDue(monotonicNs());
      GV_RETURN_IF_ERROR(armTimer());
    }
  }

 private:
  static Status sysError(const char* what) {
    return internalError(std::string("emulator: ") + what + ": " + std::strerror(errno));
  }

  Status watch(int fd, std::uint32_t tag) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u32 = tag;
    if (::epoll_ctl(epoll_, EPOLL_CTL_ADD, fd, &ev) != 0) return sysError("epoll_ctl");
    return Status::ok();
  }

  void readBurst(int from) {
    const int fd = s_.tunFds[from];
    for (int k = 0; k < kReadBurst; ++k) {
      Packet* p = pool_.get();
      std::uint8_t* buf = p ? p->data : scratch_.data();
      const ssize_t r = ::read(fd, buf, pool_.bufBytes());
      if (r < 0) {
        if (p) pool_.put(p);
        if (errno == EINTR) continue;
        if (errno != EAGAIN) {
          // A device that fails reads would keep the level-triggered fd ready forever: stop
          // watching it rather than spin.
          ::epoll_ctl(epoll_, EPOLL_CTL_DEL, fd, nullptr);
        }
        return;
      }
      const std::int64_t now = monotonicNs();
      const std::size_t len = static_cast<std::size_t>(r);
      int to = -1;
      if (len >= 20 && (buf[0] >> 4) == 4) {
        const std::uint32_t dst = (std::uint32_t{buf[16]} << 24) | (std::uint32_t{buf[17]} << 16) |
                                  (std::uint32_t{buf[18]} << 8) | std::uint32_t{buf[19]};
        to = rankOfAddress(dst, s_.peers);
      }
      if (to < 0 || to == from) {
        s_.stats->addUnknown(from);
        if (p) pool_.put(p);
        continue;
      }
      if (!p) {  // every buffer is in flight: the emulator's own queue overflowed
        s_.stats->add(from, to, StatsTable::kDroppedQueue, 1);
        continue;
      }
      if (s_.stats->isDown(from, to)) {  // a link taken down (faults: link-down)
        s_.stats->add(from, to, StatsTable::kDroppedDown, 1);
        pool_.put(p);
        continue;
      }
      const Decision d = paths_.send(now, from, to, len);
      if (d.verdict != Verdict::kDeliver) {
        s_.stats->add(
            from, to,
            d.verdict == Verdict::kDropLoss ? StatsTable::kDroppedLoss : StatsTable::kDroppedQueue,
            1);
        pool_.put(p);
        continue;
      }
      p->deliverAtNs = d.deliverAtNs;
      p->seq = seq_++;
      p->from = from;
      p->to = to;
      p->len = static_cast<std::uint32_t>(len);
      p->atIngress = paths_.ingressLimited(to);
      if (!p->atIngress && d.deliverAtNs <= now && heap_.empty()) {
        deliver(p);  // unshaped link with nothing in flight: forward at once
      } else {
        heap_.push(p);
      }
    }
  }

  void deliver(Packet* p) {
    if (s_.stats->isDown(p->from, p->to)) {  // went down while the packet was on its way
      s_.stats->add(p->from, p->to, StatsTable::kDroppedDown, 1);
      pool_.put(p);
      return;
    }
    const ssize_t w = ::write(s_.tunFds[p->to], p->data, p->len);
    if (w == static_cast<ssize_t>(p->len)) {
      s_.stats->add(p->from, p->to, StatsTable::kPackets, 1);
      s_.stats->add(p->from, p->to, StatsTable::kBytes, p->len);
    } else {
      s_.stats->add(p->from, p->to, StatsTable::kDroppedWrite, 1);
    }
    pool_.put(p);
  }

  // Pops in (time, admission) order, so every receiver's interface sees its packets in the order
  // they reach it (PathModel::receive's precondition): a packet read later reaches it later.
  void deliverDue(std::int64_t now) {
    while (!heap_.empty() && heap_.top()->deliverAtNs <= now) {
      Packet* p = heap_.top();
      heap_.pop();
      if (!p->atIngress) {
        deliver(p);
        continue;
      }
      p->atIngress = false;
      const Decision d = paths_.receive(p->deliverAtNs, p->from, p->to, p->len);
      if (d.verdict != Verdict::kDeliver) {
        s_.stats->add(p->from, p->to, StatsTable::kDroppedQueue, 1);
        pool_.put(p);
        continue;
      }
      p->deliverAtNs = d.deliverAtNs;
      heap_.push(p);  // popped again in this loop when already due
    }
  }

  Status armTimer() {
    const std::int64_t want = heap_.empty() ? 0 : heap_.top()->deliverAtNs;
    if (want == timerArmedNs_) return Status::ok();
    itimerspec its{};
    its.it_value.tv_sec = want / 1000000000;
    its.it_value.tv_nsec = want % 1000000000;
    // it_value 0 disarms; a due time in the past fires at once.
    if (want != 0 && its.it_value.tv_sec == 0 && its.it_value.tv_nsec == 0)
      its.it_value.tv_nsec = 1;
    if (::timerfd_settime(timer_, TFD_TIMER_ABSTIME, &its, nullptr) != 0)
      return sysError("timerfd_settime");
    timerArmedNs_ = want;
    return Status::ok();
  }

  const EmulatorSetup& s_;
  PacketPool pool_;
  std::vector<std::uint8_t> scratch_;  // reads when the pool is exhausted (the packet is dropped)
  std::priority_queue<Packet*, std::vector<Packet*>, Later> heap_;
  PathModel paths_;
  std::uint64_t seq_ = 0;
  std::int64_t timerArmedNs_ = 0;
  int epoll_ = -1;
  int timer_ = -1;
};

// Closing the last fd of a TUN device unregisters it, and each waits for RCU grace periods
// (~20 ms here, 20 s for 1000 ranks one after the other). From several threads the waits overlap:
// 10x faster measured with 16 threads.
void closeInParallel(const std::vector<int>& fds) {
  constexpr std::size_t kThreads = 16;
  const std::size_t n = std::min(kThreads, (fds.size() + 7) / 8);
  if (n <= 1) {
    for (int fd : fds) ::close(fd);
    return;
  }
  std::vector<std::thread> threads;
  for (std::size_t t = 0; t < n; ++t) {
    threads.emplace_back([&fds, t, n] {
      for (std::size_t i = t; i < fds.size(); i += n) ::close(fds[i]);
    });
  }
  for (auto& th : threads) th.join();
}

}  // namespace

Status runEmulator(const EmulatorSetup& setup, int readyFd) {
  if (setup.peers <= 0 || static_cast<int>(setup.tunFds.size()) != setup.peers || !setup.stats ||
      !setup.link || setup.controlFd < 0) {
    return invalidArgument("emulator: incomplete setup");
  }
  Status result;
  {
    Loop loop(setup);
    GV_RETURN_IF_ERROR(loop.setUp());
    if (readyFd >= 0) {
      const char ready = 'R';
      [[maybe_unused]] ssize_t w = ::write(readyFd, &ready, 1);
    }
    result = loop.run();
  }
  closeInParallel(setup.tunFds);
  return result;
}

}  // namespace grapevine::netemu
