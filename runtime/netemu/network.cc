#include "runtime/netemu/network.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <thread>

#include "runtime/common/subprocess.h"
#include "runtime/netemu/ip_tool.h"

namespace grapevine::netemu {
namespace {

constexpr const char* kNetnsDir = "/var/run/netns";
constexpr int kMinMtu = 576;
constexpr int kMaxMtu = 65535;
constexpr int kEmulatorNice = -10;

std::string errnoText() { return std::strerror(errno); }

bool fileExists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

// Effective capability bit `cap` from /proc/self/status.
bool hasCapability(int cap) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("CapEff:", 0) == 0) {
      const unsigned long long mask = std::stoull(line.substr(7), nullptr, 16);
      return (mask >> cap) & 1ull;
    }
  }
  return false;
}

// A live process (a zombie is dead: it only waits to be reaped).
bool processAlive(long pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  if (!std::getline(in, text)) return false;
  const auto close = text.rfind(')');
  if (close == std::string::npos || close + 2 >= text.size()) return false;
  const char state = text[close + 2];
  return state != 'Z' && state != 'X';
}

// "gv<pid>-<rank>" -> pid, or -1 when the name has another shape.
long pidOfName(const std::string& name) {
  if (name.size() < 5 || name.compare(0, 2, "gv") != 0) return -1;
  const auto dash = name.find('-', 2);
  if (dash == std::string::npos || dash == 2 || dash + 1 == name.size()) return -1;
  for (std::size_t i = 2; i < name.size(); ++i) {
    if (i != dash && !std::isdigit(static_cast<unsigned char>(name[i]))) return -1;
  }
  return std::stol(name.substr(2, dash - 2));
}

Status deleteNamespaceList(const std::vector<std::string>& names) {
  if (names.empty()) return Status::ok();
  std::string batch;
  for (const auto& n : names) batch += "netns del " + n + "\n";
  // -force: one namespace that vanished meanwhile must not stop the others from being deleted.
  return runIp({"-force", "-batch", "-"}, batch);
}

// Runs `fn` with the calling thread in namespace `ns`, then returns the thread to its own.
Status inNamespace(const std::string& ns, const std::function<Status()>& fn) {
  const int self = ::open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
  if (self < 0) return internalError("open /proc/thread-self/ns/net: " + errnoText());
  const std::string path = std::string(kNetnsDir) + "/" + ns;
  const int target = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (target < 0) {
    const std::string why = errnoText();
    ::close(self);
    return notFound("network namespace " + ns + ": " + why);
  }
  if (::setns(target, CLONE_NEWNET) != 0) {
    const std::string why = errnoText();
    ::close(self);
    ::close(target);
    return internalError("setns " + ns + ": " + why);
  }
  const Status s = fn();
  const bool back = ::setns(self, CLONE_NEWNET) == 0;
  ::close(self);
  ::close(target);
  if (!back) {
    // The thread would go on in the emulated namespace: never continue like that.
    std::cerr << "grapevine netemu: cannot return to the original network namespace\n";
    std::abort();
  }
  return s;
}

