// Dense methods (none, fp16, bf16) and block methods (int8, int4, sign). All loops are kernel ops.
#include <algorithm>
#include <cmath>
#include <string>

#include "compress/bytes.h"
#include "compress/methods.h"
#include "kernels/element_math.h"

namespace grapevine::compress::detail {
namespace {

bool aligned4(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 3u) == 0; }

Status checkAligned(const void* p) {
  return aligned4(p) ? Status::ok() : invalidArgument("payload buffer must be 4-byte aligned");
}

size_t elementBytes(Method m) { return m == Method::kNone ? 4 : 2; }

// none: n fp32 values. Exact: unbiased, delta = 1.
// fp16: n IEEE halves, round to nearest even, saturating at 65504. Biased. For |x_i| in the normal
//   half range [2^-14, 65504] the relative error is <= 2^-11, so delta = 1 - 2^-22; smaller values
//   have absolute error <= 2^-25, larger ones saturate.
// bf16: n bfloat16 values, round to nearest even, saturating. Biased, relative error <= 2^-8 for
//   normal floats: delta = 1 - 2^-16.
class DenseCompressor final : public Compressor {
 public:
  DenseCompressor(Method m, const kernels::Ops& ops) : method_(m), ops_(ops) {}
  Method method() const override { return method_; }
  Properties properties(size_t) const override {
    if (method_ == Method::kNone) return {true, 1.0, 0.0};
    if (method_ == Method::kFp16) return {false, 1.0 - std::ldexp(1.0, -22), 0.0};
    return {false, 1.0 - std::ldexp(1.0, -16), 0.0};
  }
  size_t maxEncodedBytes(size_t n) const override { return n * elementBytes(method_); }
  Result<size_t> encode(std::span<const float> x, uint64_t, std::span<uint8_t> out) override {
    const size_t bytes = maxEncodedBytes(x.size());
    if (out.size() < bytes) return invalidArgument("output buffer too small");
    GV_RETURN_IF_ERROR(checkAligned(out.data()));
    if (bytes == 0) return bytes;
    if (method_ == Method::kNone) {
      std::memcpy(out.data(), x.data(), bytes);
    } else if (method_ == Method::kFp16) {
      ops_.toHalf(x.data(), x.size(), reinterpret_cast<uint16_t*>(out.data()));
    } else {
      ops_.toBf16(x.data(), x.size(), reinterpret_cast<uint16_t*>(out.data()));
    }
    return bytes;
  }
  Status decodeAccumulate(Payload p, float w, Acc acc) const override {
    return decodeDense(method_, p, w, acc, ops_, true);
  }

