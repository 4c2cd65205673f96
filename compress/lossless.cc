#include "compress/lossless.h"

#include <zstd.h>

#include <algorithm>
#include <string>

#include "compress/bytes.h"

namespace grapevine::compress {

using detail::corrupt;

struct LosslessCoder::Contexts {
  ZSTD_CCtx* c = ZSTD_createCCtx();
  ZSTD_DCtx* d = ZSTD_createDCtx();
  ~Contexts() {
    ZSTD_freeCCtx(c);
    ZSTD_freeDCtx(d);
  }
};

LosslessCoder::LosslessCoder() : ctx_(std::make_unique<Contexts>()) {}
LosslessCoder::~LosslessCoder() = default;
LosslessCoder::LosslessCoder(LosslessCoder&&) noexcept = default;
LosslessCoder& LosslessCoder::operator=(LosslessCoder&&) noexcept = default;

namespace {
constexpr size_t kExpHeader = 16;
size_t restBytes(FloatRegion::Kind k) { return k == FloatRegion::Kind::kF32 ? 3 : 1; }
size_t widthBytes(FloatRegion::Kind k) { return k == FloatRegion::Kind::kF32 ? 4 : 2; }
}  // namespace

size_t LosslessCoder::maxCompressedBytes(size_t raw) {
  // The exponent coder's output is at most header + raw + a zstd bound of the exponent plane; only
  // outputs smaller than raw are ever used, so raw + bounds is plenty.
  return kExpHeader + raw + ZSTD_compressBound(raw);
}

Result<size_t> LosslessCoder::compress(Lossless kind, int level, std::span<const uint8_t> raw,
                                       FloatRegion region, std::span<uint8_t> out) {
  if (kind == Lossless::kNone) return size_t{0};
  if (kind == Lossless::kZstd) {
    const size_t r =
        ZSTD_compressCCtx(ctx_->c, out.data(), out.size(), raw.data(), raw.size(), level);
    if (ZSTD_isError(r)) return internalError(std::string("zstd: ") + ZSTD_getErrorName(r));
    return r < raw.size() ? r : 0;
  }
  // Exponent coder.
  if (region.kind == FloatRegion::Kind::kNone || region.count == 0) return size_t{0};
  const size_t w = widthBytes(region.kind), rb = restBytes(region.kind), n = region.count;
  if (region.offset + n * w > raw.size())
    return invalidArgument("float region outside the payload");
  if (plane_.size() < n) plane_.resize(n);
  const uint8_t* f = raw.data() + region.offset;
  const size_t prefix = region.offset, suffix = raw.size() - region.offset - n * w;
  // Exponent plane into scratch; sign+mantissa plane straight into place after the compressed
  // exponents, which we only know after compressing: write it to the tail of `out` first.
  if (out.size() < kExpHeader + prefix + n * rb + suffix)
    return invalidArgument("output too small");
  const size_t restAt = out.size() - n * rb - suffix;
  uint8_t* rest = out.data() + restAt;
  if (region.kind == FloatRegion::Kind::kF32) {
    for (size_t i = 0; i < n; ++i) {
      const uint32_t b = loadLe<uint32_t>(f + 4 * i);
      plane_[i] = static_cast<uint8_t>(b >> 23);
      const uint32_t sm = ((b >> 31) << 23) | (b & 0x7FFFFFu);
      storeLe24(rest + 3 * i, sm);
    }
  } else {
    for (size_t i = 0; i < n; ++i) {
      const uint16_t b = loadLe<uint16_t>(f + 2 * i);
      plane_[i] = static_cast<uint8_t>(b >> 7);
      rest[i] = static_cast<uint8_t>(((b >> 15) << 7) | (b & 0x7Fu));
    }
  }
  if (suffix > 0) std::memcpy(rest + n * rb, raw.data() + raw.size() - suffix, suffix);
  uint8_t* expAt = out.data() + kExpHeader + prefix;
  const size_t expCap = restAt - (kExpHeader + prefix);
  const size_t e = ZSTD_compressCCtx(ctx_->c, expAt, expCap, plane_.data(), n, level);
  if (ZSTD_isError(e)) return size_t{0};  // did not fit below the raw size: does not pay
  const size_t total = kExpHeader + prefix + e + n * rb + suffix;
  if (total >= raw.size()) return size_t{0};
  out[0] = static_cast<uint8_t>(region.kind);
  out[1] = 0;
  storeLe<uint16_t>(out.data() + 2, 0);
  storeLe<uint32_t>(out.data() + 4, static_cast<uint32_t>(prefix));
  storeLe<uint32_t>(out.data() + 8, static_cast<uint32_t>(n));
  storeLe<uint32_t>(out.data() + 12, static_cast<uint32_t>(e));
  if (prefix > 0) std::memcpy(out.data() + kExpHeader, raw.data(), prefix);
  std::memmove(expAt + e, rest, n * rb + suffix);
  return total;
}

Status LosslessCoder::decompress(Lossless kind, std::span<const uint8_t> in,
                                 std::span<uint8_t> out) {
  if (kind == Lossless::kZstd) {
    // ZSTD_decompressDCtx never writes past out.size(); an exact size is required.
    const size_t r = ZSTD_decompressDCtx(ctx_->d, out.data(), out.size(), in.data(), in.size());
    if (ZSTD_isError(r)) return corrupt("lossless", std::string("zstd: ") + ZSTD_getErrorName(r));
    if (r != out.size()) return corrupt("lossless", "zstd output shorter than the raw length");
    return Status::ok();
  }
  if (kind != Lossless::kExponent) return corrupt("lossless", "unknown stage");
  if (in.size() < kExpHeader) return corrupt("lossless", "exponent header truncated");
  const auto k = static_cast<FloatRegion::Kind>(in[0]);
  if ((k != FloatRegion::Kind::kF32 && k != FloatRegion::Kind::kBf16) || in[1] != 0 ||
      loadLe<uint16_t>(in.data() + 2) != 0) {
    return corrupt("lossless", "exponent coder kind");
  }
  const size_t prefix = loadLe<uint32_t>(in.data() + 4), n = loadLe<uint32_t>(in.data() + 8);
  const size_t e = loadLe<uint32_t>(in.data() + 12);
  const size_t w = widthBytes(k), rb = restBytes(k);
  // Every length against the raw size (bounded by the limits) before touching memory.
  if (prefix > out.size() || n > (out.size() - prefix) / w) {
    return corrupt("lossless", "float region outside the raw payload");
  }
  const size_t suffix = out.size() - prefix - n * w;
  if (in.size() != kExpHeader + prefix + e + n * rb + suffix) {
    return corrupt("lossless", "exponent-coded size mismatch");
  }
  if (plane_.size() < n) plane_.resize(n);  // n <= raw length <= limits
  const uint8_t* expAt = in.data() + kExpHeader + prefix;
  const size_t r = ZSTD_decompressDCtx(ctx_->d, plane_.data(), n, expAt, e);
  if (ZSTD_isError(r) || r != n) return corrupt("lossless", "exponent plane");
  // Guarded: an empty region's pointer may be null (memcpy(null, _, 0) is undefined; UBSan,
  // fuzz_lossless).
  if (prefix > 0) std::memcpy(out.data(), in.data() + kExpHeader, prefix);
  const uint8_t* rest = expAt + e;
  uint8_t* f = out.data() + prefix;
  if (k == FloatRegion::Kind::kF32) {
    for (size_t i = 0; i < n; ++i) {
      const uint32_t sm = loadLe24(rest + 3 * i);
      const uint32_t b = ((sm >> 23) << 31) | (uint32_t{plane_[i]} << 23) | (sm & 0x7FFFFFu);
      storeLe<uint32_t>(f + 4 * i, b);
    }
  } else {
    for (size_t i = 0; i < n; ++i) {
      const uint16_t b =
          static_cast<uint16_t>(((rest[i] >> 7) << 15) | (plane_[i] << 7) | (rest[i] & 0x7Fu));
      storeLe<uint16_t>(f + 2 * i, b);
    }
  }
  if (suffix > 0) std::memcpy(f + n * w, rest + n * rb, suffix);
  return Status::ok();
}

}  // namespace grapevine::compress
