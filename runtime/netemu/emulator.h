// The emulator: one loop that owns every rank's TUN fd and forwards IPv4 packets between them
// through a PathModel (the sender's interface, a LinkModel per directed link, the receiver's
// interface). It runs in its own process (see Network); this header is
// what that process and the Network share: the address scheme and the counters in shared memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runtime/common/status.h"
#include "runtime/netemu/link_model.h"
#include "runtime/netemu/path_model.h"

namespace grapevine::netemu {

// Ranks live in 10.77.0.0/16: rank r is 10.77.<r / 250>.<r % 250 + 1>.
inline constexpr int kMaxRanks = 250 * 256;
std::string rankAddress(int rank);
// The rank owning an IPv4 address given in host byte order, or -1 when it is none of 0..peers-1.
int rankOfAddress(std::uint32_t hostOrderAddress, int peers);

// Counters of one directed link, as read by Network::stats(). Packets and bytes count IP packets
// written to the destination's TUN device; the drops count packets the link model or the write
// discarded.
struct LinkStats {
  std::uint64_t packets = 0;
  std::uint64_t bytes = 0;
  std::uint64_t droppedLoss = 0;  // random loss
  // Tail drop at the link's queue, at the sender's or receiver's interface queue
  // (network.node_bandwidth_mbit), or the emulator's packet pool full.
  std::uint64_t droppedQueue = 0;
  std::uint64_t droppedWrite = 0;  // the destination TUN refused the write (EAGAIN, down)
  std::uint64_t droppedDown = 0;   // sent while the link was down (Network::setLinkDown)
};

// Counters in anonymous MAP_SHARED memory, mapped before the emulator forks so both processes see
// the same pages. The emulator adds, anyone reads; every access is a relaxed atomic on a plain
// uint64_t. Memory is reserved lazily by the kernel (peers^2 links, touched only where used).
class StatsTable {
 public:
  enum Field {
    kPackets,
    kBytes,
    kDroppedLoss,
    kDroppedQueue,
    kDroppedWrite,
    kDroppedDown,
    kFields
  };
  static Result<std::unique_ptr<StatsTable>> map(int peers);
  ~StatsTable();
  StatsTable(const StatsTable&) = delete;
  StatsTable& operator=(const StatsTable&) = delete;

  void add(int from, int to, Field f, std::uint64_t v);
  void addUnknown(int from);
  LinkStats read(int from, int to) const;
  // Packets from `from` that were not IPv4 or went to an address that is no rank's.
  std::uint64_t unknownDestination(int from) const;
  // Link from -> to down (the creator sets it; the emulator drops every packet it would admit or
  // deliver on the link while it is down, queued ones included) or up again.
  void setDown(int from, int to, bool down);
  bool isDown(int from, int to) const;

 private:
  StatsTable(std::uint64_t* base, std::size_t bytes, int peers)
      : base_(base), bytes_(bytes), peers_(peers) {}
  std::uint64_t* base_;
  std::size_t bytes_;
  int peers_;
};

struct EmulatorSetup {
  int peers = 0;
  std::vector<int> tunFds;                 // rank -> non-blocking TUN fd (IFF_TUN | IFF_NO_PI)
  std::function<LinkSpec(int, int)> link;  // asked once per directed link, on its first packet
  std::function<double(int)> nodeBandwidthMbit;  // rank -> its interface's cap; empty: none
  std::uint64_t seed = 1;
  int mtu = 9000;
  std::size_t queueBytes = 0;  // 0: autoQueueBytes per link and interface
  StatsTable* stats = nullptr;
  int controlFd = -1;  // read end of a pipe: hang-up (writer closed) = stop
};

// Runs the emulator loop on the calling thread until controlFd hangs up; returns ok then, or the
// error of a failed system call. Writes one byte 'R' to readyFd once every fd is watched (then
// the caller may rely on packets being forwarded). Sleeps in epoll_wait between events: a timerfd
// armed for the next delivery wakes it, never a busy poll.
Status runEmulator(const EmulatorSetup& setup, int readyFd);

}  // namespace grapevine::netemu
