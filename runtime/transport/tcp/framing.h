// The TCP backend's stream format as pure functions over bytes (no socket, no state), so the
// parser can be tested and fuzzed on a buffer (fuzz/fuzz_tcp_framing.cc). tcp.h has the layout:
// a 16-byte hello (u32 magic "GVTD" | u16 version | u16 reserved | u32 sender rank | u32
// reserved), then frames: u64 tag | u64 length | length bytes, all little-endian.
#pragma once

#include <cstddef>
#include <cstdint>

#include "runtime/common/status.h"
#include "runtime/transport/transport.h"

namespace grapevine::transport::tcp {

inline constexpr std::uint32_t kHelloMagic = 0x44545647;  // "GVTD" read as little-endian bytes
inline constexpr std::uint16_t kWireVersion = 1;
inline constexpr std::size_t kHelloBytes = 16;
inline constexpr std::size_t kHeaderBytes = 16;

// Writes the kHelloBytes hello naming `rank` at p.
void encodeHello(std::uint8_t* p, int rank);
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
