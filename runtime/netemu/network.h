// An emulated network for real peer processes on one host. Every rank gets its own network
// namespace `gv<pid>-<rank>` holding `lo` and one TUN interface `gvtun` (address rankAddress(rank),
// 10.77.0.0/16). All TUN fds belong to one emulator process (forked by create(), killed with its
// parent) that forwards each IPv4 packet from rank i to rank j through the LinkModel of link i->j:
// loss, rate with a bounded tail-drop queue, latency with jitter, no reordering. Anything run in
// the namespaces (Grapevine peers, a PyTorch baseline, iperf3) sees the same links: emulation sits
// in the network path, not in any transport. A rank's interface can be capped too (PathModel):
// then all of its links share one rate out and one rate in, as behind one NIC.
//
// Needs root (CAP_NET_ADMIN + CAP_SYS_ADMIN), /dev/net/tun and iproute2's `ip`. One Network per
// process at a time (the namespace names carry the pid). Not thread-safe; create and destroy it on
// one thread, and one that lives as long as the Network: the emulator is killed when the thread
// that forked it exits (PR_SET_PDEATHSIG), which is what ties it to a crashed or killed creator.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runtime/common/status.h"
#include "runtime/common/subprocess.h"
#include "runtime/netemu/emulator.h"
#include "runtime/netemu/link_model.h"

namespace grapevine::netemu {

struct Options {
  int peers = 0;
  // Parameters of the directed link from -> to, asked once per link on its first packet (in the
  // emulator process, so it must not rely on state the creator changes later). Empty: every link
  // is unlimited with no delay.
  std::function<LinkSpec(int from, int to)> link;
  // Each rank's interface cap in Mbit/s, egress and ingress each shared by all of its links (asked
  // once per rank when the emulator starts, in the emulator process). Empty or 0: no cap.
  std::function<double(int rank)> nodeBandwidthMbit;
  std::uint64_t seed = 1;      // loss and jitter draws; per-link streams (linkSeed)
  int mtu = 9000;              // of every gvtun: large frames mean fewer packets to forward
  std::size_t queueBytes = 0;  // bottleneck queue per link; 0: autoQueueBytes(link spec)
};

class Network {
 public:
  // Checks the prerequisites, removes namespaces left by dead processes (removeStaleNamespaces),
  // creates the namespaces and TUN devices, starts the emulator and returns once it forwards.
  // On error nothing it made is left behind.
  static Result<std::unique_ptr<Network>> create(const Options& options);

  // Deletes the namespaces (the kernel removes their devices) and stops the emulator. Processes
  // still running in a namespace keep it alive, without a network, until they exit.
  ~Network();
  Network(const Network&) = delete;
  Network& operator=(const Network&) = delete;

  int peers() const { return static_cast<int>(namespaces_.size()); }
  const std::string& namespaceName(int rank) const { return namespaces_.at(rank); }
  std::string address(int rank) const { return rankAddress(rank); }
  // Prepend to a command line to run it in rank's namespace: {"/usr/sbin/ip", "netns", "exec",
  // name} (the path of `ip` as found by ipBinary()). `ip netns exec` execs in place: the pid stays.
  std::vector<std::string> execPrefix(int rank) const;

  // Counters of link from -> to since create(); readable while and after the emulator runs.
  Result<LinkStats> stats(int from, int to) const;
  // Takes the link between a and b down (both directions: every packet either sends to the other
  // is dropped, those already on their way too, counted in LinkStats::droppedDown) or up again.
  // Takes effect for the next packet the emulator handles.
  Status setLinkDown(int a, int b, bool down);
  // Packets sent by rank `from` that were not IPv4 or were addressed to no rank (dropped).
  Result<std::uint64_t> unknownDestination(int from) const;

  // Ok while the emulator runs; unavailable (with its exit status) once it has died.
  Status emulatorStatus();
  pid_t emulatorPid() const { return emulator_.pid(); }

 private:
  Network() = default;
  void stopEmulator();
  void deleteNamespaces();

  std::vector<std::string> namespaces_;
  std::size_t namespacesMade_ = 0;  // how many of namespaces_ exist (deleted by the destructor)
  std::vector<int> tunFds_;         // held until the emulator has its copies
  std::unique_ptr<StatsTable> stats_;
  Subprocess emulator_;  // forked by create(); stopped and reaped by the destructor
  int controlFd_ = -1;   // write end; closing it stops the emulator
};

// Ok when this process may build a Network: root (or CAP_NET_ADMIN + CAP_SYS_ADMIN), a usable
// /dev/net/tun and an `ip` binary. The error names what is missing and how to get it.
Status checkPrerequisites();

// Deletes every `gv<pid>-<rank>` namespace whose pid is no live process (a crashed or SIGKILLed
// creator's leftovers). Returns how many were deleted.
Result<int> removeStaleNamespaces();

// Names of the existing namespaces starting with `prefix` (from /var/run/netns).
std::vector<std::string> listNamespaces(const std::string& prefix);

// A socket created inside namespace `ns` (it stays there for its whole life); the calling thread
// is back in its own namespace on return. The caller owns the fd.
Result<int> socketInNamespace(const std::string& ns, int domain, int type, int protocol = 0);

}  // namespace grapevine::netemu
