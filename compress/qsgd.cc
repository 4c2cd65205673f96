// QSGD (Alistarh et al. 2017) with s levels: C(x)_i = ||x|| * sign(x_i) * l_i / s where
// l_i = floor(s |x_i| / ||x|| + u_i), u_i = uniform01(key, i). Unbiased; the variance factor is
// omega = min(n / s^2, sqrt(n) / s), so C/(1 + omega) is a contraction with delta = 1/(1 + omega).
//
// Payload: u32 s, u8 field bits (2, 4, 8 or 16: the smallest holding a sign bit and a level in
// [0, s]), u8 0 x3, f32 norm, then n fields packed little-endian from bit 0 of byte 0: a field is
// level | sign << (bits - 1). Fields are power-of-two wide so decoding is a table lookup per byte.
#include <algorithm>
#include <array>
#include <cmath>
#include <string>

#include "compress/bytes.h"
#include "compress/methods.h"
#include "kernels/element_math.h"

namespace grapevine::compress::detail {
namespace {

constexpr size_t kQsgdHeader = 12;

int fieldBitsFor(uint32_t s) {
  for (int b : {2, 4, 8, 16}) {
    if (s <= (1u << (b - 1)) - 1) return b;
  }
  return 0;
}

size_t fieldBytes(size_t n, int bits) { return (n * static_cast<size_t>(bits) + 7) / 8; }

class QsgdCompressor final : public Compressor {
 public:
  QsgdCompressor(const Options& o, const kernels::Ops& ops)
      : s_(o.levels), bits_(fieldBitsFor(o.levels)), ops_(ops) {}
  Method method() const override { return Method::kQsgd; }
  Properties properties(size_t n) const override {
    const double dn = static_cast<double>(n), s = s_;
    const double omega = std::min(dn / (s * s), std::sqrt(dn) / s);
    return {true, 1.0 / (1.0 + omega), omega};
  }
  size_t maxEncodedBytes(size_t n) const override { return kQsgdHeader + fieldBytes(n, bits_); }
  Result<size_t> encode(std::span<const float> x, uint64_t key, std::span<uint8_t> out) override {
    const size_t n = x.size(), bytes = maxEncodedBytes(n);
    if (out.size() < bytes) return invalidArgument("output buffer too small");
    const float norm = static_cast<float>(std::sqrt(ops_.sumSquares(x.data(), n)));
    storeLe<uint32_t>(out.data(), s_);
    out[4] = static_cast<uint8_t>(bits_);
    out[5] = out[6] = out[7] = 0;
    storeLe<float>(out.data() + 8, norm);
    uint8_t* f = out.data() + kQsgdHeader;
    std::fill(f, f + fieldBytes(n, bits_), uint8_t{0});
    const float ratio = norm > 0.0f ? static_cast<float>(s_) / norm : 0.0f;
    const float sf = static_cast<float>(s_);
    const uint32_t signBit = 1u << (bits_ - 1);
    for (size_t i = 0; i < n; ++i) {
      const float r = std::fabs(x[i]) * ratio;
      float l = std::floor(r + kernels::uniform01(key, static_cast<uint32_t>(i)));
      l = l > sf ? sf : (l >= 0.0f ? l : 0.0f);  // also maps NaN to 0 (the norm is NaN then)
      uint32_t field = static_cast<uint32_t>(l) | (std::signbit(x[i]) && l > 0 ? signBit : 0u);
      const size_t bit = i * static_cast<size_t>(bits_);
      if (bits_ == 16) {
        storeLe<uint16_t>(f + bit / 8, static_cast<uint16_t>(field));
      } else {
        f[bit / 8] |= static_cast<uint8_t>(field << (bit % 8));
      }
    }
    return bytes;
  }
  Status decodeAccumulate(Payload p, float w, Acc acc) const override {
    return decodeQsgd(p, w, acc, ops_, true);
  }

