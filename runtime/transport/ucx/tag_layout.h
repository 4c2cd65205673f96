// How a Grapevine (rank, tag) pair maps onto one 64-bit UCX tag: the layout shared by the tagged
// backends (runtime/transport/tagged_backend_common.h: sender rank in the high 24 bits, user tag in
// the low 40, tag 2^40 - 1 reserved as kControlTag), plus what only UCX needs.
//
// The receiver of a connection to peer p matches (p << 40 | tag) with a full mask, so receives
// posted for different peers never steal each other's messages even though UCX matches tags per
// worker, not per endpoint. The rank bits are also announced to UCX as the "tag sender mask".
#pragma once

#include <cstdint>

#include "runtime/transport/tagged_backend_common.h"

namespace grapevine::transport::ucx {

using tagged::kControlTag;
using tagged::kFullMask;
using tagged::kMaxRank;
using tagged::kMaxUserTag;
using tagged::kRankBits;
using tagged::kUserTagBits;
using tagged::senderOf;
using tagged::userTagOf;
using tagged::wireTag;

inline constexpr std::uint64_t kSenderMask = ~kMaxUserTag;

}  // namespace grapevine::transport::ucx