 private:
  Method method_;
  const kernels::Ops& ops_;
};

// Block payload: u16 block, u8 bits (8/4; 1 for sign), u8 rounding, f32 scales[ceil(n/block)],
// then codes (int8: n bytes; int4: ceil(n/2) bytes; sign: ceil(n/8) bytes).
constexpr size_t kBlockHeader = 4;

size_t codeBytes(int bits, size_t n) {
  return bits == 8 ? n : (bits == 4 ? (n + 1) / 2 : (n + 7) / 8);
}
size_t blockCount(size_t n, size_t block) { return (n + block - 1) / block; }

// int8 / int4 (L = 127 / 7 levels per sign, block B):
//   nearest: biased, delta = 4L^2 / (4L^2 + B)  (per-element error <= min(|x_i|, scale/2) and the
//            block maximum is represented exactly; B=256: int8 0.9960, int4 0.434);
//   stochastic: unbiased, omega = B / (4L^2) (variance <= scale^2/4 per element, scale = max/L),
//            delta = 1/(1 + omega) for the scaled operator.
class BlockQuantCompressor final : public Compressor {
 public:
  BlockQuantCompressor(Method m, const Options& o, const kernels::Ops& ops)
      : method_(m),
        bits_(m == Method::kInt8 ? 8 : 4),
        block_(o.blockSize),
        rounding_(o.rounding),
        ops_(ops) {}
  Method method() const override { return method_; }
  Properties properties(size_t n) const override {
    const double l = kernels::quantLevels(bits_);
    const double b = static_cast<double>(std::min(block_, std::max<size_t>(n, 1)));
    if (rounding_ == Rounding::kNearest) return {false, 4 * l * l / (4 * l * l + b), 0.0};
    const double omega = b / (4 * l * l);
    return {true, 1.0 / (1.0 + omega), omega};
  }
  size_t maxEncodedBytes(size_t n) const override {
    return kBlockHeader + 4 * blockCount(n, block_) + codeBytes(bits_, n);
  }
  Result<size_t> encode(std::span<const float> x, uint64_t key, std::span<uint8_t> out) override {
    const size_t n = x.size(), bytes = maxEncodedBytes(n);
    if (out.size() < bytes) return invalidArgument("output buffer too small");
    GV_RETURN_IF_ERROR(checkAligned(out.data()));
    storeLe<uint16_t>(out.data(), static_cast<uint16_t>(block_));
    out[2] = static_cast<uint8_t>(bits_);
    out[3] = static_cast<uint8_t>(rounding_);
    auto* scales = reinterpret_cast<float*>(out.data() + kBlockHeader);
    uint8_t* codes = out.data() + kBlockHeader + 4 * blockCount(n, block_);
    ops_.quantizeBlocks(x.data(), n, block_, bits_, rounding_, key, codes, scales);
    return bytes;
  }
  Status decodeAccumulate(Payload p, float w, Acc acc) const override {
    return decodeBlockQuant(method_, p, w, acc, ops_, true);
  }

 private:
  Method method_;
  int bits_;
  size_t block_;
  Rounding rounding_;
  const kernels::Ops& ops_;
};

// sign: C(x)_i = mean(|x_b|) * sign(x_i) per block b. Biased;
//   ||C(x) - x||^2 = sum_b (||x_b||^2 - ||x_b||_1^2 / B_b) exactly, so delta = 1/B (worst case: one
//   non-zero per block); dense Gaussian blocks give about 2/pi.
class SignCompressor final : public Compressor {
 public:
  SignCompressor(const Options& o, const kernels::Ops& ops) : block_(o.blockSize), ops_(ops) {}
  Method method() const override { return Method::kSign; }
  Properties properties(size_t n) const override {
    return {false, 1.0 / static_cast<double>(std::min(block_, std::max<size_t>(n, 1))), 0.0};
  }
  size_t maxEncodedBytes(size_t n) const override {
    return kBlockHeader + 4 * blockCount(n, block_) + codeBytes(1, n);
  }
  Result<size_t> encode(std::span<const float> x, uint64_t, std::span<uint8_t> out) override {
    const size_t n = x.size(), bytes = maxEncodedBytes(n);
    if (out.size() < bytes) return invalidArgument("output buffer too small");
    GV_RETURN_IF_ERROR(checkAligned(out.data()));
    storeLe<uint16_t>(out.data(), static_cast<uint16_t>(block_));
    out[2] = 1;
    out[3] = 0;
    auto* scales = reinterpret_cast<float*>(out.data() + kBlockHeader);
    ops_.signPack(x.data(), n, block_, out.data() + kBlockHeader + 4 * blockCount(n, block_),
                  scales);
    return bytes;
  }
  Status decodeAccumulate(Payload p, float w, Acc acc) const override {
    return decodeSign(p, w, acc, ops_, true);
  }