 private:
  uint32_t s_;
  int bits_;
  const kernels::Ops& ops_;
};

}  // namespace

std::unique_ptr<Compressor> makeQsgd(const Options& o, const kernels::Ops& ops) {
  return std::make_unique<QsgdCompressor>(o, ops);
}

Status decodeQsgd(Payload p, float w, Acc acc, const kernels::Ops&, bool apply) {
  const size_t n = acc.size();
  if (p.size() < kQsgdHeader)
    return corrupt("payload_size", "qsgd payload shorter than its header");
  const uint32_t s = loadLe<uint32_t>(p.data());
  const int bits = p[4];
  if (s < 1 || s > 32767 || bits != fieldBitsFor(s) || p[5] || p[6] || p[7]) {
    return corrupt("params", "qsgd s=" + std::to_string(s) + " bits=" + std::to_string(bits));
  }
  const float norm = loadLe<float>(p.data() + 8);
  if (!std::isfinite(norm)) return corrupt("non_finite", "qsgd norm");
  if (norm < 0.0f) return corrupt("params", "negative qsgd norm");
  if (p.size() != kQsgdHeader + fieldBytes(n, bits)) return corrupt("payload_size", "qsgd fields");
  const uint8_t* f = p.data() + kQsgdHeader;
  const uint32_t signBit = 1u << (bits - 1), levelMask = signBit - 1;
  const float unit = norm / static_cast<float>(s);
  // value(field) = +-fl(unit * level); the accumulated term is fl(w * value).
  auto term = [&](uint32_t field) {
    const float v = unit * static_cast<float>(field & levelMask);
    return w * ((field & signBit) ? -v : v);
  };
  const size_t tailBits = n * static_cast<size_t>(bits) % 8;
  if (tailBits != 0 && (f[fieldBytes(n, bits) - 1] >> tailBits) != 0) {
    return corrupt("params", "qsgd bits set past the last field");
  }
  if (bits == 16) {
    for (size_t i = 0; i < n; ++i) {
      if ((loadLe<uint16_t>(f + 2 * i) & levelMask) > s)
        return corrupt("params", "qsgd level above s");
    }
    if (!apply) return Status::ok();
    for (size_t i = 0; i < n; ++i) acc[i] = acc[i] + term(loadLe<uint16_t>(f + 2 * i));
    return Status::ok();
  }
  // Fields per byte: 8 / bits. One table of the terms for every field value.
  const uint32_t fieldCount = 1u << bits;
  std::array<float, 256> lut{};
  bool anyInvalid = false;
  for (uint32_t c = 0; c < fieldCount; ++c) {
    lut[c] = term(c);
    anyInvalid |= (c & levelMask) > s;
  }
  const uint32_t mask = fieldCount - 1;
  const size_t perByte = static_cast<size_t>(8 / bits);
  if (anyInvalid) {  // some level values exceed s: check every field before applying
    for (size_t i = 0; i < n; ++i) {
      const size_t bit = i * static_cast<size_t>(bits);
      if (((f[bit / 8] >> (bit % 8)) & mask & levelMask) > s) {
        return corrupt("params", "qsgd level above s");
      }
    }
  }
  if (!apply) return Status::ok();
  const size_t full = n / perByte;
  if (bits == 8) {
    for (size_t i = 0; i < n; ++i) acc[i] = acc[i] + lut[f[i]];
  } else if (bits == 4) {
    for (size_t b = 0; b < full; ++b) {
      acc[2 * b] = acc[2 * b] + lut[f[b] & 0xF];
      acc[2 * b + 1] = acc[2 * b + 1] + lut[f[b] >> 4];
    }
  } else {
    for (size_t b = 0; b < full; ++b) {
      for (size_t j = 0; j < 4; ++j) acc[4 * b + j] = acc[4 * b + j] + lut[(f[b] >> (2 * j)) & 3];
    }
  }
  for (size_t i = full * perByte; i < n; ++i) {
    const size_t bit = i * static_cast<size_t>(bits);
    acc[i] = acc[i] + lut[(f[bit / 8] >> (bit % 8)) & mask];
  }
  return Status::ok();
}

}  // namespace grapevine::compress::detail
