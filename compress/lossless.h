// The lossless stage that composes after any method: zstd over the whole payload, or the exponent
// coder for float payloads (sign/exponent/mantissa split; the exponent plane is entropy-coded with
// zstd, the rest passes raw). Either is used only where it pays: compress() reports "did not
// pay" and the frame goes out raw, without the flag.
//
// Exponent-coded layout (all little-endian):
//   u8 kind (1 f32, 2 bf16), u8 0, u16 0, u32 region offset, u32 element count,
//   u32 compressed exponent bytes, then: the raw bytes before the region, zstd(exponent plane),
//   the sign+mantissa plane (f32: 3 bytes per element, sign << 23 | mantissa; bf16: 1 byte,
//   sign << 7 | mantissa), then the raw bytes after the region.
//
// Thread safety: one LosslessCoder per thread (it owns zstd contexts and scratch).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "compress/compressor.h"
#include "compress/options.h"
#include "runtime/common/status.h"

namespace grapevine::compress {

class LosslessCoder {
 public:
  LosslessCoder();
  ~LosslessCoder();
  LosslessCoder(LosslessCoder&&) noexcept;
  LosslessCoder& operator=(LosslessCoder&&) noexcept;

  // Output capacity compress() needs for `raw` bytes.
  static size_t maxCompressedBytes(size_t raw);

  // Returns the bytes written to out, or 0 when the stage does not pay for itself (the caller sends
  // raw). `region` tells the exponent coder where the floats are (ignored for zstd); kind kNone
  // means there is nothing to code, which also returns 0.
  Result<size_t> compress(Lossless kind, int level, std::span<const uint8_t> raw,
                          FloatRegion region, std::span<uint8_t> out);

  // Undoes compress() into exactly out.size() bytes (the frame's raw length, already checked
  // against the limits by the caller). Errors are kDataLoss "lossless: ...".
  Status decompress(Lossless kind, std::span<const uint8_t> in, std::span<uint8_t> out);

 private:
  struct Contexts;
  std::unique_ptr<Contexts> ctx_;
  std::vector<uint8_t> plane_;  // exponent plane scratch
};

}  // namespace grapevine::compress
