#include "runtime/transport/tagged/checks.h"

#include <cstdint>
#include <string>

#include "runtime/transport/tagged/tag_layout.h"

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

}  // namespace grapevine::transport::tagged
