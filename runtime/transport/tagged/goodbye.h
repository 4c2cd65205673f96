// The goodbye protocol of the tagged backends: every connection pre-posts a receive on kControlTag
// (tag_layout.h) for its peer; close() sends kGoodbyeMessage on that tag, so the peer fails its
// pending operations with kUnavailable at once instead of waiting for a send to fail.
//
// Constants only: any thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>

namespace grapevine::transport::tagged {

// The payload of the goodbye (kControlTag) message; the control receive buffer is this size.
inline constexpr std::uint8_t kGoodbyeMessage[8] = {'g', 'o', 'o', 'd', 'b', 'y', 'e', 0};
inline constexpr std::size_t kControlBytes = sizeof kGoodbyeMessage;
// How long close() waits for its goodbye to leave before it tears the link down anyway.
inline constexpr auto kGoodbyeGrace = std::chrono::milliseconds(500);

}  // namespace grapevine::transport::tagged
