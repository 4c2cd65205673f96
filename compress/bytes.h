// Internal: the decode-error helper and layout helpers shared by compress/ sources.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "runtime/common/byte_order.h"
#include "runtime/common/status.h"

namespace grapevine::compress::detail {

// Integers and floats go on the wire through runtime/common/byte_order.h (loadLe / storeLe). Whole
// float arrays are still copied as they lie in memory, so the codec needs a little-endian host.
static_assert(std::endian::native == std::endian::little,
              "the wire format is little-endian and float payloads are copied as they lie");

inline size_t alignUp4(size_t n) { return (n + 3) & ~size_t{3}; }

// "reason: detail" with a stable reason (see compress/wire.h errorReason()).
inline Status corrupt(std::string_view reason, const std::string& detail) {
  return dataLoss(std::string(reason) + ": " + detail);
}

}  // namespace grapevine::compress::detail
