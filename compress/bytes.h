// Internal: little-endian byte access and the decode-error helper shared by compress/ sources.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "runtime/common/status.h"

namespace grapevine::compress::detail {

static_assert(std::endian::native == std::endian::little,
              "the wire format is little-endian and is written with memcpy");

template <typename T>
inline T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}
template <typename T>
inline void store(uint8_t* p, T v) {
  std::memcpy(p, &v, sizeof(T));
}

inline size_t alignUp4(size_t n) { return (n + 3) & ~size_t{3}; }

// "reason: detail" with a stable reason (see compress/wire.h errorReason()).
inline Status corrupt(std::string_view reason, const std::string& detail) {
  return dataLoss(std::string(reason) + ": " + detail);
}

}  // namespace grapevine::compress::detail
