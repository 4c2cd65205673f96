// The goodbye protocol of the tagged backends: every connection pre-posts a receive on kControlTag
// (tag_layout.h) for its peer; close() sends a goodbye on that tag, so the peer fails its pending
// operations with kUnavailable at once instead of waiting for a send to fail.
//
// Receives match by (sender rank, tag), not by endpoint: a goodbye that an old endpoint of the
// same peer sent late (queued during a network cut, or sent while no receive was posted) would end
// the newer connection. So each connection first announces its id (ControlKind::kAnnounce) on the
// same tag, and its goodbye carries that id; the receiver honours only a goodbye of the newest id
// announced to it (GoodbyeFilter). An endpoint's messages arrive in order, so its announcement
// always comes before its own goodbye.
//
// Constants and pure functions: any thread. GoodbyeFilter: one connection's thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

namespace grapevine::transport::tagged {

// A control message (kControlTag): 8 bytes of kind, then the sender connection's id (LE u64).
inline constexpr std::size_t kControlBytes = 16;
enum class ControlKind { kAnnounce, kGoodbye };
struct ControlMessage {
  ControlKind kind = ControlKind::kGoodbye;
  std::uint64_t id = 0;
};
void encodeControl(const ControlMessage& m, std::span<std::uint8_t, kControlBytes> out);
// nullopt for anything else (a frame of a build that speaks another control protocol).
std::optional<ControlMessage> decodeControl(std::span<const std::uint8_t> in);

// The id of a new connection of this process: larger than every earlier one of this process, and
// (from the clock) than those of an earlier process of the same peer.
std::uint64_t newConnectionId();

// The receiving end's view of one connection: which goodbyes end it.
class GoodbyeFilter {
 public:
  // A control message from `peer` came: true when it is a goodbye that ends the connection. An
  // announcement is noted. A goodbye of an id older than the newest announced, or one before any
  // announcement (of an endpoint that announced before this connection existed), is stale and
  // ignored (logged), as is anything undecodable.
  bool take(int peer, std::span<const std::uint8_t> message);

 private:
  std::optional<std::uint64_t> newest_;
};

// The version of this protocol: a handshake part ("protocol.tagged_control"), so that peers of a
// build with the 8-byte goodbye of version 1 are refused by name.
inline constexpr std::uint64_t kControlProtocolVersion = 2;
// How long close() waits for its goodbye to leave before it tears the link down anyway.
inline constexpr auto kGoodbyeGrace = std::chrono::milliseconds(500);

}  // namespace grapevine::transport::tagged
