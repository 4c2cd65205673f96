// The vectorised CPU ops table. Each hot op has an AVX2 body compiled with a target attribute (so
// the library still runs on CPUs without AVX2) and is picked at start-up with
// __builtin_cpu_supports; otherwise the op falls back to the reference entry. Tails shorter than a
// vector use the scalar element math of element_math.h, so results stay bit-identical to the
// reference wherever ops.h promises it. No FMA: `acc + w * v` must round twice, like the reference.
#include <cpuid.h>
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <functional>
#include <string>

#include "kernels/cpu/reference.h"
#include "kernels/element_math.h"
#include "kernels/ops.h"

#define GV_AVX2 __attribute__((target("avx2,f16c,sse4.2,popcnt,bmi")))
#define GV_SSE42 __attribute__((target("sse4.2")))

namespace grapevine::kernels::avx2 {
namespace {

GV_AVX2 inline __m256i absBits(__m256 v) {
  return _mm256_and_si256(_mm256_castps_si256(v), _mm256_set1_epi32(0x7FFFFFFF));
}

GV_AVX2 inline uint32_t hmaxEpu32(__m256i v) {
  __m128i m = _mm_max_epu32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  m = _mm_max_epu32(m, _mm_shuffle_epi32(m, _MM_SHUFFLE(1, 0, 3, 2)));
  m = _mm_max_epu32(m, _mm_shuffle_epi32(m, _MM_SHUFFLE(2, 3, 0, 1)));
  return static_cast<uint32_t>(_mm_cvtsi128_si32(m));
}

// The low and the high four floats of v, widened to double.
GV_AVX2 inline __m256d lowHalfPd(__m256 v) { return _mm256_cvtps_pd(_mm256_castps256_ps128(v)); }
GV_AVX2 inline __m256d highHalfPd(__m256 v) { return _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)); }

GV_AVX2 inline double hsumPd(__m256d v) {
  __m128d s = _mm_add_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
  s = _mm_add_sd(s, _mm_unpackhi_pd(s, s));
  return _mm_cvtsd_f64(s);
}

// fmix32 on 8 lanes (element_math.h::fmix32).
GV_AVX2 inline __m256i fmix32x8(__m256i h) {
  h = _mm256_xor_si256(h, _mm256_srli_epi32(h, 16));
  h = _mm256_mullo_epi32(h, _mm256_set1_epi32(static_cast<int>(0x85EBCA6Bu)));
  h = _mm256_xor_si256(h, _mm256_srli_epi32(h, 13));
  h = _mm256_mullo_epi32(h, _mm256_set1_epi32(static_cast<int>(0xC2B2AE35u)));
  h = _mm256_xor_si256(h, _mm256_srli_epi32(h, 16));
  return h;
}

// uniform01(key, i..i+7)
GV_AVX2 inline __m256 uniform01x8(uint64_t key, uint32_t i) {
  __m256i idx = _mm256_add_epi32(_mm256_set1_epi32(static_cast<int>(i)),
                                 _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  __m256i h = fmix32x8(
      _mm256_xor_si256(idx, _mm256_set1_epi32(static_cast<int>(static_cast<uint32_t>(key)))));
  h = fmix32x8(
      _mm256_xor_si256(h, _mm256_set1_epi32(static_cast<int>(static_cast<uint32_t>(key >> 32)))));
  __m256 u = _mm256_cvtepi32_ps(_mm256_srli_epi32(h, 8));
  return _mm256_mul_ps(u, _mm256_set1_ps(0x1.0p-24f));
}

}  // namespace

GV_AVX2 float maxAbs(const float* x, size_t n) {
  __m256i m0 = _mm256_setzero_si256(), m1 = m0, m2 = m0, m3 = m0;
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    m0 = _mm256_max_epu32(m0, absBits(_mm256_loadu_ps(x + i)));
    m1 = _mm256_max_epu32(m1, absBits(_mm256_loadu_ps(x + i + 8)));
    m2 = _mm256_max_epu32(m2, absBits(_mm256_loadu_ps(x + i + 16)));
    m3 = _mm256_max_epu32(m3, absBits(_mm256_loadu_ps(x + i + 24)));
  }
  for (; i + 8 <= n; i += 8) m0 = _mm256_max_epu32(m0, absBits(_mm256_loadu_ps(x + i)));
  uint32_t m = hmaxEpu32(_mm256_max_epu32(_mm256_max_epu32(m0, m1), _mm256_max_epu32(m2, m3)));
  for (; i < n; ++i) m = std::max(m, floatBits(x[i]) & 0x7FFFFFFFu);
  return bitsFloat(m);
}

// |x[i..i+8) - y[i..i+8)| as magnitude bits.
GV_AVX2 inline __m256i absDiffBits(const float* x, const float* y, size_t i) {
  return absBits(_mm256_sub_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
}

GV_AVX2 float maxAbsDiff(const float* x, const float* y, size_t n) {
  __m256i m0 = _mm256_setzero_si256(), m1 = m0;
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    m0 = _mm256_max_epu32(m0, absDiffBits(x, y, i));
    m1 = _mm256_max_epu32(m1, absDiffBits(x, y, i + 8));
  }
  for (; i + 8 <= n; i += 8) m0 = _mm256_max_epu32(m0, absDiffBits(x, y, i));
  uint32_t m = hmaxEpu32(_mm256_max_epu32(m0, m1));
  for (; i < n; ++i) m = std::max(m, floatBits(x[i] - y[i]) & 0x7FFFFFFFu);
  return bitsFloat(m);
}

GV_AVX2 double dot(const float* x, const float* y, size_t n) {
  __m256d a0 = _mm256_setzero_pd(), a1 = a0;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 vx = _mm256_loadu_ps(x + i), vy = _mm256_loadu_ps(y + i);
    a0 = _mm256_add_pd(a0, _mm256_mul_pd(lowHalfPd(vx), lowHalfPd(vy)));
    a1 = _mm256_add_pd(a1, _mm256_mul_pd(highHalfPd(vx), highHalfPd(vy)));
  }
  double s = hsumPd(_mm256_add_pd(a0, a1));
  for (; i < n; ++i) s += static_cast<double>(x[i]) * y[i];
  return s;
}

GV_AVX2 double sumSquares(const float* x, size_t n) { return dot(x, x, n); }

