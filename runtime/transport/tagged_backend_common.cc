#include "runtime/transport/tagged_backend_common.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

namespace grapevine::transport::tagged {

Status checkRank(std::string_view backend, std::string_view what, int rank) {
  if (rank < 0 || static_cast<std::uint64_t>(rank) > kMaxRank) {
    return invalidArgument(std::string(backend) + ": " + std::string(what) + " " +
                           std::to_string(rank) + " outside [0, 2^24)");
  }
  return Status::ok();
}

Status checkUserTag(std::string_view backend, Tag tag) {
  if (tag >= kControlTag) return invalidArgument(std::string(backend) + ": tag above 2^40 - 2");
  return Status::ok();
}

Status checkMessageSize(std::size_t bytes, std::size_t maxBytes) {
  if (bytes > maxBytes) {
    return resourceExhausted("message of " + std::to_string(bytes) +
                             " bytes above maxMessageBytes " + std::to_string(maxBytes));
  }
  return Status::ok();
}

Status truncatedMessage(int peer) {
  return resourceExhausted("message from peer " + std::to_string(peer) +
                           " is larger than the posted receive buffer");
}

std::uint64_t hostKey() {
  std::string id;
  if (FILE* f = std::fopen("/proc/sys/kernel/random/boot_id", "r")) {
    char buf[64] = {};
    if (std::fgets(buf, sizeof buf, f) != nullptr) id = buf;
    std::fclose(f);
  }
  char ns[64] = {};
  const ssize_t n = ::readlink("/proc/self/ns/pid", ns, sizeof ns - 1);
  if (id.empty() || n <= 0) return 0;
  id.append(ns, static_cast<std::size_t>(n));
  std::uint64_t h = 1469598103934665603ull;
  for (unsigned char c : id) h = (h ^ c) * 1099511628211ull;
  return h == 0 ? 1 : h;
}

std::vector<std::uint8_t> encodeAddress(const AddressFormat& format, int rank,
                                        std::span<const std::uint8_t> backendAddress) {
  const AddressHeader header{format.magic, format.version, static_cast<std::uint32_t>(rank),
                             static_cast<std::uint32_t>(::getpid()), hostKey()};
  std::vector<std::uint8_t> out(kAddressHeaderBytes + backendAddress.size());
  std::memcpy(out.data(), &header, kAddressHeaderBytes);
  if (!backendAddress.empty()) {
    std::memcpy(out.data() + kAddressHeaderBytes, backendAddress.data(), backendAddress.size());
  }
  return out;
}

bool PeerAddress::sameHost() const { return header.hostKey != 0 && header.hostKey == hostKey(); }

Result<PeerAddress> parseAddress(const AddressFormat& format, int peer,
                                 std::span<const std::uint8_t> remote) {
  const std::string backend(format.backend);
  PeerAddress out;
  if (remote.size() <= kAddressHeaderBytes)
    return invalidArgument(backend + ": address blob too short");
  std::memcpy(&out.header, remote.data(), kAddressHeaderBytes);
  if (out.header.magic != format.magic || out.header.version != format.version) {
    return invalidArgument(backend + ": not a grapevine " + std::string(format.kind) +
                           " address (bad magic or version)");
  }
  if (out.header.rank != static_cast<std::uint32_t>(peer)) {
    return invalidArgument(backend + ": address belongs to rank " +
                           std::to_string(out.header.rank) + ", not " + std::to_string(peer));
  }
  out.backendAddress.assign(remote.begin() + kAddressHeaderBytes, remote.end());
  return out;
}

Status PeerProcessWatch::start(Loop& loop, std::string_view backend, int peer, pid_t pid,
                               std::function<void(Status)> onExit) {
  stop();
  const int fd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (fd < 0) {
    return unavailable(std::string(backend) + ": cannot watch peer " + std::to_string(peer) +
                       " (pid " + std::to_string(pid) + "): " + std::strerror(errno));
  }
  loop_ = &loop;
  pidfd_ = fd;
  std::string exited = "peer " + std::to_string(peer) + " (pid " + std::to_string(pid) + ") exited";
  loop.watchFd(pidfd_, [onExit = std::move(onExit), exited = std::move(exited)] {
    onExit(unavailable(exited));
  });
  return Status::ok();
}

void PeerProcessWatch::stop() {
  if (pidfd_ < 0) return;
  loop_->unwatchFd(pidfd_);
  ::close(pidfd_);
  pidfd_ = -1;
}

}  // namespace grapevine::transport::tagged
