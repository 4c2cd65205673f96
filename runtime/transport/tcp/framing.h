// The TCP backend's stream format as pure functions over bytes (no socket, no state), so the
// parser can be tested and fuzzed on a buffer (fuzz/fuzz_tcp_framing.cc). tcp.h has the layout:
// a 48-byte hello (u32 magic "GVTD" | u16 version | u16 reserved | u32 sender rank | u32
// reserved | 32-byte binding token: DataBinding's of the sender's rank, zeros without a key), then
// frames: u64 tag | u64 length | length bytes, all little-endian.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "runtime/common/status.h"
#include "runtime/transport/transport.h"

namespace grapevine::transport::tcp {

inline constexpr std::uint32_t kHelloMagic = 0x44545647;  // "GVTD" read as little-endian bytes
inline constexpr std::uint16_t kWireVersion = 2;          // 2: the hello carries a binding token
inline constexpr std::size_t kBindingBytes = 32;
inline constexpr std::size_t kHelloBytes = 16 + kBindingBytes;
inline constexpr std::size_t kHeaderBytes = 16;

// Writes the kHelloBytes hello naming `rank` at p, with `token` (kBindingBytes; null: zeros).
void encodeHello(std::uint8_t* p, int rank, const std::uint8_t* token = nullptr);
// The binding token of a hello at p (kHelloBytes).
inline std::span<const std::uint8_t> helloToken(const std::uint8_t* p) {
  return {p + 16, kBindingBytes};
}
// Reads the kHelloBytes at p: the sender's rank, or an error naming what is wrong with the hello
// (kDataLoss: bad magic; kFailedPrecondition: another wire version).
Result<int> decodeHello(const std::uint8_t* p);

struct FrameHeader {
  Tag tag = 0;
  std::uint64_t size = 0;  // body bytes that follow the header
};

// Writes the kHeaderBytes frame header at p.
void encodeFrameHeader(std::uint8_t* p, Tag tag, std::uint64_t size);
// Reads the kHeaderBytes at p. A body longer than maxMessageBytes is refused before anything is
// allocated for it (kResourceExhausted, naming `peer` and both sizes): the peer is misconfigured
// or corrupt.
Result<FrameHeader> decodeFrameHeader(const std::uint8_t* p, std::size_t maxMessageBytes, int peer);

}  // namespace grapevine::transport::tcp
