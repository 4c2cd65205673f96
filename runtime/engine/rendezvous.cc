#include "runtime/engine/rendezvous.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <thread>

#include "runtime/common/atomic_file.h"
#include "runtime/common/bounded_file.h"
#include "runtime/common/log.h"

namespace grapevine::engine {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

std::string ipv4Text(const sockaddr* a) {
  char text[INET_ADDRSTRLEN] = {};
  inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(a)->sin_addr, text, sizeof text);
  return text;
}

bool isLoopback(const std::string& ip) { return ip.rfind("127.", 0) == 0; }

// The first up IPv4 interface that is not loopback ("" when none).
std::string firstInterfaceAddress() {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return "";
  std::string out;
  for (ifaddrs* i = list; i && out.empty(); i = i->ifa_next) {
    if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET || !(i->ifa_flags & IFF_UP) ||
        (i->ifa_flags & IFF_LOOPBACK)) {
      continue;
    }
    out = ipv4Text(i->ifa_addr);
  }
  freeifaddrs(list);
  return out;
}

std::string rankFile(const std::string& dir, int rank) {
  return dir + "/rank-" + std::to_string(rank);
}

// Whether `address` is host:port as peers publish it: a host of name or address characters (an
// IPv6 address in brackets included) and a decimal port 1-65535, nothing after it.
bool wellFormedAddress(std::string_view address) {
  const auto colon = address.rfind(':');
  if (colon == std::string_view::npos || colon == 0 || colon + 1 == address.size()) return false;
  const std::string_view host = address.substr(0, colon), port = address.substr(colon + 1);
  if (port.size() > 5 || port.find_first_not_of("0123456789") != std::string_view::npos) {
    return false;
  }
  const long value = std::strtol(std::string(port).c_str(), nullptr, 10);
  if (value < 1 || value > 65535) return false;
  return host.find_first_not_of(
             "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
             "0123456789.-_:[]%") == std::string_view::npos;
}

// The published address of `rank`: "" while its file does not exist yet. The file is read only
// when it is a regular one of at most 4 KiB (a rank file linked to /dev/zero was read without
// limit, a FIFO there hung the peer), and what it holds is quoted printable in an error.
Result<std::string> readAddress(const std::string& dir, int rank) {
  const std::string path = rankFile(dir, rank);
  constexpr std::uint64_t kMaxRankFileBytes = 4096;
  auto text = readRegularTextFile(path, kMaxRankFileBytes);
  if (!text.isOk()) {
    if (text.status().code() == ErrorCode::kNotFound) return std::string();
    return invalidArgument("peers.rendezvous: " + text.status().message() +
                           " (is the folder shared with another run?)");
  }
  return parseRankFile(*text, path);
}

// Binds "ip:port" once and releases it. Errors: kUnavailable naming the address.
Status checkBindable(const std::string& address) {
  const auto colon = address.rfind(':');
  sockaddr_in a{};
  a.sin_family = AF_INET;
  const std::string host = address.substr(0, colon);
  if (inet_pton(AF_INET, host == "localhost" ? "127.0.0.1" : host.c_str(), &a.sin_addr) != 1) {
    return Status::ok();  // IPv6 (or a mistake): the bootstrap's own bind reports it
  }
  a.sin_port = htons(static_cast<std::uint16_t>(std::stoi(address.substr(colon + 1))));
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return unavailable("peers.rendezvous: socket: " + std::string(std::strerror(errno)));
  const int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  const bool ok = bind(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a) == 0;
  const int err = errno;
  close(fd);
  if (!ok) {
    return unavailable("peers.rendezvous: cannot listen on " + address + ": " + std::strerror(err) +
                       " (peers.base_port + rank is taken on this machine)");
  }
  return Status::ok();
}

}  // namespace

Result<std::string> parseRankFile(std::string_view text, const std::string& path) {
  const std::string_view line = text.substr(0, text.find('\n'));
  if (!wellFormedAddress(line)) {
    return invalidArgument("peers.rendezvous: " + path + " holds '" + printable(line) +
                           "', not host:port (is the folder shared with another run?)");
  }
  return std::string(line);
}

Result<std::string> resolveHost(const std::string& host) {
  if (host != "auto") return host;
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) != 0) {
    return unavailable("peers.host auto: gethostname failed");
  }
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (const int rc = getaddrinfo(name, nullptr, &hints, &found); rc != 0) {
    // A name missing from DNS and /etc/hosts (some containers): an interface still has an address.
    log::warn("peers.host auto: cannot resolve this machine's name '", name,
              "': ", gai_strerror(rc), "; using an interface's address");
    found = nullptr;
  }
  std::string first, routable;
  for (addrinfo* a = found; a; a = a->ai_next) {
    const std::string ip = ipv4Text(a->ai_addr);
    if (first.empty()) first = ip;
    if (routable.empty() && !isLoopback(ip)) routable = ip;
  }
  if (found) freeaddrinfo(found);
  if (!routable.empty()) return routable;
  // The name maps to loopback (Debian's /etc/hosts does so by default): an interface's address
  // reaches other machines; with none, this is a single machine and loopback is right.
  if (const std::string i = firstInterfaceAddress(); !i.empty()) return i;
  return first.empty() ? std::string("127.0.0.1") : first;
}

Result<std::vector<std::string>> rendezvous(const RendezvousOptions& o) {
  std::error_code ec;
  fs::create_directories(o.dir, ec);  // several peers may race here: check the result instead
  if (!fs::is_directory(o.dir)) {
    return unavailable("peers.rendezvous: cannot create " + o.dir +
                       (ec ? ": " + ec.message() : std::string()));
  }
  // A port someone else holds would send the neighbours to that process: refuse it before
  // publishing (the bootstrap binds it for good moments later, with the same SO_REUSEADDR).
  GV_RETURN_IF_ERROR(checkBindable(o.address));
  // Written atomically (temp file + rename): a reader never sees a partial address.
  const std::string path = rankFile(o.dir, o.rank);
  if (Status st = writeFileAtomically(path, o.address + "\n"); !st.isOk()) {
    return unavailable("peers.rendezvous: " + st.message());
  }

  std::vector<std::string> peers(static_cast<std::size_t>(o.count));
  peers[o.rank] = o.address;
  std::vector<int> missing = o.wait;
  log::info("published ", o.address, " to ", path, "; waiting for ", missing.size(),
            " neighbours' addresses");
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(o.timeoutSeconds));
  while (true) {
    for (auto it = missing.begin(); it != missing.end();) {
      GV_ASSIGN_OR_RETURN(std::string address, readAddress(o.dir, *it));
      if (address.empty()) {
        ++it;
        continue;
      }
      peers[*it] = std::move(address);
      it = missing.erase(it);
    }
    if (missing.empty()) return peers;
    if (o.stop && o.stop->load()) return cancelled("peers.rendezvous: stopped while waiting");
    if (Clock::now() >= deadline) {
      char seconds[32];
      std::snprintf(seconds, sizeof seconds, "%g", o.timeoutSeconds);
      std::string ranks;
      for (int r : missing) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
      return deadlineExceeded("peers.rendezvous: no address from neighbour(s) " + ranks + " in " +
                              o.dir + " within " + seconds +
                              " s (did they start? is the folder shared between the machines?)");
    }
    // A file system has no portable change notification (NFS least of all): poll, briefly.
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace grapevine::engine
