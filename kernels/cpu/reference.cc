// The reference ops table: plain scalar loops written for obviousness, not speed. It is the oracle
// the vectorised (and later CUDA) tables are tested against, so it follows element_math.h
// literally.
#include "kernels/cpu/reference.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <vector>

#include "kernels/element_math.h"
#include "kernels/ops.h"

namespace grapevine::kernels::reference {

// Max over magnitude bit patterns: equal to max |x| for finite input, and a NaN (the one with the
// largest payload) when any element is NaN, so every table returns the same bits.
float maxAbs(const float* x, size_t n) {
  uint32_t m = 0;
  for (size_t i = 0; i < n; ++i) m = std::max(m, floatBits(x[i]) & 0x7FFFFFFFu);
  return bitsFloat(m);
}

float maxAbsDiff(const float* x, const float* y, size_t n) {
  uint32_t m = 0;
  for (size_t i = 0; i < n; ++i) m = std::max(m, floatBits(x[i] - y[i]) & 0x7FFFFFFFu);
  return bitsFloat(m);
}

double sumSquares(const float* x, size_t n) {
  double s = 0.0;
  for (size_t i = 0; i < n; ++i) s += static_cast<double>(x[i]) * x[i];
  return s;
}

double dot(const float* x, const float* y, size_t n) {
  double s = 0.0;
  for (size_t i = 0; i < n; ++i) s += static_cast<double>(x[i]) * y[i];
  return s;
}

bool allFinite(const float* x, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    if (!std::isfinite(x[i])) return false;
  }
  return true;
}
bool allFiniteHalf(const uint16_t* h, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    if ((h[i] & 0x7C00u) == 0x7C00u) return false;
  }
  return true;
}
bool allFiniteBf16(const uint16_t* b, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    if ((b[i] & 0x7F80u) == 0x7F80u) return false;
  }
  return true;
}

void axpy(float a, const float* x, float* y, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    float p = a * x[i];
    y[i] = y[i] + p;
  }
}
void add(const float* x, const float* y, float* out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = x[i] + y[i];
}

void toHalf(const float* x, size_t n, uint16_t* out) {
  for (size_t i = 0; i < n; ++i) out[i] = floatToHalf(x[i]);
}
void halfAccumulate(const uint16_t* h, size_t n, float w, float* acc) {
  for (size_t i = 0; i < n; ++i) {
    float p = w * halfToFloat(h[i]);
    acc[i] = acc[i] + p;
  }
}
void toBf16(const float* x, size_t n, uint16_t* out) {
  for (size_t i = 0; i < n; ++i) out[i] = floatToBf16(x[i]);
}
void bf16Accumulate(const uint16_t* b, size_t n, float w, float* acc) {
  for (size_t i = 0; i < n; ++i) {
    float p = w * bf16ToFloat(b[i]);
    acc[i] = acc[i] + p;
  }
}

void quantizeBlocks(const float* x, size_t n, size_t block, int bits, Rounding rounding,
                    uint64_t key, uint8_t* codes, float* scales) {
  const int levels = quantLevels(bits);
  if (bits == 4) std::fill(codes, codes + (n + 1) / 2, uint8_t{0});
  for (size_t b = 0, start = 0; start < n; ++b, start += block) {
    const size_t end = std::min(n, start + block);
    const float m = maxAbs(x + start, end - start);
    scales[b] = blockScale(m, levels);
    const float inv = blockInvScale(m, levels);
    for (size_t i = start; i < end; ++i) {
      int q = rounding == Rounding::kNearest
                  ? quantizeNearest(x[i], inv, levels)
                  : quantizeStochastic(x[i], inv, levels, uniform01(key, static_cast<uint32_t>(i)));
      if (bits == 8) {
        codes[i] = static_cast<uint8_t>(static_cast<int8_t>(q));
      } else {
        codes[i / 2] |= static_cast<uint8_t>((q & 0xF) << ((i & 1) * 4));
      }
    }
  }
}

void dequantizeAccumulate(const uint8_t* codes, const float* scales, size_t n, size_t block,
                          int bits, float w, float* acc) {
  for (size_t i = 0; i < n; ++i) {
    const float ws = w * scales[i / block];
    int q;
    if (bits == 8) {
      q = static_cast<int8_t>(codes[i]);
    } else {
      int nib = (codes[i / 2] >> ((i & 1) * 4)) & 0xF;
      q = nib >= 8 ? nib - 16 : nib;
    }
    float p = ws * static_cast<float>(q);
    acc[i] = acc[i] + p;
  }
}