GV_AVX2 bool allFinite(const float* x, size_t n) {
  const __m256i expMask = _mm256_set1_epi32(0x7F800000);
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __m256i bad = _mm256_setzero_si256();
    for (int j = 0; j < 32; j += 8) {
      __m256i e = _mm256_and_si256(_mm256_castps_si256(_mm256_loadu_ps(x + i + j)), expMask);
      bad = _mm256_or_si256(bad, _mm256_cmpeq_epi32(e, expMask));
    }
    if (!_mm256_testz_si256(bad, bad)) return false;
  }
  return reference::allFinite(x + i, n - i);
}

GV_AVX2 bool allFinite16(const uint16_t* h, size_t n, uint16_t expBits) {
  const __m256i expMask = _mm256_set1_epi16(static_cast<short>(expBits));
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __m256i a =
        _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(h + i)), expMask);
    __m256i b =
        _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(h + i + 16)), expMask);
    __m256i bad = _mm256_or_si256(_mm256_cmpeq_epi16(a, expMask), _mm256_cmpeq_epi16(b, expMask));
    if (!_mm256_testz_si256(bad, bad)) return false;
  }
  for (; i < n; ++i) {
    if ((h[i] & expBits) == expBits) return false;
  }
  return true;
}
GV_AVX2 bool allFiniteHalf(const uint16_t* h, size_t n) { return allFinite16(h, n, 0x7C00u); }
GV_AVX2 bool allFiniteBf16(const uint16_t* b, size_t n) { return allFinite16(b, n, 0x7F80u); }

GV_AVX2 void axpy(float a, const float* x, float* y, size_t n) {
  const __m256 va = _mm256_set1_ps(a);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 p = _mm256_mul_ps(va, _mm256_loadu_ps(x + i));
    _mm256_storeu_ps(y + i, _mm256_add_ps(_mm256_loadu_ps(y + i), p));
  }
  reference::axpy(a, x + i, y + i, n - i);
}

GV_AVX2 void add(const float* x, const float* y, float* out, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(out + i, _mm256_add_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  }
  reference::add(x + i, y + i, out + i, n - i);
}

GV_AVX2 void toHalf(const float* x, size_t n, uint16_t* out) {
  const __m256 hi = _mm256_set1_ps(kHalfMax), lo = _mm256_set1_ps(-kHalfMax);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    // min/max return their second operand when either is NaN, so NaN passes through like the
    // scalar comparisons in floatToHalf.
    __m256 v = _mm256_max_ps(lo, _mm256_min_ps(hi, _mm256_loadu_ps(x + i)));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                     _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  reference::toHalf(x + i, n - i, out + i);
}

GV_AVX2 void halfAccumulate(const uint16_t* h, size_t n, float w, float* acc) {
  const __m256 vw = _mm256_set1_ps(w);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h + i)));
    _mm256_storeu_ps(acc + i, _mm256_add_ps(_mm256_loadu_ps(acc + i), _mm256_mul_ps(vw, v)));
  }
  reference::halfAccumulate(h + i, n - i, w, acc + i);
}

GV_AVX2 void toBf16(const float* x, size_t n, uint16_t* out) {
  const __m256i absMask = _mm256_set1_epi32(0x7FFFFFFF);
  const __m256i inf = _mm256_set1_epi32(0x7F800000);
  const __m256i satFrom = _mm256_set1_epi32(0x7F7F7FFF);  // absx >= 0x7F7F8000 saturates
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i));
    __m256i a = _mm256_and_si256(v, absMask);
    __m256i isNan = _mm256_cmpgt_epi32(a, inf);
    __m256i isBig = _mm256_cmpgt_epi32(a, satFrom);
    __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(v, 16), _mm256_set1_epi32(1));
    __m256i r = _mm256_srli_epi32(
        _mm256_add_epi32(_mm256_add_epi32(v, _mm256_set1_epi32(0x7FFF)), lsb), 16);
    __m256i sat = _mm256_srli_epi32(
        _mm256_or_si256(_mm256_andnot_si256(absMask, v), _mm256_set1_epi32(0x7F7F0000)), 16);
    __m256i nan = _mm256_or_si256(_mm256_srli_epi32(v, 16), _mm256_set1_epi32(0x40));
    r = _mm256_blendv_epi8(r, sat, isBig);
    r = _mm256_blendv_epi8(r, nan, isNan);
    __m128i packed = _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), packed);
  }
  reference::toBf16(x + i, n - i, out + i);
}

GV_AVX2 void bf16Accumulate(const uint16_t* b, size_t n, float w, float* acc) {
  const __m256 vw = _mm256_set1_ps(w);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + i)));
    __m256 f = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
    _mm256_storeu_ps(acc + i, _mm256_add_ps(_mm256_loadu_ps(acc + i), _mm256_mul_ps(vw, f)));
  }
  reference::bf16Accumulate(b + i, n - i, w, acc + i);
}

namespace {

// 8 floats -> 8 int32 levels, exactly as element_math.h's quantizeNearest/quantizeStochastic.
template <bool kStochastic>
GV_AVX2 inline __m256i quantize8(const float* x, __m256 inv, __m256 l, uint64_t key, uint32_t i) {
  __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x), inv);
  if constexpr (kStochastic) {
    v = _mm256_floor_ps(_mm256_add_ps(v, uniform01x8(key, i)));
  } else {
    v = _mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
  v = _mm256_min_ps(l, _mm256_max_ps(_mm256_sub_ps(_mm256_setzero_ps(), l), v));
  v = _mm256_and_ps(v, _mm256_cmp_ps(v, v, _CMP_ORD_Q));  // NaN -> 0
  return _mm256_cvtps_epi32(v);
}

