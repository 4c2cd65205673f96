// 64-bit FNV-1a: small, deterministic, platform independent. For replica checks and config-part
// hashes, not for security.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace grapevine {

inline constexpr std::uint64_t kFnv1aOffsetBasis = 14695981039346656037ull;
inline constexpr std::uint64_t kFnv1aPrime = 1099511628211ull;

inline std::uint64_t fnv1a64(const void* data, std::size_t size,
                             std::uint64_t h = kFnv1aOffsetBasis) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < size; ++i) {
    h ^= p[i];
    h *= kFnv1aPrime;
  }
  return h;
}

inline std::uint64_t fnv1a64(std::string_view s) { return fnv1a64(s.data(), s.size()); }

}  // namespace grapevine
