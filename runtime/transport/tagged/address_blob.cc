#include "runtime/transport/tagged/address_blob.h"

#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>

namespace grapevine::transport::tagged {

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

}  // namespace grapevine::transport::tagged