// Inside namespace `ns`: creates the TUN device gvtun (a TUN device is born in the namespace of
// the thread that opens /dev/net/tun, so nothing needs moving: a move costs ~16 ms per device),
// sets its MTU and address/16, turns IPv6 off on it (no link-local chatter through the emulator)
// and brings it and lo up. ioctls on a socket in the namespace rather than `ip -n ns ...`: an exec
// of `ip` costs ~50 ms here, a minute for 1000 ranks. Returns the device's non-blocking fd; the
// device is not persistent and vanishes when the last fd on it closes.
Result<int> createInterface(const std::string& ns, const std::string& address, int mtu) {
  int tun = -1;
  const Status made = inNamespace(ns, [&]() -> Status {
    tun = ::open("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC);
    if (tun < 0) return unavailable("netemu: open /dev/net/tun in " + ns + ": " + errnoText());
    ifreq ifr{};
    ifr.ifr_flags = IFF_TUN | IFF_NO_PI;
    std::strncpy(ifr.ifr_name, "gvtun", IFNAMSIZ - 1);
    if (::ioctl(tun, TUNSETIFF, &ifr) != 0)
      return unavailable("netemu: TUNSETIFF in " + ns + ": " + errnoText());
    const int sock = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (sock < 0) return internalError("socket in " + ns + ": " + errnoText());
    auto fail = [&](const std::string& what) {
      const Status st = unavailable("netemu: " + what + " in " + ns + ": " + errnoText());
      ::close(sock);
      return st;
    };
    ifr = {};
    std::strncpy(ifr.ifr_name, "gvtun", IFNAMSIZ - 1);
    ifr.ifr_mtu = mtu;
    if (::ioctl(sock, SIOCSIFMTU, &ifr) != 0) return fail("set mtu " + std::to_string(mtu));
    auto* sin = reinterpret_cast<sockaddr_in*>(&ifr.ifr_addr);
    ifr = {};
    std::strncpy(ifr.ifr_name, "gvtun", IFNAMSIZ - 1);
    sin->sin_family = AF_INET;
    ::inet_pton(AF_INET, address.c_str(), &sin->sin_addr);
    if (::ioctl(sock, SIOCSIFADDR, &ifr) != 0) return fail("set address " + address);
    ::inet_pton(AF_INET, "255.255.0.0", &sin->sin_addr);
    if (::ioctl(sock, SIOCSIFNETMASK, &ifr) != 0) return fail("set netmask /16");
    {
      // /proc/sys/net resolves to the calling thread's namespace. Absent without IPv6: fine.
      std::ofstream off("/proc/sys/net/ipv6/conf/gvtun/disable_ipv6");
      if (off) off << "1\n";
    }
    for (const char* name : {"gvtun", "lo"}) {
      ifr = {};
      std::strncpy(ifr.ifr_name, name, IFNAMSIZ - 1);
      if (::ioctl(sock, SIOCGIFFLAGS, &ifr) != 0) return fail(std::string("get flags of ") + name);
      ifr.ifr_flags = static_cast<short>(ifr.ifr_flags | IFF_UP);
      if (::ioctl(sock, SIOCSIFFLAGS, &ifr) != 0) return fail(std::string("bring up ") + name);
    }
    ::close(sock);
    return Status::ok();
  });
  if (!made.isOk()) {
    if (tun >= 0) ::close(tun);
    return made;
  }
  return tun;
}

}  // namespace

Status checkPrerequisites() {
  constexpr int kCapNetAdmin = 12, kCapSysAdmin = 21;
  if (::geteuid() != 0 && !(hasCapability(kCapNetAdmin) && hasCapability(kCapSysAdmin))) {
    return failedPrecondition(
        "network emulation needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN) to create network "
        "namespaces and TUN devices; run as root");
  }
  const int fd = ::open("/dev/net/tun", O_RDWR | O_CLOEXEC);
  if (fd < 0) {
    return failedPrecondition("cannot open /dev/net/tun: " + errnoText() +
                              " (load the tun module; in a container pass --device /dev/net/tun)");
  }
  ::close(fd);
  if (ipBinary().empty()) {
    return failedPrecondition("no `ip` binary found; install iproute2: tools/install-deps");
  }
  return Status::ok();
}

std::vector<std::string> listNamespaces(const std::string& prefix) {
  std::vector<std::string> out;
  DIR* d = ::opendir(kNetnsDir);
  if (!d) return out;
  while (dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name != "." && name != ".." && name.rfind(prefix, 0) == 0) out.push_back(name);
  }
  ::closedir(d);
  return out;
}

Result<int> removeStaleNamespaces() {
  std::vector<std::string> stale;
  for (const auto& name : listNamespaces("gv")) {
    const long pid = pidOfName(name);
    if (pid > 0 && !processAlive(pid)) stale.push_back(name);
  }
  GV_RETURN_IF_ERROR(deleteNamespaceList(stale));
  return static_cast<int>(stale.size());
}