// 32 int32 levels (4 vectors) -> 32 int8 in element order.
GV_AVX2 inline __m256i packTo8(__m256i a, __m256i b, __m256i c, __m256i d) {
  __m256i ab = _mm256_packs_epi32(a, b);  // a0-3 b0-3 | a4-7 b4-7
  __m256i cd = _mm256_packs_epi32(c, d);
  __m256i abcd = _mm256_packs_epi16(ab, cd);  // a0-3 b0-3 c0-3 d0-3 | a4-7 b4-7 c4-7 d4-7
  return _mm256_permutevar8x32_epi32(abcd, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

template <bool kStochastic>
GV_AVX2 void quantizeBlocksImpl(const float* x, size_t n, size_t block, int bits, uint64_t key,
                                uint8_t* codes, float* scales) {
  const int levels = quantLevels(bits);
  const __m256 l = _mm256_set1_ps(static_cast<float>(levels));
  for (size_t b = 0, start = 0; start < n; ++b, start += block) {
    const size_t end = std::min(n, start + block);
    const float m = maxAbs(x + start, end - start);
    scales[b] = blockScale(m, levels);
    const float invScalar = blockInvScale(m, levels);
    const __m256 inv = _mm256_set1_ps(invScalar);
    size_t i = start;
    for (; i + 32 <= end; i += 32) {
      const uint32_t i32 = static_cast<uint32_t>(i);
      __m256i q = packTo8(quantize8<kStochastic>(x + i, inv, l, key, i32),
                          quantize8<kStochastic>(x + i + 8, inv, l, key, i32 + 8),
                          quantize8<kStochastic>(x + i + 16, inv, l, key, i32 + 16),
                          quantize8<kStochastic>(x + i + 24, inv, l, key, i32 + 24));
      if (bits == 8) {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(codes + i), q);
      } else {
        // Byte pairs (lo, hi) -> lo | hi << 4, i.e. per 16-bit word (w & 0xF) | ((w >> 4) & 0xF0).
        __m256i t = _mm256_and_si256(q, _mm256_set1_epi8(0x0F));
        __m256i r =
            _mm256_or_si256(_mm256_and_si256(t, _mm256_set1_epi16(0x000F)),
                            _mm256_and_si256(_mm256_srli_epi16(t, 4), _mm256_set1_epi16(0x00F0)));
        __m128i p = _mm_packus_epi16(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(codes + i / 2), p);
      }
    }
    for (; i < end; ++i) {  // tail of the last block (blocks are multiples of 64)
      int q = kStochastic ? quantizeStochastic(x[i], invScalar, levels,
                                               uniform01(key, static_cast<uint32_t>(i)))
                          : quantizeNearest(x[i], invScalar, levels);
      if (bits == 8) {
        codes[i] = static_cast<uint8_t>(static_cast<int8_t>(q));
      } else if ((i & 1) == 0) {
        codes[i / 2] = static_cast<uint8_t>(q & 0xF);
      } else {
        codes[i / 2] |= static_cast<uint8_t>((q & 0xF) << 4);
      }
    }
  }
}

}  // namespace

GV_AVX2 void quantizeBlocks(const float* x, size_t n, size_t block, int bits, Rounding rounding,
                            uint64_t key, uint8_t* codes, float* scales) {
  if (rounding == Rounding::kStochastic) {
    quantizeBlocksImpl<true>(x, n, block, bits, key, codes, scales);
  } else {
    quantizeBlocksImpl<false>(x, n, block, bits, key, codes, scales);
  }
}

GV_AVX2 void dequantizeAccumulate(const uint8_t* codes, const float* scales, size_t n, size_t block,
                                  int bits, float w, float* acc) {
  for (size_t b = 0, start = 0; start < n; ++b, start += block) {
    const size_t end = std::min(n, start + block);
    const float wsScalar = w * scales[b];
    const __m256 ws = _mm256_set1_ps(wsScalar);
    size_t i = start;
    for (; i + 16 <= end; i += 16) {
      __m128i q8;
      if (bits == 8) {
        q8 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(codes + i));
      } else {
        __m128i raw = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes + i / 2));
        __m128i lo = _mm_and_si128(raw, _mm_set1_epi8(0x0F));
        __m128i hi = _mm_and_si128(_mm_srli_epi16(raw, 4), _mm_set1_epi8(0x0F));
        __m128i nib = _mm_unpacklo_epi8(lo, hi);
        q8 = _mm_sub_epi8(_mm_xor_si128(nib, _mm_set1_epi8(8)), _mm_set1_epi8(8));  // sign-extend
      }
      __m256 f0 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q8));
      __m256 f1 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(q8, 8)));
      _mm256_storeu_ps(acc + i, _mm256_add_ps(_mm256_loadu_ps(acc + i), _mm256_mul_ps(ws, f0)));
      _mm256_storeu_ps(acc + i + 8,
                       _mm256_add_ps(_mm256_loadu_ps(acc + i + 8), _mm256_mul_ps(ws, f1)));
    }
    for (; i < end; ++i) {
      int q;
      if (bits == 8) {
        q = static_cast<int8_t>(codes[i]);
      } else {
        int nib = (codes[i / 2] >> ((i & 1) * 4)) & 0xF;
        q = nib >= 8 ? nib - 16 : nib;
      }
      float p = wsScalar * static_cast<float>(q);
      acc[i] = acc[i] + p;
    }
  }
}

GV_AVX2 void signPack(const float* x, size_t n, size_t block, uint8_t* bits, float* scales) {
  const __m256 absMask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  for (size_t b = 0, start = 0; start < n; ++b, start += block) {
    const size_t end = std::min(n, start + block);
    __m256 lanesV = _mm256_setzero_ps();
    size_t i = start;
    for (; i + 8 <= end; i += 8) {
      __m256 v = _mm256_loadu_ps(x + i);
      lanesV = _mm256_add_ps(lanesV, _mm256_and_ps(v, absMask));
      bits[i / 8] = static_cast<uint8_t>(_mm256_movemask_ps(v));
    }
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, lanesV);
    if (i < end) bits[i / 8] = 0;
    for (; i < end; ++i) {
      lanes[(i - start) % 8] += std::fabs(x[i]);
      if (std::signbit(x[i])) bits[i / 8] |= static_cast<uint8_t>(1u << (i % 8));
    }
    scales[b] = reduceLanes8(lanes) / static_cast<float>(end - start);
  }
}

GV_AVX2 void signAccumulate(const uint8_t* bits, const float* scales, size_t n, size_t block,
                            float w, float* acc) {
  const __m256i bitSel = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
  const __m256i signBit = _mm256_set1_epi32(static_cast<int>(0x80000000u));
  for (size_t b = 0, start = 0; start < n; ++b, start += block) {
    const size_t end = std::min(n, start + block);
    const float wsScalar = w * scales[b];
    const __m256i ws = _mm256_castps_si256(_mm256_set1_ps(wsScalar));
    size_t i = start;
    for (; i + 8 <= end; i += 8) {
      __m256i m =
          _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32(bits[i / 8]), bitSel), bitSel);
      __m256 v = _mm256_castsi256_ps(_mm256_xor_si256(ws, _mm256_and_si256(m, signBit)));
      _mm256_storeu_ps(acc + i, _mm256_add_ps(_mm256_loadu_ps(acc + i), v));
    }
    for (; i < end; ++i) {
      const bool neg = (bits[i / 8] >> (i % 8)) & 1u;
      acc[i] = acc[i] + (neg ? -wsScalar : wsScalar);
    }
  }
}

