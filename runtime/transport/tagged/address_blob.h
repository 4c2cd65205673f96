// The address blob of the tagged backends: what Context::localAddress() returns and connect()
// parses. Host byte order (peers that exchange it share a host or an architecture):
//
//   u32 magic | u32 version | u32 rank | u32 pid | u64 host key | backend address (non-empty)
//
// The pid and host key let a same-host peer watch this process's liveness (pidfd_watch.h).
// Pure functions (they read /proc and getpid()): any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "runtime/common/status.h"

namespace grapevine::transport::tagged {

struct AddressHeader {
  std::uint32_t magic;
  std::uint32_t version;
  std::uint32_t rank;
  std::uint32_t pid;
  std::uint64_t hostKey;
};
inline constexpr std::size_t kAddressHeaderBytes = sizeof(AddressHeader);
static_assert(kAddressHeaderBytes == 24);

// What tells one backend's blobs from another's.
struct AddressFormat {
  std::uint32_t magic;
  std::uint32_t version;
  std::string_view backend;  // message prefix, e.g. "ucx"
  std::string_view kind;     // in "not a grapevine <kind> address", e.g. "UCX"
};

// Identifies "same kernel and same pid namespace", where a pid names the same process for both
// peers: FNV-1a over the boot id and the pid namespace link. 0 when either is unreadable.
std::uint64_t hostKey();

// This process's blob: header (rank, getpid(), hostKey()) followed by `backendAddress`.
std::vector<std::uint8_t> encodeAddress(const AddressFormat& format, int rank,
                                        std::span<const std::uint8_t> backendAddress);

struct PeerAddress {
  AddressHeader header;
  std::vector<std::uint8_t> backendAddress;  // an aligned copy of what follows the header
  // The peer runs under this host key (same kernel and pid namespace): header.pid names its
  // process.
  bool sameHost() const;
};

// Validates `remote` as `peer`'s blob. kInvalidArgument when it is too short (no backend address),
// has the wrong magic or version, or belongs to another rank.
Result<PeerAddress> parseAddress(const AddressFormat& format, int peer,
                                 std::span<const std::uint8_t> remote);

}  // namespace grapevine::transport::tagged
