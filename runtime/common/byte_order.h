// Little-endian integer access for everything Grapevine puts on a wire or in a file: the envelope,
// the compressed frame, the TCP data frames and the bootstrap's control frames all store integers
// little-endian, whatever the host. One helper, so that the byte order is decided in one place.
//
// Contract: `p` points at sizeof(T) readable/writable bytes; no alignment is required.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace grapevine {

namespace byte_order_detail {
template <std::size_t N>
struct UnsignedOfSize;
template <>
struct UnsignedOfSize<1> {
  using type = std::uint8_t;
};
template <>
struct UnsignedOfSize<2> {
  using type = std::uint16_t;
};
template <>
struct UnsignedOfSize<4> {
  using type = std::uint32_t;
};
template <>
struct UnsignedOfSize<8> {
  using type = std::uint64_t;
};
}  // namespace byte_order_detail

// Reads a T (an integer, or an IEEE float/double by its bits) stored little-endian at `p`.
template <typename T>
inline T loadLe(const std::uint8_t* p) {
  static_assert(std::is_arithmetic_v<T>);
  if constexpr (std::endian::native == std::endian::little) {
    T v;
    std::memcpy(&v, p, sizeof v);
    return v;
  } else {
    using U = typename byte_order_detail::UnsignedOfSize<sizeof(T)>::type;
    U u = 0;
    for (std::size_t i = 0; i < sizeof(T); ++i) u = static_cast<U>(u | (U{p[i]} << (8 * i)));
    return std::bit_cast<T>(u);
  }
}

// Writes `v` little-endian at `p`.
template <typename T>
inline void storeLe(std::uint8_t* p, T v) {
  static_assert(std::is_arithmetic_v<T>);
  if constexpr (std::endian::native == std::endian::little) {
    std::memcpy(p, &v, sizeof v);
  } else {
    using U = typename byte_order_detail::UnsignedOfSize<sizeof(T)>::type;
    const U u = std::bit_cast<U>(v);
    for (std::size_t i = 0; i < sizeof(T); ++i) p[i] = static_cast<std::uint8_t>(u >> (8 * i));
  }
}

inline std::uint16_t loadLe16(const std::uint8_t* p) { return loadLe<std::uint16_t>(p); }
inline std::uint32_t loadLe32(const std::uint8_t* p) { return loadLe<std::uint32_t>(p); }
inline std::uint64_t loadLe64(const std::uint8_t* p) { return loadLe<std::uint64_t>(p); }
inline void storeLe16(std::uint8_t* p, std::uint16_t v) { storeLe(p, v); }
inline void storeLe32(std::uint8_t* p, std::uint32_t v) { storeLe(p, v); }
inline void storeLe64(std::uint8_t* p, std::uint64_t v) { storeLe(p, v); }
// The low 24 bits of a u32 in 3 bytes (the lossless coder's sign + mantissa planes).
inline std::uint32_t loadLe24(const std::uint8_t* p) {
  return std::uint32_t{p[0]} | (std::uint32_t{p[1]} << 8) | (std::uint32_t{p[2]} << 16);
}
inline void storeLe24(std::uint8_t* p, std::uint32_t v) {
  p[0] = static_cast<std::uint8_t>(v);
  p[1] = static_cast<std::uint8_t>(v >> 8);
  p[2] = static_cast<std::uint8_t>(v >> 16);
}

}  // namespace grapevine
