// The frame: a fixed 72-byte little-endian header followed by a method payload (optionally passed
// through a lossless stage). docs/wire-format.md is the normative description; keep them in step.
//
//   off size field
//     0   4  magic "GVCF"
//     4   2  format version (kFormatVersion)
//     6   1  method id (compress::Method)
//     7   1  flags (FrameFlag)
//     8   4  sender id
//    12   4  edge epoch
//    16   8  sequence number (per edge and epoch, assigned by the engine)
//    24   8  round
//    32   4  tensor id (index in the layout)
//    36   4  chunk index
//    40   4  chunk count (chunks of this tensor in this message)
//    44   4  element count (of this chunk)
//    48   8  element offset (of this chunk, within its tensor)
//    56   4  payload length (bytes after the header, as sent)
//    60   4  raw length (payload bytes after undoing the lossless stage; == payload length without)
//    64   4  reserved, zero
//    68   4  CRC32C of bytes [0, 68) followed by the payload
//
// Decoding checks every length against the header and the configured limits before any
// allocation, then the CRC, then the fields; it never reads outside the frame. Errors are typed
// (the rule in runtime/common/status.h): kFailedPrecondition for another format version,
// kResourceExhausted for sizes above the limits, kDataLoss for the rest (bad magic included), and
// the message starts with a stable reason (errorReason()).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "compress/options.h"
#include "kernels/ops.h"
#include "runtime/common/status.h"

namespace grapevine::compress {

inline constexpr uint32_t kFrameMagic = 0x46435647u;  // "GVCF" in memory order
inline constexpr uint16_t kFormatVersion = 1;
inline constexpr size_t kHeaderBytes = 72;
inline constexpr size_t kCrcOffset = 68;

enum FrameFlag : uint8_t {
  kFlagZstd = 1u << 0,           // payload is zstd(raw)
  kFlagExponent = 1u << 1,       // payload is the exponent coder's output
  kFlagErrorFeedback = 1u << 2,  // informational: the sender used error feedback
  kFlagLastChunk = 1u << 3,      // the last chunk of its tensor in this message
};
inline constexpr uint8_t kKnownFlags = 0x0F;

struct FrameHeader {
  Method method = Method::kNone;
  uint8_t flags = 0;
  uint32_t sender = 0;
  uint32_t edgeEpoch = 0;
  uint64_t sequence = 0;
  uint64_t round = 0;
  uint32_t tensorId = 0;
  uint32_t chunkIndex = 0;
  uint32_t chunkCount = 1;
  uint32_t elementCount = 0;
  uint64_t elementOffset = 0;
  uint32_t payloadLength = 0;
  uint32_t rawLength = 0;
};

// What a receiver accepts. Frames, raw payloads and element counts above these are rejected with
// kResourceExhausted ("too_large") before anything is allocated.
struct DecodeLimits {
  size_t maxFrameBytes = size_t{64} << 20;
  size_t maxElements = size_t{1} << 28;
  // The caller already verified these bytes' integrity (the engine's envelope carries a CRC32C of
  // the whole message, checked before any frame is looked at): the frame's own CRC is not computed
  // again, so each received byte is checksummed once. Every other check still runs.
  bool integrityVerified = false;
};

// Writes the header for `payload` into out[0, kHeaderBytes), CRC included.
void writeFrameHeader(const FrameHeader& header, std::span<const uint8_t> payload, uint8_t* out,
                      const kernels::Ops& ops = kernels::cpuOps());

// Parses and checks a whole frame (header + payload): magic, version, limits, lengths, CRC, flags,
// method id. Does not look inside the payload. Safe on arbitrary bytes.
Result<FrameHeader> parseFrame(std::span<const uint8_t> frame, const DecodeLimits& limits = {},
                               const kernels::Ops& ops = kernels::cpuOps());

// The stable reason of a decode error ("crc", "truncated", ...): the message up to the first ':'.
// Empty for an ok status.
std::string_view errorReason(const Status& status);

}  // namespace grapevine::compress
