// Shared by the fuzz targets: the fixed model layout the frame target decodes against, the input
// convention of the payload targets, and the CRC fix-up of frames.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "compress/codec.h"
#include "compress/wire.h"
#include "kernels/ops.h"
#include "runtime/common/byte_order.h"

namespace grapevine::fuzz {

// Three tensors: a matrix (low-rank eligible), a small bias, a vector that needs chunks.
inline std::vector<compress::TensorLayout> fuzzLayout() {
  return {{"w", {32, 24}, 0, 768}, {"b", {24}, 768, 24}, {"v", {3000}, 792, 3000}};
}
inline constexpr size_t kFuzzModel = 768 + 24 + 3000;

// Payload-target input: u16 element count (mod 4097), u8 weight selector, then the payload.
inline constexpr size_t kPayloadPrefix = 3;

inline float fuzzWeight(uint8_t sel) {
  static const float w[] = {1.0f, -1.0f, 0.5f, 0.0f, 3.25f, -0.125f, 1e-3f, 7.0f};
  return w[sel % 8];
}

// An 8-byte aligned copy, so the decoder sees a payload like one inside a frame buffer.
struct AlignedCopy {
  std::vector<uint64_t> words;
  size_t size = 0;
  AlignedCopy(const uint8_t* p, size_t n) : words(n / 8 + 1), size(n) {
    if (n > 0) std::memcpy(words.data(), p, n);
  }
  const uint8_t* data() const { return reinterpret_cast<const uint8_t*>(words.data()); }
  uint8_t* data() { return reinterpret_cast<uint8_t*>(words.data()); }
  std::span<uint8_t> bytes() { return {data(), size}; }
};

// Rewrites a frame's header CRC32C (compress/wire.h) to match its bytes: the header before the
// CRC, then as much of the payload as the header's payload length names and the frame holds. A
// mutated frame almost never carries a matching CRC32C (the fuzzer cannot forge it), so without
// this every mutation stops at the CRC check and the checks behind it are reached by the seeds
// only. A frame shorter than a header is left as it is.
inline constexpr size_t kPayloadLengthOffset = 56;  // the header's table in compress/wire.h
inline void fixFrameCrc(std::span<uint8_t> frame) {
  if (frame.size() < compress::kHeaderBytes) return;
  const size_t payload = std::min<size_t>(loadLe<uint32_t>(frame.data() + kPayloadLengthOffset),
                                          frame.size() - compress::kHeaderBytes);
  const kernels::Ops& ops = kernels::cpuOps();
  uint32_t crc = ops.crc32c(0, frame.data(), compress::kCrcOffset);
  crc = ops.crc32c(crc, frame.data() + compress::kHeaderBytes, payload);
  storeLe<uint32_t>(frame.data() + compress::kCrcOffset, crc);
}

// The same for every frame of a codec adapter message (runtime/engine/codec_adapter.cc: each
// frame preceded by its u32 length), as far as the lengths stay inside the message. Returns the
// bytes the well-formed frames cover.
inline size_t fixMessageCrcs(std::span<uint8_t> message) {
  size_t pos = 0;
  while (message.size() - pos >= 4) {
    const uint32_t n = loadLe<uint32_t>(message.data() + pos);
    if (n > message.size() - pos - 4) break;
    fixFrameCrc(message.subspan(pos + 4, n));
    pos += 4 + n;
  }
  return pos;
}

}  // namespace grapevine::fuzz