// ---- Top-k ----------------------------------------------------------------------------------
//
// Exact: estimate a threshold from a sample that keeps a few more than k elements, collect
// (index, key) of everything at or above it in one vectorised pass, find the exact k-th key among
// the candidates with nth_element, and filter the candidates (already in index order). If the
// sample misled us (too few candidates, or more than the workspace holds), fall back to a 3-pass
// radix select (two 16-bit histograms, then the output pass), which needs no candidate buffer.
// Approx: the same pass with a threshold aimed at k; accept the candidates when their count is
// within slack of k, trim them to exactly k when above, and run the exact path when below.
namespace {

constexpr size_t kSampleLines = 4096;  // sample = 4096 cache lines of 16 floats
constexpr size_t kLine = 16;
constexpr size_t kSample = kSampleLines * kLine;
constexpr size_t kSmallN = 4 * kSample;  // below this, select directly on all keys
constexpr size_t kHist = 65536;

size_t candidateCapacity(size_t n, size_t k) {
  return n <= kSmallN ? n : std::min(n, 2 * k + 4096);
}

struct TopkWorkspace {
  uint32_t* sample;   // kSample keys, or n keys when n <= kSmallN
  uint32_t* candIdx;  // capacity + 8 (the compress-store writes 8 lanes at a time)
  uint32_t* candKey;  // capacity + 8
  uint32_t* scratch;  // capacity: a copy of candKey for nth_element
  uint32_t* hist;     // kHist
  size_t capacity;
};

TopkWorkspace carve(void* ws, size_t n, size_t k) {
  TopkWorkspace w;
  w.capacity = candidateCapacity(n, k);
  auto* p = static_cast<uint32_t*>(ws);
  w.sample = p;
  p += std::max(kSample, n <= kSmallN ? n : 0);
  w.candIdx = p;
  p += w.capacity + 8;
  w.candKey = p;
  p += w.capacity + 8;
  w.scratch = p;
  p += w.capacity;
  w.hist = p;
  return w;
}

// Left-pack permutations: for each 8-bit mask, the lanes whose bit is set, first.
struct PackTable {
  alignas(32) std::array<std::array<uint32_t, 8>, 256> perm{};
  PackTable() {
    for (uint32_t m = 0; m < 256; ++m) {
      uint32_t c = 0;
      for (uint32_t j = 0; j < 8; ++j) {
        if (m & (1u << j)) perm[m][c++] = j;
      }
    }
  }
};
const PackTable& packTable() {
  static const PackTable t;
  return t;
}

// Bit j set when lane j of k is above tm1 (signed compare: keys have the sign bit clear).
GV_AVX2 inline int maskAbove(__m256i k, __m256i tm1) {
  return _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(k, tm1)));
}

// Left-packs the lanes of mask m (keys k of elements base..base+7) to idx/keys at c while c <= cap
// (the buffers have 8 lanes of slack), and counts them either way.
GV_AVX2 inline void packLanes(const PackTable& pt, __m256i k, int m, size_t base, uint32_t* idx,
                              uint32_t* keys, size_t& c, size_t cap) {
  if (c <= cap) {
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i perm = _mm256_load_si256(reinterpret_cast<const __m256i*>(pt.perm[m].data()));
    const __m256i ids = _mm256_add_epi32(_mm256_set1_epi32(static_cast<int>(base)), lane);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(idx + c),
                        _mm256_permutevar8x32_epi32(ids, perm));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(keys + c), _mm256_permutevar8x32_epi32(k, perm));
  }
  c += static_cast<size_t>(_mm_popcnt_u32(static_cast<unsigned>(m)));
}

// Collects (i, key) for key >= t. Stores up to `cap` of them; returns how many exist in total.
// Blocks of 32 elements: for a top-1% threshold about 3 in 4 blocks hold no candidate and cost
// four compares; the others left-pack each 8-lane group that has one (branch-free within it).
GV_AVX2 size_t collectAtLeast(const float* x, size_t n, uint32_t t, uint32_t* idx, uint32_t* keys,
                              size_t cap) {
  const PackTable& pt = packTable();
  const __m256i tm1 = _mm256_set1_epi32(static_cast<int>(t) - 1);  // key >= t <=> key > t - 1
  size_t c = 0, i = 0;
  for (; i + 32 <= n; i += 32) {
    _mm_prefetch(reinterpret_cast<const char*>(x + i + 1024), _MM_HINT_T0);  // 4 KiB ahead
    _mm_prefetch(reinterpret_cast<const char*>(x + i + 1024 + 16), _MM_HINT_T0);
    const __m256i k0 = absBits(_mm256_loadu_ps(x + i)), k1 = absBits(_mm256_loadu_ps(x + i + 8));
    const __m256i k2 = absBits(_mm256_loadu_ps(x + i + 16)),
                  k3 = absBits(_mm256_loadu_ps(x + i + 24));
    const int m0 = maskAbove(k0, tm1), m1 = maskAbove(k1, tm1), m2 = maskAbove(k2, tm1),
              m3 = maskAbove(k3, tm1);
    if ((m0 | m1 | m2 | m3) == 0) continue;
    if (m0) packLanes(pt, k0, m0, i, idx, keys, c, cap);
    if (m1) packLanes(pt, k1, m1, i + 8, idx, keys, c, cap);
    if (m2) packLanes(pt, k2, m2, i + 16, idx, keys, c, cap);
    if (m3) packLanes(pt, k3, m3, i + 24, idx, keys, c, cap);
  }
  for (; i + 8 <= n; i += 8) {
    const __m256i k = absBits(_mm256_loadu_ps(x + i));
    if (const int m = maskAbove(k, tm1)) packLanes(pt, k, m, i, idx, keys, c, cap);
  }
  for (; i < n; ++i) {
    const uint32_t k = floatBits(x[i]) & 0x7FFFFFFFu;
    if (k >= t) {
      if (c < cap) {
        idx[c] = static_cast<uint32_t>(i);
        keys[c] = k;
      }
      ++c;
    }
  }
  return c;
}

// Writes the top-`k` of the candidates (all keys >= some threshold, in index order) to out.
size_t trimCandidates(const uint32_t* idx, const uint32_t* keys, size_t count, size_t k,
                      uint32_t* scratch, uint32_t* out) {
  std::copy(keys, keys + count, scratch);
  std::nth_element(scratch, scratch + (k - 1), scratch + count, std::greater<uint32_t>());
  const uint32_t t = scratch[k - 1];
  size_t above = 0;
  for (size_t j = 0; j < count; ++j) above += keys[j] > t;
  size_t ties = k - above, c = 0;
  for (size_t j = 0; j < count; ++j) {
    if (keys[j] > t || (keys[j] == t && ties > 0)) {
      if (keys[j] == t) --ties;
      out[c++] = idx[j];
    }
  }
  return c;
}

