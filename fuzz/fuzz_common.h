// Shared by the fuzz targets: the fixed model layout the frame target decodes against, and the
// input convention of the payload targets.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "compress/codec.h"

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
};

}  // namespace grapevine::fuzz
