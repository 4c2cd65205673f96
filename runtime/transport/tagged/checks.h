// The argument checks that the tagged backends' Context and Connection share. Messages start with
// the backend's name, e.g. "ucx". Pure functions: any thread.
#pragma once

#include <cstddef>
#include <string_view>

#include "runtime/common/status.h"
#include "runtime/transport/transport.h"

namespace grapevine::transport::tagged {

// kInvalidArgument "<backend>: <what> <rank> outside [0, 2^24)" unless 0 <= rank <= kMaxRank.
Status checkRank(std::string_view backend, std::string_view what, int rank);
// kInvalidArgument "<backend>: tag above 2^40 - 2" for tag >= kControlTag.
Status checkUserTag(std::string_view backend, Tag tag);
// kResourceExhausted "message of N bytes above maxMessageBytes M" for bytes > maxBytes.
Status checkMessageSize(std::size_t bytes, std::size_t maxBytes);
// What a receive reports for a message from `peer` larger than its buffer: kResourceExhausted
// "message from peer P is larger than the posted receive buffer".
Status truncatedMessage(int peer);

}  // namespace grapevine::transport::tagged