// Radix select of the k-th largest key: two histogram passes over x.
uint32_t radixKth(const float* x, size_t n, size_t k, uint32_t* hist) {
  std::fill(hist, hist + kHist, 0u);
  for (size_t i = 0; i < n; ++i) ++hist[(floatBits(x[i]) & 0x7FFFFFFFu) >> 16];
  size_t above = 0;
  uint32_t hiBucket = kHist - 1;
  for (;; --hiBucket) {
    if (above + hist[hiBucket] >= k) break;
    above += hist[hiBucket];
  }
  std::fill(hist, hist + kHist, 0u);
  for (size_t i = 0; i < n; ++i) {
    uint32_t key = floatBits(x[i]) & 0x7FFFFFFFu;
    if ((key >> 16) == hiBucket) ++hist[key & 0xFFFFu];
  }
  uint32_t lo = kHist - 1;
  for (;; --lo) {
    if (above + hist[lo] >= k) break;
    above += hist[lo];
  }
  return (hiBucket << 16) | lo;
}

// The output pass of the radix path: every key > t, then ties at t by index, exactly k in all.
size_t emitWithThreshold(const float* x, size_t n, size_t k, uint32_t t, uint32_t* out) {
  size_t above = 0;
  for (size_t i = 0; i < n; ++i) above += (floatBits(x[i]) & 0x7FFFFFFFu) > t;
  size_t ties = k - above, c = 0;
  for (size_t i = 0; i < n && c < k; ++i) {
    uint32_t key = floatBits(x[i]) & 0x7FFFFFFFu;
    if (key > t || (key == t && ties > 0)) {
      if (key == t) --ties;
      out[c++] = static_cast<uint32_t>(i);
    }
  }
  return c;
}

void drawSample(const float* x, size_t n, uint64_t key, uint32_t* sample) {
  const size_t lines = n / kLine;
  for (size_t l = 0; l < kSampleLines; ++l) {
    const size_t start = (hash32(key, static_cast<uint32_t>(l)) % lines) * kLine;
    for (size_t j = 0; j < kLine; ++j)
      sample[l * kLine + j] = floatBits(x[start + j]) & 0x7FFFFFFFu;
  }
}

// The key at rank `r` (0 = largest) of the sample; reorders the sample.
uint32_t sampleRank(uint32_t* sample, size_t r) {
  r = std::min(r, kSample - 1);
  std::nth_element(sample, sample + r, sample + kSample, std::greater<uint32_t>());
  return sample[r];
}

TopkStats exactLarge(const float* x, size_t n, size_t k, const TopkWorkspace& w, uint64_t key,
                     uint32_t* out, bool sampleDrawn, int passes) {
  TopkStats s;
  if (!sampleDrawn) drawSample(x, n, key, w.sample);
  const double r = static_cast<double>(k) / static_cast<double>(n) * kSample;
  const uint32_t t = sampleRank(w.sample, static_cast<size_t>(r + 4.0 * std::sqrt(r) + 32.0));
  const size_t count = collectAtLeast(x, n, t, w.candIdx, w.candKey, w.capacity);
  s.passes = passes + 1;
  if (count >= k && count <= w.capacity) {
    s.count = trimCandidates(w.candIdx, w.candKey, count, k, w.scratch, out);
    return s;
  }
  s.count = emitWithThreshold(x, n, k, radixKth(x, n, k, w.hist), out);
  s.passes += 4;  // two histograms, one count, one emit
  return s;
}

}  // namespace

size_t topkWorkspaceBytes(size_t n, size_t k) {
  const size_t cap = candidateCapacity(n, k);
  const size_t sample = std::max(kSample, n <= kSmallN ? n : 0);
  return (sample + 3 * cap + 16 + kHist) * sizeof(uint32_t);
}

TopkStats topkSelect(const float* x, size_t n, size_t k, Selector selector, double slack,
                     uint64_t key, void* workspace, uint32_t* indices) {
  TopkStats s;
  if (k >= n) {
    for (size_t i = 0; i < n; ++i) indices[i] = static_cast<uint32_t>(i);
    s.count = n;
    s.passes = 1;
    return s;
  }
  if (k == 0) return s;
  const TopkWorkspace w = carve(workspace, n, k);
  if (n <= kSmallN) {  // small: all keys are candidates
    for (size_t i = 0; i < n; ++i) {
      w.candIdx[i] = static_cast<uint32_t>(i);
      w.candKey[i] = floatBits(x[i]) & 0x7FFFFFFFu;
    }
    s.count = trimCandidates(w.candIdx, w.candKey, n, k, w.scratch, indices);
    s.passes = 1;
    return s;
  }
  if (selector == Selector::kExact) return exactLarge(x, n, k, w, key, indices, false, 0);

  drawSample(x, n, key, w.sample);
  const double r = static_cast<double>(k) / static_cast<double>(n) * kSample * (1.0 + slack / 2);
  const uint32_t t = sampleRank(w.sample, static_cast<size_t>(std::llround(r)));
  const size_t count = collectAtLeast(x, n, t, w.candIdx, w.candKey, w.capacity);
  const double kd = static_cast<double>(k);
  const size_t maxCount = topkMaxCount(n, k, selector, slack);
  if (count <= maxCount && static_cast<double>(count) >= kd * (1.0 - slack)) {
    std::copy(w.candIdx, w.candIdx + count, indices);
    s.count = count;
    s.passes = 1;
  } else if (count > maxCount && count <= w.capacity) {
    s.count = trimCandidates(w.candIdx, w.candKey, count, k, w.scratch, indices);
    s.passes = 1;
  } else {
    s = exactLarge(x, n, k, w, key, indices, true, 1);
  }
  s.countError = (static_cast<double>(s.count) - kd) / kd;
  return s;
}

// ---- CRC32C: three independent streams per block, joined with a table ----
// The CRC instruction's latency is three cycles and it issues one per cycle, so one dependent
// chain runs at a third of its speed. A block of 3 * kCrcLane bytes is split in three lanes A, B,
// C whose raw (uninverted) registers run side by side, the first from the running value, the
// others from 0. The raw register is linear in (register, data) over GF(2), so
// raw(c, A B C) = Z(Z(raw(c, A)) ^ raw(0, B)) ^ raw(0, C), Z the map "feed kCrcLane zero bytes":
// linear on 32 bits, applied as four byte-indexed tables built once from its images of the 32
// unit vectors.
constexpr size_t kCrcLane = 4096;