Result<int> socketInNamespace(const std::string& ns, int domain, int type, int protocol) {
  int fd = -1;
  GV_RETURN_IF_ERROR(inNamespace(ns, [&]() -> Status {
    fd = ::socket(domain, type | SOCK_CLOEXEC, protocol);
    if (fd < 0) return internalError("socket in " + ns + ": " + errnoText());
    return Status::ok();
  }));
  return fd;
}

Result<std::unique_ptr<Network>> Network::create(const Options& options) {
  GV_RETURN_IF_ERROR(checkPrerequisites());
  if (options.peers < 1 || options.peers > kMaxRanks) {
    return invalidArgument("netemu: peers must be in [1, " + std::to_string(kMaxRanks) + "], got " +
                           std::to_string(options.peers));
  }
  if (options.mtu < kMinMtu || options.mtu > kMaxMtu) {
    return invalidArgument("netemu: mtu must be in [" + std::to_string(kMinMtu) + ", " +
                           std::to_string(kMaxMtu) + "], got " + std::to_string(options.mtu));
  }
  GV_RETURN_IF_ERROR(removeStaleNamespaces().status());

  std::unique_ptr<Network> net(new Network());  // its destructor undoes whatever follows
  const std::string prefix = "gv" + std::to_string(::getpid()) + "-";
  for (int r = 0; r < options.peers; ++r) {
    net->namespaces_.push_back(prefix + std::to_string(r));
    if (fileExists(std::string(kNetnsDir) + "/" + net->namespaces_.back())) {
      return Status(ErrorCode::kAlreadyExists, "netemu: namespace " + net->namespaces_.back() +
                                                   " exists: one Network per process at a time");
    }
  }

  {
    std::string batch;
    for (int r = 0; r < options.peers; ++r) batch += "netns add " + net->namespaces_[r] + "\n";
    const Status s = runIp({"-batch", "-"}, batch);
    // Some may exist even when a later line failed: the destructor deletes all it can.
    net->namespacesMade_ = net->namespaces_.size();
    GV_RETURN_IF_ERROR(s);
  }
  for (int r = 0; r < options.peers; ++r) {
    GV_ASSIGN_OR_RETURN(const int fd,
                        createInterface(net->namespaces_[r], rankAddress(r), options.mtu));
    net->tunFds_.push_back(fd);
  }

  GV_ASSIGN_OR_RETURN(net->stats_, StatsTable::map(options.peers));
  int control[2], ready[2];
  if (::pipe2(control, O_CLOEXEC) != 0) return internalError("netemu: pipe: " + errnoText());
  net->controlFd_ = control[1];
  if (::pipe2(ready, O_CLOEXEC) != 0) {
    ::close(control[0]);
    return internalError("netemu: pipe: " + errnoText());
  }

  EmulatorSetup setup;
  setup.peers = options.peers;
  setup.tunFds = net->tunFds_;
  setup.link = options.link ? options.link : [](int, int) { return LinkSpec{}; };
  setup.nodeBandwidthMbit = options.nodeBandwidthMbit;
  setup.seed = options.seed;
  setup.mtu = options.mtu;
  setup.queueBytes = options.queueBytes;
  setup.stats = net->stats_.get();
  setup.controlFd = control[0];

  const pid_t parent = ::getpid();
  std::cout.flush();
  std::cerr.flush();
  // The emulator: this program's code in a child of its own (it needs the TUN fds and the stats
  // mapping). It dies with its creator, and stays out of the terminal's process group so a Ctrl-C
  // reaches the creator only, which then tears down in order.
  SpawnOptions emulatorOptions;
  emulatorOptions.newProcessGroup = true;
  emulatorOptions.beforeExec = [parent] {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) _exit(0);
    // A real network does not wait for CPU: ahead of busy peers, deliveries stay on time. Best
    // effort (needs CAP_SYS_NICE, which root has).
    ::setpriority(PRIO_PROCESS, 0, kEmulatorNice);
  };
  auto emulator = Subprocess::forkCall(
      [&] {
        ::close(control[1]);
        ::close(ready[0]);
        const Status s = runEmulator(setup, ready[1]);
        if (!s.isOk()) {
          const std::string msg = "E" + s.toString();
          [[maybe_unused]] ssize_t w = ::write(ready[1], msg.data(), msg.size());
          std::cerr << "grapevine netemu emulator: " << s.toString() << "\n";
          return 1;
        }
        return 0;
      },
      emulatorOptions);
  ::close(control[0]);
  ::close(ready[1]);
  if (!emulator.isOk()) {
    ::close(ready[0]);
    return internalError("netemu: " + emulator.status().message());
  }
  net->emulator_ = std::move(*emulator);
  // The emulator holds the TUN fds now; ours go, so the devices live exactly as long as it does.
  for (int fd : net->tunFds_) ::close(fd);
  net->tunFds_.clear();

  pollfd pfd{ready[0], POLLIN, 0};
  int polled;
  while ((polled = ::poll(&pfd, 1, 10000)) < 0 && errno == EINTR) {
  }
  char buf[512];
  const ssize_t n = polled > 0 ? ::read(ready[0], buf, sizeof buf) : -1;
  ::close(ready[0]);
  if (n == 1 && buf[0] == 'R') return net;
  if (n > 1 && buf[0] == 'E')
    return internalError(std::string(buf + 1, static_cast<std::size_t>(n - 1)));
  return internalError(polled == 0 ? "netemu: the emulator did not start within 10 s"
                                   : "netemu: the emulator exited during start-up");
}