 private:
  size_t block_;
  const kernels::Ops& ops_;
};

// Common checks of a block payload; returns the block size.
Result<size_t> checkBlockPayload(Payload p, size_t n, int bits, const kernels::Ops& ops) {
  if (p.size() < kBlockHeader)
    return corrupt("payload_size", "block payload shorter than its header");
  const size_t block = loadLe<uint16_t>(p.data());
  if (block < 64 || block > 4096 || block % 64 != 0) {
    return corrupt("params", "block size " + std::to_string(block));
  }
  if (p[2] != bits) return corrupt("params", "bit width " + std::to_string(p[2]));
  if (p[3] > 1) return corrupt("params", "rounding " + std::to_string(p[3]));
  const size_t nb = blockCount(n, block);
  const size_t expect = kBlockHeader + 4 * nb + codeBytes(bits, n);
  if (p.size() != expect) {
    return corrupt("payload_size",
                   std::to_string(p.size()) + " bytes, expected " + std::to_string(expect));
  }
  const auto* scales = reinterpret_cast<const float*>(p.data() + kBlockHeader);
  if (!ops.allFinite(scales, nb)) return corrupt("non_finite", "block scale");
  for (size_t b = 0; b < nb; ++b) {
    if (scales[b] < 0.0f) return corrupt("params", "negative block scale");
  }
  return block;
}

}  // namespace

std::unique_ptr<Compressor> makeDense(Method m, const kernels::Ops& ops) {
  return std::make_unique<DenseCompressor>(m, ops);
}
std::unique_ptr<Compressor> makeBlockQuant(Method m, const Options& o, const kernels::Ops& ops) {
  return std::make_unique<BlockQuantCompressor>(m, o, ops);
}
std::unique_ptr<Compressor> makeSign(const Options& o, const kernels::Ops& ops) {
  return std::make_unique<SignCompressor>(o, ops);
}

Status decodeDense(Method m, Payload p, float w, Acc acc, const kernels::Ops& ops, bool apply) {
  GV_RETURN_IF_ERROR(checkAligned(p.data()));
  const size_t n = acc.size();
  if (p.size() != n * elementBytes(m)) {
    return corrupt("payload_size",
                   std::to_string(p.size()) + " bytes for " + std::to_string(n) + " elements");
  }
  if (m == Method::kNone) {
    const auto* v = reinterpret_cast<const float*>(p.data());
    if (!ops.allFinite(v, n)) return corrupt("non_finite", "fp32 value");
    if (apply) ops.axpy(w, v, acc.data(), n);
  } else if (m == Method::kFp16) {
    const auto* h = reinterpret_cast<const uint16_t*>(p.data());
    if (!ops.allFiniteHalf(h, n)) return corrupt("non_finite", "fp16 value");
    if (apply) ops.halfAccumulate(h, n, w, acc.data());
  } else {
    const auto* b = reinterpret_cast<const uint16_t*>(p.data());
    if (!ops.allFiniteBf16(b, n)) return corrupt("non_finite", "bf16 value");
    if (apply) ops.bf16Accumulate(b, n, w, acc.data());
  }
  return Status::ok();
}

Status decodeBlockQuant(Method m, Payload p, float w, Acc acc, const kernels::Ops& ops,
                        bool apply) {
  GV_RETURN_IF_ERROR(checkAligned(p.data()));
  const int bits = m == Method::kInt8 ? 8 : 4;
  const size_t n = acc.size();
  GV_ASSIGN_OR_RETURN(size_t block, checkBlockPayload(p, n, bits, ops));
  if (!apply) return Status::ok();
  const size_t nb = blockCount(n, block);
  ops.dequantizeAccumulate(p.data() + kBlockHeader + 4 * nb,
                           reinterpret_cast<const float*>(p.data() + kBlockHeader), n, block, bits,
                           w, acc.data());
  return Status::ok();
}

Status decodeSign(Payload p, float w, Acc acc, const kernels::Ops& ops, bool apply) {
  GV_RETURN_IF_ERROR(checkAligned(p.data()));
  const size_t n = acc.size();
  GV_ASSIGN_OR_RETURN(size_t block, checkBlockPayload(p, n, 1, ops));
  const size_t nb = blockCount(n, block);
  const uint8_t* bits = p.data() + kBlockHeader + 4 * nb;
  if (n % 8 != 0 && (bits[n / 8] >> (n % 8)) != 0) {
    return corrupt("params", "sign bits set past the last element");
  }
  if (!apply) return Status::ok();
  ops.signAccumulate(bits, reinterpret_cast<const float*>(p.data() + kBlockHeader), n, block, w,
                     acc.data());
  return Status::ok();
}

}  // namespace grapevine::compress::detail