void signPack(const float* x, size_t n, size_t block, uint8_t* bits, float* scales) {
  std::fill(bits, bits + (n + 7) / 8, uint8_t{0});
  for (size_t b = 0, start = 0; start < n; ++b, start += block) {
    const size_t end = std::min(n, start + block);
    float lanes[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (size_t i = start; i < end; ++i) {
      lanes[(i - start) % 8] += std::fabs(x[i]);
      if (std::signbit(x[i])) bits[i / 8] |= static_cast<uint8_t>(1u << (i % 8));
    }
    scales[b] = reduceLanes8(lanes) / static_cast<float>(end - start);
  }
}

void signAccumulate(const uint8_t* bits, const float* scales, size_t n, size_t block, float w,
                    float* acc) {
  for (size_t i = 0; i < n; ++i) {
    const float ws = w * scales[i / block];
    const bool neg = (bits[i / 8] >> (i % 8)) & 1u;
    acc[i] = acc[i] + (neg ? -ws : ws);
  }
}

size_t topkWorkspaceBytes(size_t n, size_t /*k*/) { return n * sizeof(uint32_t); }

uint32_t magnitudeKey(float f) { return floatBits(f) & 0x7FFFFFFFu; }

TopkStats topkSelect(const float* x, size_t n, size_t k, Selector /*selector*/, double /*slack*/,
                     uint64_t /*key*/, void* workspace, uint32_t* indices) {
  TopkStats stats;
  stats.passes = 1;
  if (k >= n) {
    for (size_t i = 0; i < n; ++i) indices[i] = static_cast<uint32_t>(i);
    stats.count = n;
    return stats;
  }
  if (k == 0) return stats;
  // The k-th largest key T; then every key > T, and the first (k - #above) keys equal to T.
  auto* keys = static_cast<uint32_t*>(workspace);
  for (size_t i = 0; i < n; ++i) keys[i] = magnitudeKey(x[i]);
  std::nth_element(keys, keys + (k - 1), keys + n, std::greater<uint32_t>());
  const uint32_t t = keys[k - 1];
  size_t above = 0;
  for (size_t i = 0; i < n; ++i) above += magnitudeKey(x[i]) > t;
  size_t ties = k - above, c = 0;
  for (size_t i = 0; i < n; ++i) {
    uint32_t kk = magnitudeKey(x[i]);
    if (kk > t || (kk == t && ties > 0)) {
      if (kk == t) --ties;
      indices[c++] = static_cast<uint32_t>(i);
    }
  }
  stats.count = c;
  return stats;
}

void gather(const float* x, const uint32_t* idx, size_t k, float* out) {
  for (size_t i = 0; i < k; ++i) out[i] = x[idx[i]];
}
void scatterAccumulate(const uint32_t* idx, const float* v, size_t k, float w, float* acc) {
  for (size_t i = 0; i < k; ++i) {
    float p = w * v[i];
    acc[idx[i]] = acc[idx[i]] + p;
  }
}

uint32_t crc32c(uint32_t crc, const uint8_t* data, size_t n) {
  static const std::vector<uint32_t> table = [] {
    std::vector<uint32_t> t(256);
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int j = 0; j < 8; ++j) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1u)));
      t[i] = c;
    }
    return t;
  }();
  crc = ~crc;
  for (size_t i = 0; i < n; ++i) crc = table[(crc ^ data[i]) & 0xFFu] ^ (crc >> 8);
  return ~crc;
}

// ---- Dense gossip passes ----

double subtractSquares(const float* x, const float* y, float* out, size_t n) {
  double l[8] = {};
  for (size_t k = 0; k < n; ++k) {
    out[k] = x[k] - y[k];
    const double v = out[k];
    l[k % 8] += v * v;
  }
  return reduceLanes8(l);
}

DistanceAndNorm distanceAndNorm(const float* x, const float* y, size_t n) {
  double ld[8] = {}, ln[8] = {};
  for (size_t k = 0; k < n; ++k) {
    const double yk = y[k];
    const double d = static_cast<double>(x[k]) - yk;
    ld[k % 8] += d * d;
    ln[k % 8] += yk * yk;
  }
  return {reduceLanes8(ld), reduceLanes8(ln)};
}

double mixDifferences(float* x, const float* y, const MixTerm* terms, size_t count, size_t n) {
  if (count == 0) return 0.0;
  // Tile by tile: the own copy and the partial sums of one tile in double stay in L1 while each
  // replica streams through once (the vectorised table does the same, in the same order).
  double t[kMixTile], yd[kMixTile], l[8] = {};
  for (size_t k0 = 0; k0 < n; k0 += kMixTile) {
    const size_t m = std::min(kMixTile, n - k0);
    for (size_t k = 0; k < m; ++k) {
      yd[k] = y[k0 + k];
      t[k] = 0.0;
    }
    for (size_t i = 0; i < count; ++i) {
      const float* r = terms[i].replica + k0;
      for (size_t k = 0; k < m; ++k) {
        const double d = static_cast<double>(r[k]) - yd[k];
        t[k] += terms[i].coefficient * d;
        l[(k0 + k) % 8] += (terms[i].weight * d) * d;
      }
    }
    for (size_t k = 0; k < m; ++k) x[k0 + k] = static_cast<float>(x[k0 + k] + t[k]);
  }
  return reduceLanes8(l);
}

