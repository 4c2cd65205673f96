// Little-endian integer access for everything Grapevine puts on a wire or in a file: the envelope,
// the compressed frame, the TCP data frames and the bootstrap's control frames all store integers
// little-endian, whatever the host. One helper, so that the byte order is decided in one place.
//
// Contract: `p` points at sizeof(T) readable/writable bytes; no alignment is required.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace grapevine {

// Reads an unsigned integer stored little-endian at `p`.
template <typename T>
inline T loadLe(const std::uint8_t* p) {
  static_assert(std::is_integral_v<T> && std::is_unsigned_v<T>);
  if constexpr (std::endian::native == std::endian::little) {
    T v;
    std::memcpy(&v, p, sizeof v);
    return v;
  } else {
    T v = 0;
    for (std::size_t i = 0; i < sizeof(T); ++i) v |= static_cast<T>(T{p[i]} << (8 * i));
    return v;
  }
}

// Writes `v` little-endian at `p`.
template <typename T>
inline void storeLe(std::uint8_t* p, T v) {
  static_assert(std::is_integral_v<T> && std::is_unsigned_v<T>);
  if constexpr (std::endian::native == std::endian::little) {
    std::memcpy(p, &v, sizeof v);
  } else {
    for (std::size_t i = 0; i < sizeof(T); ++i) p[i] = static_cast<std::uint8_t>(v >> (8 * i));
  }
}

inline std::uint16_t loadLe16(const std::uint8_t* p) { return loadLe<std::uint16_t>(p); }
inline std::uint32_t loadLe32(const std::uint8_t* p) { return loadLe<std::uint32_t>(p); }
inline std::uint64_t loadLe64(const std::uint8_t* p) { return loadLe<std::uint64_t>(p); }
inline void storeLe16(std::uint8_t* p, std::uint16_t v) { storeLe(p, v); }
inline void storeLe32(std::uint8_t* p, std::uint32_t v) { storeLe(p, v); }
inline void storeLe64(std::uint8_t* p, std::uint64_t v) { storeLe(p, v); }

}  // namespace grapevine