struct CrcShiftTable {
  uint32_t byByte[4][256];
};

GV_SSE42 uint32_t crcZeros(uint32_t c, size_t bytes) {
  uint64_t r = c;
  for (size_t i = 0; i < bytes; i += 8) r = _mm_crc32_u64(r, 0);
  return static_cast<uint32_t>(r);
}

GV_SSE42 CrcShiftTable makeCrcShiftTable() {
  uint32_t unit[32];
  for (int b = 0; b < 32; ++b) unit[b] = crcZeros(uint32_t{1} << b, kCrcLane);
  CrcShiftTable t{};
  for (int byte = 0; byte < 4; ++byte) {
    for (uint32_t v = 0; v < 256; ++v) {
      uint32_t z = 0;
      for (int bit = 0; bit < 8; ++bit) {
        if (v & (1u << bit)) z ^= unit[8 * byte + bit];
      }
      t.byByte[byte][v] = z;
    }
  }
  return t;
}

inline uint32_t crcShiftLane(const CrcShiftTable& t, uint32_t c) {
  return t.byByte[0][c & 0xFF] ^ t.byByte[1][(c >> 8) & 0xFF] ^ t.byByte[2][(c >> 16) & 0xFF] ^
         t.byByte[3][c >> 24];
}

GV_SSE42 uint32_t crc32c(uint32_t crc, const uint8_t* data, size_t n) {
  uint64_t c = ~crc;
  size_t i = 0;
  if (n >= 3 * kCrcLane) {
    static const CrcShiftTable shift = makeCrcShiftTable();
    for (; i + 3 * kCrcLane <= n; i += 3 * kCrcLane) {
      const uint8_t* a = data + i;
      uint64_t c1 = 0, c2 = 0;
      for (size_t k = 0; k < kCrcLane; k += 8) {
        uint64_t va, vb, vc;
        std::memcpy(&va, a + k, 8);
        std::memcpy(&vb, a + kCrcLane + k, 8);
        std::memcpy(&vc, a + 2 * kCrcLane + k, 8);
        c = _mm_crc32_u64(c, va);
        c1 = _mm_crc32_u64(c1, vb);
        c2 = _mm_crc32_u64(c2, vc);
      }
      const uint32_t ab = crcShiftLane(shift, static_cast<uint32_t>(c)) ^ static_cast<uint32_t>(c1);
      c = crcShiftLane(shift, ab) ^ static_cast<uint32_t>(c2);
    }
  }
  for (; i + 8 <= n; i += 8) {
    uint64_t v;
    std::memcpy(&v, data + i, 8);
    c = _mm_crc32_u64(c, v);
  }
  uint32_t c32 = static_cast<uint32_t>(c);
  for (; i < n; ++i) c32 = _mm_crc32_u8(c32, data[i]);
  return ~c32;
}

// ---- Dense gossip passes: double accumulators in 8 lanes (lo: elements 0-3, hi: 4-7 of each 8),
// spilled for the scalar tail so that element k still lands in lane k % 8 ----

GV_AVX2 inline void spillLanes(__m256d lo, __m256d hi, double* l) {
  _mm256_storeu_pd(l, lo);
  _mm256_storeu_pd(l + 4, hi);
}

GV_AVX2 double subtractSquares(const float* x, const float* y, float* out, size_t n) {
  __m256d a0 = _mm256_setzero_pd(), a1 = a0;
  size_t k = 0;
  for (; k + 8 <= n; k += 8) {
    const __m256 d = _mm256_sub_ps(_mm256_loadu_ps(x + k), _mm256_loadu_ps(y + k));
    _mm256_storeu_ps(out + k, d);
    const __m256d lo = lowHalfPd(d), hi = highHalfPd(d);
    a0 = _mm256_add_pd(a0, _mm256_mul_pd(lo, lo));
    a1 = _mm256_add_pd(a1, _mm256_mul_pd(hi, hi));
  }
  double l[8];
  spillLanes(a0, a1, l);
  for (; k < n; ++k) {
    out[k] = x[k] - y[k];
    const double v = out[k];
    l[k % 8] += v * v;
  }
  return reduceLanes8(l);
}

GV_AVX2 DistanceAndNorm distanceAndNorm(const float* x, const float* y, size_t n) {
  __m256d d0 = _mm256_setzero_pd(), d1 = d0, n0 = d0, n1 = d0;
  size_t k = 0;
  for (; k + 8 <= n; k += 8) {
    const __m256 vx = _mm256_loadu_ps(x + k), vy = _mm256_loadu_ps(y + k);
    const __m256d ylo = lowHalfPd(vy), yhi = highHalfPd(vy);
    const __m256d lo = _mm256_sub_pd(lowHalfPd(vx), ylo);
    const __m256d hi = _mm256_sub_pd(highHalfPd(vx), yhi);
    d0 = _mm256_add_pd(d0, _mm256_mul_pd(lo, lo));
    d1 = _mm256_add_pd(d1, _mm256_mul_pd(hi, hi));
    n0 = _mm256_add_pd(n0, _mm256_mul_pd(ylo, ylo));
    n1 = _mm256_add_pd(n1, _mm256_mul_pd(yhi, yhi));
  }
  double ld[8], ln[8];
  spillLanes(d0, d1, ld);
  spillLanes(n0, n1, ln);
  for (; k < n; ++k) {
    const double yk = y[k];
    const double d = static_cast<double>(x[k]) - yk;
    ld[k % 8] += d * d;
    ln[k % 8] += yk * yk;
  }
  return {reduceLanes8(ld), reduceLanes8(ln)};
}

