// How a Grapevine (sender rank, user tag) pair maps onto one 64-bit tag of a tagged-message
// library (UCX, libfabric):
//
//   bit 63 ............ 40 | 39 ........................ 0
//        sender rank (24)  |        user tag (40)
//
// The receiver of a connection to peer p matches (p << 40 | tag) with a full mask, so receives
// posted for different peers never steal each other's messages even though matching is per
// worker/endpoint, not per peer. Tag 2^40 - 1 is reserved (kControlTag); larger user tags are
// refused with kInvalidArgument (checks.h); ranks at or above 2^24 are refused when the context is
// created.
//
// Pure constants and functions: any thread.
#pragma once

#include <cstdint>
#include <span>

#include "runtime/common/byte_order.h"
#include "runtime/transport/transport.h"

namespace grapevine::transport::tagged {

inline constexpr int kUserTagBits = 40;
inline constexpr int kRankBits = 64 - kUserTagBits;
inline constexpr std::uint64_t kMaxUserTag = (std::uint64_t{1} << kUserTagBits) - 1;
inline constexpr std::uint64_t kMaxRank = (std::uint64_t{1} << kRankBits) - 1;
inline constexpr std::uint64_t kFullMask = ~std::uint64_t{0};
// The rank bits. UCX is told them as its "tag sender mask".
inline constexpr std::uint64_t kSenderMask = ~kMaxUserTag;
// The highest user tag is the backend's own: a connection's "goodbye" message (goodbye.h), which
// close() sends so the peer fails its pending operations with kUnavailable at once. User tags are
// [0, kControlTag).
inline constexpr std::uint64_t kControlTag = kMaxUserTag;

constexpr std::uint64_t wireTag(std::uint64_t senderRank, std::uint64_t userTag) {
  return (senderRank << kUserTagBits) | (userTag & kMaxUserTag);
}
constexpr std::uint64_t senderOf(std::uint64_t wire) { return wire >> kUserTagBits; }

// A connection bound to its edge's handshake (Context::connectBound) sends each user tag XORed
// with a 40-bit mask taken from its own rank's binding token, and receives a peer's with the
// peer's: a stranger claiming the rank (without the key, so without the token) sends tags no
// receive of the connection matches (they wait in the early queue, bounded, and are dropped), and
// its goodbye cannot end the connection. Unbound (no key): mask 0, the tags as they are. The XOR
// keeps user tags within 40 bits and one to one, so kControlTag and every user tag stay distinct.
inline std::uint64_t tagMask(std::span<const std::uint8_t, 32> token) {
  return loadLe<std::uint64_t>(token.data()) & kMaxUserTag;
}
// The masks of a connection of `rank` to `peer` bound with `binding`: what it sends with (its own
// rank's token) and what it receives with (the peer's).
struct TagMasks {
  std::uint64_t send = 0, recv = 0;
};
inline TagMasks tagMasks(const DataBinding& binding, int rank, int peer) {
  const bool lower = rank < peer;
  return {tagMask(lower ? binding.lower : binding.higher),
          tagMask(lower ? binding.higher : binding.lower)};
}
constexpr std::uint64_t userTagOf(std::uint64_t wire) { return wire & kMaxUserTag; }

static_assert(senderOf(wireTag(5, 77)) == 5 && userTagOf(wireTag(5, 77)) == 77);

}  // namespace grapevine::transport::tagged