void weightedSum(float* x, const float* a, double wa, const float* b, double wb,
                 const MixTerm* terms, size_t count, size_t n) {
  // Tile by tile, like mixDifferences: the sums of one tile stay in L1 while each term streams.
  double t[kMixTile];
  for (size_t k0 = 0; k0 < n; k0 += kMixTile) {
    const size_t m = std::min(kMixTile, n - k0);
    for (size_t k = 0; k < m; ++k) t[k] = wa * static_cast<double>(a[k0 + k]);
    if (b != nullptr) {
      for (size_t k = 0; k < m; ++k) t[k] += wb * static_cast<double>(b[k0 + k]);
    }
    for (size_t i = 0; i < count; ++i) {
      const float* r = terms[i].replica + k0;
      for (size_t k = 0; k < m; ++k) t[k] += terms[i].coefficient * static_cast<double>(r[k]);
    }
    for (size_t k = 0; k < m; ++k) x[k0 + k] = static_cast<float>(t[k]);
  }
}

// ---- Optimizer steps ----

void sgdDirection(const float* g, const float* x, float* m, float* u, size_t n, SgdStep step) {
  const float beta = step.beta, wd = step.weightDecay;
  switch (step.momentum) {
    case SgdMomentum::kNone:
      for (size_t i = 0; i < n; ++i) u[i] = g[i] + wd * x[i];
      return;
    case SgdMomentum::kLocal:
      for (size_t i = 0; i < n; ++i) {
        const float gi = g[i] + wd * x[i];
        m[i] = beta * m[i] + gi;
        u[i] = m[i];
      }
      return;
    case SgdMomentum::kLocalNesterov:
      for (size_t i = 0; i < n; ++i) {
        const float gi = g[i] + wd * x[i];
        m[i] = beta * m[i] + gi;
        u[i] = gi + beta * m[i];
      }
      return;
    case SgdMomentum::kQuasiGlobal:
      for (size_t i = 0; i < n; ++i) {
        const float gi = g[i] + wd * x[i];
        u[i] = gi + beta * m[i];
      }
      return;
    case SgdMomentum::kQuasiGlobalNesterov:
      for (size_t i = 0; i < n; ++i) {
        const float gi = g[i] + wd * x[i];
        u[i] = gi + beta * (beta * m[i] + gi);
      }
      return;
  }
}

void adamwDirection(const float* g, const float* x, float* m, float* v, float* u, size_t n,
                    AdamwStep s) {
  for (size_t i = 0; i < n; ++i) {
    const float gi = g[i];
    m[i] = s.beta1 * m[i] + (1.0f - s.beta1) * gi;
    v[i] = s.beta2 * v[i] + (1.0f - s.beta2) * gi * gi;
    u[i] = (m[i] / s.biasCorrection1) / (std::sqrt(v[i] / s.biasCorrection2) + s.eps) +
           s.weightDecay * x[i];
  }
}

void momentumFromChange(const float* before, const float* after, float* m, size_t n, float beta,
                        float invLrSum) {
  for (size_t i = 0; i < n; ++i) {
    const float d = (before[i] - after[i]) * invLrSum;
    m[i] = beta * m[i] + (1.0f - beta) * d;
  }
}

}  // namespace grapevine::kernels::reference

namespace grapevine::kernels {

size_t topkMaxCount(size_t n, size_t k, Selector selector, double slack) {
  if (k >= n) return n;
  if (selector == Selector::kExact) return k;
  return std::min(n, static_cast<size_t>(std::floor(static_cast<double>(k) * (1.0 + slack))));
}

const Ops& referenceOps() {
  namespace r = reference;
  static const Ops ops = {
      "reference",
      r::maxAbs,
      r::maxAbsDiff,
      r::sumSquares,
      r::dot,
      r::allFinite,
      r::allFiniteHalf,
      r::allFiniteBf16,
      r::axpy,
      r::add,
      r::toHalf,
      r::halfAccumulate,
      r::toBf16,
      r::bf16Accumulate,
      r::quantizeBlocks,
      r::dequantizeAccumulate,
      r::signPack,
      r::signAccumulate,
      r::topkWorkspaceBytes,
      r::topkSelect,
      r::gather,
      r::scatterAccumulate,
      r::subtractSquares,
      r::distanceAndNorm,
      r::mixDifferences,
      r::weightedSum,
      r::sgdDirection,
      r::adamwDirection,
      r::momentumFromChange,
      r::crc32c,
  };
  return ops;
}

}  // namespace grapevine::kernels