// One tile of mixDifferences: t[k] = sum_i c_i (r_i[k] - y[k]) in double, the squared distances
// into the lanes a0/a1 (the tile's last m % 8 elements through l, in the reference's order).
GV_AVX2 void mixTile(const float* y, const MixTerm* terms, size_t count, size_t k0, size_t m,
                     double* t, double* yd, __m256d& a0, __m256d& a1) {
  const size_t m8 = m - m % 8;
  size_t k = 0;
  for (; k < m8; k += 8) {
    const __m256 vy = _mm256_loadu_ps(y + k0 + k);
    _mm256_store_pd(yd + k, lowHalfPd(vy));
    _mm256_store_pd(yd + k + 4, highHalfPd(vy));
    _mm256_store_pd(t + k, _mm256_setzero_pd());
    _mm256_store_pd(t + k + 4, _mm256_setzero_pd());
  }
  for (; k < m; ++k) {
    yd[k] = y[k0 + k];
    t[k] = 0.0;
  }
  for (size_t i = 0; i < count; ++i) {
    const float* r = terms[i].replica + k0;
    const __m256d c = _mm256_set1_pd(terms[i].coefficient);
    const __m256d w = _mm256_set1_pd(terms[i].weight);
    for (k = 0; k < m8; k += 8) {
      const __m256 vr = _mm256_loadu_ps(r + k);
      const __m256d lo = _mm256_sub_pd(lowHalfPd(vr), _mm256_load_pd(yd + k));
      const __m256d hi = _mm256_sub_pd(highHalfPd(vr), _mm256_load_pd(yd + k + 4));
      _mm256_store_pd(t + k, _mm256_add_pd(_mm256_load_pd(t + k), _mm256_mul_pd(c, lo)));
      _mm256_store_pd(t + k + 4, _mm256_add_pd(_mm256_load_pd(t + k + 4), _mm256_mul_pd(c, hi)));
      a0 = _mm256_add_pd(a0, _mm256_mul_pd(_mm256_mul_pd(w, lo), lo));
      a1 = _mm256_add_pd(a1, _mm256_mul_pd(_mm256_mul_pd(w, hi), hi));
    }
    if (m8 < m) {  // the model's last elements
      double l[8];
      spillLanes(a0, a1, l);
      for (k = m8; k < m; ++k) {
        const double d = static_cast<double>(r[k]) - yd[k];
        t[k] += terms[i].coefficient * d;
        l[(k0 + k) % 8] += (terms[i].weight * d) * d;
      }
      a0 = _mm256_loadu_pd(l);
      a1 = _mm256_loadu_pd(l + 4);
    }
  }
}

// weightedSum: the reference's tiles and order, four doubles per vector (mul then add: no FMA).
GV_AVX2 void weightedSum(float* x, const float* a, double wa, const float* b, double wb,
                         const MixTerm* terms, size_t count, size_t n) {
  alignas(32) double t[reference::kMixTile];
  const __m256d va = _mm256_set1_pd(wa), vb = _mm256_set1_pd(wb);
  for (size_t k0 = 0; k0 < n; k0 += reference::kMixTile) {
    const size_t m = std::min(reference::kMixTile, n - k0);
    const size_t m8 = m - m % 8;
    for (size_t k = 0; k < m8; k += 8) {
      const __m256 v = _mm256_loadu_ps(a + k0 + k);
      __m256d lo = _mm256_mul_pd(va, lowHalfPd(v)), hi = _mm256_mul_pd(va, highHalfPd(v));
      if (b != nullptr) {
        const __m256 w = _mm256_loadu_ps(b + k0 + k);
        lo = _mm256_add_pd(lo, _mm256_mul_pd(vb, lowHalfPd(w)));
        hi = _mm256_add_pd(hi, _mm256_mul_pd(vb, highHalfPd(w)));
      }
      _mm256_store_pd(t + k, lo);
      _mm256_store_pd(t + k + 4, hi);
    }
    for (size_t k = m8; k < m; ++k) {
      t[k] = wa * static_cast<double>(a[k0 + k]);
      if (b != nullptr) t[k] += wb * static_cast<double>(b[k0 + k]);
    }
    for (size_t i = 0; i < count; ++i) {
      const float* r = terms[i].replica + k0;
      const double ci = terms[i].coefficient;
      const __m256d c = _mm256_set1_pd(ci);
      for (size_t k = 0; k < m8; k += 8) {
        const __m256 v = _mm256_loadu_ps(r + k);
        _mm256_store_pd(t + k,
                        _mm256_add_pd(_mm256_load_pd(t + k), _mm256_mul_pd(c, lowHalfPd(v))));
        _mm256_store_pd(t + k + 4,
                        _mm256_add_pd(_mm256_load_pd(t + k + 4), _mm256_mul_pd(c, highHalfPd(v))));
      }
      for (size_t k = m8; k < m; ++k) t[k] += ci * static_cast<double>(r[k]);
    }
    float* xx = x + k0;
    for (size_t k = 0; k < m8; k += 8) {
      const __m128 lo = _mm256_cvtpd_ps(_mm256_load_pd(t + k));
      const __m128 hi = _mm256_cvtpd_ps(_mm256_load_pd(t + k + 4));
      _mm256_storeu_ps(xx + k, _mm256_set_m128(hi, lo));
    }
    for (size_t k = m8; k < m; ++k) xx[k] = static_cast<float>(t[k]);
  }
}

GV_AVX2 double mixDifferences(float* x, const float* y, const MixTerm* terms, size_t count,
                              size_t n) {
  if (count == 0) return 0.0;
  alignas(32) double t[reference::kMixTile];
  alignas(32) double yd[reference::kMixTile];
  __m256d a0 = _mm256_setzero_pd(), a1 = a0;
  for (size_t k0 = 0; k0 < n; k0 += reference::kMixTile) {
    const size_t m = std::min(reference::kMixTile, n - k0);
    const size_t m8 = m - m % 8;
    mixTile(y, terms, count, k0, m, t, yd, a0, a1);
    float* xx = x + k0;
    size_t k = 0;
    for (; k < m8; k += 8) {
      const __m256 vx = _mm256_loadu_ps(xx + k);
      const __m128 lo = _mm256_cvtpd_ps(_mm256_add_pd(lowHalfPd(vx), _mm256_load_pd(t + k)));
      const __m128 hi = _mm256_cvtpd_ps(_mm256_add_pd(highHalfPd(vx), _mm256_load_pd(t + k + 4)));
      _mm256_storeu_ps(xx + k, _mm256_set_m128(hi, lo));
    }
    for (; k < m; ++k) xx[k] = static_cast<float>(xx[k] + t[k]);
  }
  double l[8];
  spillLanes(a0, a1, l);
  return reduceLanes8(l);
}

// ---- Optimizer steps: the reference's expressions, 8 at a time, each operation rounded as
// there (no FMA; vsqrtps and vdivps are IEEE); the tail goes to the reference ----

