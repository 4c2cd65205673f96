#include "compress/wire.h"

#include <string>

#include "compress/bytes.h"

namespace grapevine::compress {

using detail::corrupt;

void writeFrameHeader(const FrameHeader& h, std::span<const uint8_t> payload, uint8_t* out,
                      const kernels::Ops& ops) {
  storeLe<uint32_t>(out + 0, kFrameMagic);
  storeLe<uint16_t>(out + 4, kFormatVersion);
  out[6] = static_cast<uint8_t>(h.method);
  out[7] = h.flags;
  storeLe<uint32_t>(out + 8, h.sender);
  storeLe<uint32_t>(out + 12, h.edgeEpoch);
  storeLe<uint64_t>(out + 16, h.sequence);
  storeLe<uint64_t>(out + 24, h.round);
  storeLe<uint32_t>(out + 32, h.tensorId);
  storeLe<uint32_t>(out + 36, h.chunkIndex);
  storeLe<uint32_t>(out + 40, h.chunkCount);
  storeLe<uint32_t>(out + 44, h.elementCount);
  storeLe<uint64_t>(out + 48, h.elementOffset);
  storeLe<uint32_t>(out + 56, h.payloadLength);
  storeLe<uint32_t>(out + 60, h.rawLength);
  storeLe<uint32_t>(out + 64, 0);
  uint32_t crc = ops.crc32c(0, out, kCrcOffset);
  crc = ops.crc32c(crc, payload.data(), payload.size());
  storeLe<uint32_t>(out + kCrcOffset, crc);
}

Result<FrameHeader> parseFrame(std::span<const uint8_t> frame, const DecodeLimits& limits,
                               const kernels::Ops& ops) {
  if (frame.size() < kHeaderBytes) {
    return corrupt("truncated", std::to_string(frame.size()) + " bytes, shorter than the header");
  }
  const uint8_t* p = frame.data();
  if (loadLe<uint32_t>(p) != kFrameMagic) return corrupt("bad_magic", "not a Grapevine frame");
  if (loadLe<uint16_t>(p + 4) != kFormatVersion) {
    return failedPrecondition("version: format version " + std::to_string(loadLe<uint16_t>(p + 4)) +
                              ", this build reads " + std::to_string(kFormatVersion));
  }
  FrameHeader h;
  h.method = static_cast<Method>(p[6]);
  h.flags = p[7];
  h.sender = loadLe<uint32_t>(p + 8);
  h.edgeEpoch = loadLe<uint32_t>(p + 12);
  h.sequence = loadLe<uint64_t>(p + 16);
  h.round = loadLe<uint64_t>(p + 24);
  h.tensorId = loadLe<uint32_t>(p + 32);
  h.chunkIndex = loadLe<uint32_t>(p + 36);
  h.chunkCount = loadLe<uint32_t>(p + 40);
  h.elementCount = loadLe<uint32_t>(p + 44);
  h.elementOffset = loadLe<uint64_t>(p + 48);
  h.payloadLength = loadLe<uint32_t>(p + 56);
  h.rawLength = loadLe<uint32_t>(p + 60);
  // The frame size against the limit first: a frame above it is not even checksummed.
  if (frame.size() > limits.maxFrameBytes) {
    return resourceExhausted("too_large: frame of " + std::to_string(frame.size()) +
                             " bytes, limit " + std::to_string(limits.maxFrameBytes));
  }
  const size_t have = frame.size() - kHeaderBytes;
  if (have < h.payloadLength) {
    return corrupt("truncated", std::to_string(have) + " payload bytes, header says " +
                                    std::to_string(h.payloadLength));
  }
  if (have > h.payloadLength) {
    return corrupt("trailing", std::to_string(have - h.payloadLength) + " bytes after the payload");
  }
  if (!limits.integrityVerified) {
    uint32_t crc = ops.crc32c(0, p, kCrcOffset);
    crc = ops.crc32c(crc, p + kHeaderBytes, h.payloadLength);
    if (crc != loadLe<uint32_t>(p + kCrcOffset)) return corrupt("crc", "CRC32C mismatch");
  }
  // Authenticated by the CRC from here on: remaining checks catch sender bugs and senders with
  // other limits. Sizes that drive allocation (raw length, element count) come before the rest.
  if (h.rawLength > limits.maxFrameBytes || h.elementCount > limits.maxElements) {
    return resourceExhausted("too_large: raw payload " + std::to_string(h.rawLength) + " bytes, " +
                             std::to_string(h.elementCount) + " elements; limits " +
                             std::to_string(limits.maxFrameBytes) + " bytes, " +
                             std::to_string(limits.maxElements) + " elements");
  }
  if ((h.flags & ~kKnownFlags) != 0 || loadLe<uint32_t>(p + 64) != 0 ||
      ((h.flags & kFlagZstd) && (h.flags & kFlagExponent))) {
    return corrupt("flags", "unknown flags or reserved bits set");
  }
  if (static_cast<uint8_t>(h.method) >= kMethodCount) {
    return corrupt("method", "unknown method id " + std::to_string(p[6]));
  }
  if (!(h.flags & (kFlagZstd | kFlagExponent)) && h.rawLength != h.payloadLength) {
    return corrupt("length", "raw length differs from payload length without a lossless stage");
  }
  if (h.chunkCount == 0 || h.chunkIndex >= h.chunkCount) {
    return corrupt("range",
                   "chunk " + std::to_string(h.chunkIndex) + " of " + std::to_string(h.chunkCount));
  }
  return h;
}

std::string_view errorReason(const Status& status) {
  if (status.isOk()) return {};
  std::string_view m = status.message();
  return m.substr(0, m.find(':'));
}

}  // namespace grapevine::compress