Network::~Network() {
  // Namespaces first (only their names go: each lives until the emulator's TUN fds on it close),
  // so `ip netns list` is clean at once whatever happens to the emulator.
  deleteNamespaces();
  stopEmulator();
  for (int fd : tunFds_) ::close(fd);
}

void Network::stopEmulator() {
  if (controlFd_ >= 0) {
    ::close(controlFd_);  // the emulator sees the hang-up and returns
    controlFd_ = -1;
  }
  if (!emulator_.running()) return;
  // It closes its TUN fds before exiting, ~2 ms per rank; give it that before a SIGKILL (after
  // which the kernel closes them, one by one).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2) +
                        std::chrono::milliseconds(5) * static_cast<int>(namespaces_.size());
  if (!emulator_.waitUntil(deadline).isOk()) emulator_.kill();
}

void Network::deleteNamespaces() {
  std::vector<std::string> made(namespaces_.begin(),
                                namespaces_.begin() + static_cast<std::ptrdiff_t>(namespacesMade_));
  const Status s = deleteNamespaceList(made);
  if (!s.isOk()) std::cerr << "grapevine netemu: deleting namespaces: " << s.toString() << "\n";
  namespacesMade_ = 0;
}

std::vector<std::string> Network::execPrefix(int rank) const {
  return {ipBinary(), "netns", "exec", namespaceName(rank)};
}

Status Network::setLinkDown(int a, int b, bool down) {
  if (a < 0 || b < 0 || a >= peers() || b >= peers() || a == b || !stats_)
    return invalidArgument("no link between " + std::to_string(a) + " and " + std::to_string(b));
  stats_->setDown(a, b, down);
  stats_->setDown(b, a, down);
  return Status::ok();
}

Result<LinkStats> Network::stats(int from, int to) const {
  if (from < 0 || to < 0 || from >= peers() || to >= peers()) {
    return outOfRange("netemu: no link " + std::to_string(from) + " -> " + std::to_string(to));
  }
  return stats_->read(from, to);
}

Result<std::uint64_t> Network::unknownDestination(int from) const {
  if (from < 0 || from >= peers()) return outOfRange("netemu: no rank " + std::to_string(from));
  return stats_->unknownDestination(from);
}

Status Network::emulatorStatus() {
  if (!emulator_.running()) return unavailable("netemu: the emulator is not running");
  const std::optional<int> exited = emulator_.poll();
  if (!exited) return Status::ok();
  const int status = *exited;
  if (status < 0) return unavailable("netemu: the emulator is gone (reaped elsewhere)");
  if (WIFSIGNALED(status)) {
    return unavailable(std::string("netemu: the emulator was killed by signal ") +
                       strsignal(WTERMSIG(status)));
  }
  return unavailable("netemu: the emulator exited with status " +
                     std::to_string(WEXITSTATUS(status)));
}

}  // namespace grapevine::netemu