GV_AVX2 void sgdDirection(const float* g, const float* x, float* m, float* u, size_t n,
                          SgdStep step) {
  const __m256 beta = _mm256_set1_ps(step.beta), wd = _mm256_set1_ps(step.weightDecay);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 gi =
        _mm256_add_ps(_mm256_loadu_ps(g + i), _mm256_mul_ps(wd, _mm256_loadu_ps(x + i)));
    switch (step.momentum) {
      case SgdMomentum::kNone:
        _mm256_storeu_ps(u + i, gi);
        break;
      case SgdMomentum::kLocal:
      case SgdMomentum::kLocalNesterov: {
        const __m256 mi = _mm256_add_ps(_mm256_mul_ps(beta, _mm256_loadu_ps(m + i)), gi);
        _mm256_storeu_ps(m + i, mi);
        _mm256_storeu_ps(u + i, step.momentum == SgdMomentum::kLocal
                                    ? mi
                                    : _mm256_add_ps(gi, _mm256_mul_ps(beta, mi)));
        break;
      }
      case SgdMomentum::kQuasiGlobal:
        _mm256_storeu_ps(u + i, _mm256_add_ps(gi, _mm256_mul_ps(beta, _mm256_loadu_ps(m + i))));
        break;
      case SgdMomentum::kQuasiGlobalNesterov: {
        const __m256 look = _mm256_add_ps(_mm256_mul_ps(beta, _mm256_loadu_ps(m + i)), gi);
        _mm256_storeu_ps(u + i, _mm256_add_ps(gi, _mm256_mul_ps(beta, look)));
        break;
      }
    }
  }
  reference::sgdDirection(g + i, x + i, m ? m + i : nullptr, u + i, n - i, step);
}

GV_AVX2 void adamwDirection(const float* g, const float* x, float* m, float* v, float* u, size_t n,
                            AdamwStep s) {
  const __m256 b1 = _mm256_set1_ps(s.beta1), b2 = _mm256_set1_ps(s.beta2);
  const __m256 a1 = _mm256_set1_ps(1.0f - s.beta1), a2 = _mm256_set1_ps(1.0f - s.beta2);
  const __m256 c1 = _mm256_set1_ps(s.biasCorrection1), c2 = _mm256_set1_ps(s.biasCorrection2);
  const __m256 eps = _mm256_set1_ps(s.eps), wd = _mm256_set1_ps(s.weightDecay);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 gi = _mm256_loadu_ps(g + i);
    const __m256 mi =
        _mm256_add_ps(_mm256_mul_ps(b1, _mm256_loadu_ps(m + i)), _mm256_mul_ps(a1, gi));
    const __m256 vi = _mm256_add_ps(_mm256_mul_ps(b2, _mm256_loadu_ps(v + i)),
                                    _mm256_mul_ps(_mm256_mul_ps(a2, gi), gi));
    _mm256_storeu_ps(m + i, mi);
    _mm256_storeu_ps(v + i, vi);
    const __m256 denom = _mm256_add_ps(_mm256_sqrt_ps(_mm256_div_ps(vi, c2)), eps);
    const __m256 step = _mm256_div_ps(_mm256_div_ps(mi, c1), denom);
    _mm256_storeu_ps(u + i, _mm256_add_ps(step, _mm256_mul_ps(wd, _mm256_loadu_ps(x + i))));
  }
  reference::adamwDirection(g + i, x + i, m + i, v + i, u + i, n - i, s);
}

GV_AVX2 void momentumFromChange(const float* before, const float* after, float* m, size_t n,
                                float beta, float invLrSum) {
  const __m256 b = _mm256_set1_ps(beta), a = _mm256_set1_ps(1.0f - beta);
  const __m256 inv = _mm256_set1_ps(invLrSum);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 d =
        _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(before + i), _mm256_loadu_ps(after + i)), inv);
    _mm256_storeu_ps(m + i,
                     _mm256_add_ps(_mm256_mul_ps(b, _mm256_loadu_ps(m + i)), _mm256_mul_ps(a, d)));
  }
  reference::momentumFromChange(before + i, after + i, m + i, n - i, beta, invLrSum);
}

}  // namespace grapevine::kernels::avx2

namespace grapevine::kernels {

namespace {
struct Dispatch {
  Ops ops;
  std::string features;
};

Dispatch makeDispatch() {
  Dispatch d{referenceOps(), ""};
  d.ops.name = "cpu";
  __builtin_cpu_init();
  // F16C from CPUID leaf 1, ECX bit 29: clang 14's __builtin_cpu_supports does not know "f16c".
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C) != 0;
  const bool avx2 = __builtin_cpu_supports("avx2") && f16c && __builtin_cpu_supports("popcnt") &&
                    __builtin_cpu_supports("bmi") && __builtin_cpu_supports("sse4.2");
  const bool sse42 = __builtin_cpu_supports("sse4.2");
  if (avx2) {
    namespace v = avx2;
    d.ops.maxAbs = v::maxAbs;
    d.ops.maxAbsDiff = v::maxAbsDiff;
    d.ops.sumSquares = v::sumSquares;
    d.ops.dot = v::dot;
    d.ops.allFinite = v::allFinite;
    d.ops.allFiniteHalf = v::allFiniteHalf;
    d.ops.allFiniteBf16 = v::allFiniteBf16;
    d.ops.axpy = v::axpy;
    d.ops.add = v::add;
    d.ops.toHalf = v::toHalf;
    d.ops.halfAccumulate = v::halfAccumulate;
    d.ops.toBf16 = v::toBf16;
    d.ops.bf16Accumulate = v::bf16Accumulate;
    d.ops.quantizeBlocks = v::quantizeBlocks;
    d.ops.dequantizeAccumulate = v::dequantizeAccumulate;
    d.ops.signPack = v::signPack;
    d.ops.signAccumulate = v::signAccumulate;
    d.ops.topkWorkspaceBytes = v::topkWorkspaceBytes;
    d.ops.topkSelect = v::topkSelect;
    d.ops.subtractSquares = v::subtractSquares;
    d.ops.weightedSum = v::weightedSum;
    d.ops.distanceAndNorm = v::distanceAndNorm;
    d.ops.mixDifferences = v::mixDifferences;
    d.ops.sgdDirection = v::sgdDirection;
    d.ops.adamwDirection = v::adamwDirection;
    d.ops.momentumFromChange = v::momentumFromChange;
    d.features = "avx2+f16c";
  } else {
    d.features = "scalar";
  }
  if (sse42) {
    d.ops.crc32c = avx2::crc32c;
    d.features += "+sse4.2-crc32c";
  }
  return d;
}

const Dispatch& dispatch() {
  static const Dispatch d = makeDispatch();
  return d;
}
}  // namespace

const Ops& cpuOps() { return dispatch().ops; }
std::string_view cpuFeatures() { return dispatch().features; }

}  // namespace grapevine::kernels
