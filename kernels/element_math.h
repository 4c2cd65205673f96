// Element math shared by every kernel implementation (CPU reference, CPU vectorised, and later
// CUDA). These scalar definitions ARE the specification: a vectorised or device kernel must produce
// the same bits for the quantities defined here (the tests compare bit for bit), so change them
// only together with every implementation and with the wire-format version.
//
// Contract: no state, no allocation, no exceptions; everything is a pure function of its arguments.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define GV_HD __host__ __device__
#else
#define GV_HD
#endif

namespace grapevine::kernels {

// ---- Counter-based randomness ------------------------------------------------------------------
// Stochastic rounding and rand-k positions draw from a counter-based hash instead of a sequential
// generator, so element i's random number depends only on (key, i): any implementation, any thread
// split and the receiver all agree without sharing generator state.

GV_HD inline uint32_t fmix32(
    uint32_t h) {  // MurmurHash3 finaliser: a bijection with good avalanche
  h ^= h >> 16;
  h *= 0x85EBCA6Bu;
  h ^= h >> 13;
  h *= 0xC2B2AE35u;
  h ^= h >> 16;
  return h;
}

GV_HD inline uint32_t hash32(uint64_t key, uint32_t i) {
  uint32_t h = fmix32(i ^ static_cast<uint32_t>(key));
  return fmix32(h ^ static_cast<uint32_t>(key >> 32));
}

// Uniform in [0, 1) with 24 random bits: exactly representable, so u + v rounding is the only
// error.
GV_HD inline float uniform01(uint64_t key, uint32_t i) {
  return static_cast<float>(hash32(key, i) >> 8) * 0x1.0p-24f;
}

// SplitMix64 step, used to derive per-frame keys from (seed, sender, round, tensor, chunk).
GV_HD inline uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// ---- Block quantization ------------------------------------------------------------------------
// int8 uses levels [-127, 127], int4 uses [-7, 7] (two's-complement nibbles; -8 is never produced
// but decodes as -8). scale = maxAbs / L travels on the wire; the encoder multiplies by
// inv = L / maxAbs. Both are computed once per block with these functions.

GV_HD inline int quantLevels(int bits) { return bits == 8 ? 127 : 7; }
GV_HD inline float blockScale(float maxAbs, int levels) {
  return maxAbs / static_cast<float>(levels);
}
GV_HD inline float blockInvScale(float maxAbs, int levels) {
  return maxAbs > 0.0f ? static_cast<float>(levels) / maxAbs : 0.0f;
}

// Quantizes one element: nearest rounds half to even (rint); stochastic is floor(v + u).
// The result is clamped to [-L, L] (v may exceed L by an ulp because inv is rounded).
// NaN (from a non-finite block) quantizes to 0; the block's scale is then non-finite and the
// receiver rejects the frame anyway.
GV_HD inline int clampLevel(float v, int levels) {
  if (v != v) return 0;
  float l = static_cast<float>(levels);
  v = v < -l ? -l : (v > l ? l : v);
  return static_cast<int>(v);
}
GV_HD inline int quantizeNearest(float x, float inv, int levels) {
  return clampLevel(std::rint(x * inv), levels);
}
GV_HD inline int quantizeStochastic(float x, float inv, int levels, float u) {
  float p = x * inv;
  return clampLevel(std::floor(p + u), levels);
}

// ---- Fixed-order block sums --------------------------------------------------------------------
// The sign method's scale is mean|x| over a block. Float sums depend on order, so the order is part
// of the contract: element j of the block goes to lane j % 8, then lanes reduce as
// ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)). This matches an 8-wide SIMD accumulator exactly.
template <typename T>  // float (the sign scales) or double (the dense gossip passes' sums)
GV_HD inline T reduceLanes8(const T l[8]) {
  return ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]));
}

// ---- Half precision ----------------------------------------------------------------------------
// IEEE binary16 with round-to-nearest-even, saturating at +-65504 (the encoder saturates before
// converting, so a finite input never becomes inf). NaN stays NaN.
inline constexpr float kHalfMax = 65504.0f;

GV_HD inline uint32_t floatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
GV_HD inline float bitsFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

GV_HD inline uint16_t floatToHalf(float f) {
  // Saturate finite values first (comparisons are false for NaN, which passes through).
  if (f > kHalfMax) f = kHalfMax;
  if (f < -kHalfMax) f = -kHalfMax;
  uint32_t x = floatBits(f);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t absx = x & 0x7FFFFFFFu;
  if (absx > 0x7F800000u) return static_cast<uint16_t>(sign | 0x7E00u | ((absx >> 13) & 0x3FFu));
  if (absx >= 0x38800000u) {  // normal half range (>= 2^-14)
    uint32_t mant = absx & 0x7FFFFFu;
    uint32_t exp = (absx >> 23) - 112;  // rebias 127 -> 15
    uint32_t h = (exp << 10) | (mant >> 13);
    uint32_t rest = mant & 0x1FFFu;                            // 13 dropped bits
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;  // may carry into the exponent: fine
    return static_cast<uint16_t>(sign | h);
  }
  if (absx < 0x33000000u)
    return static_cast<uint16_t>(sign);  // below half of the smallest subnormal
  // Subnormal half: value = m * 2^-24.
  uint32_t exp = absx >> 23;
  uint32_t mant = (absx & 0x7FFFFFu) | 0x800000u;
  uint32_t shift = 126 - exp;  // 14..24 for exp in [102, 112]
  uint32_t h = mant >> shift;
  uint32_t rest = mant & ((1u << shift) - 1u);
  uint32_t half = 1u << (shift - 1);
  if (rest > half || (rest == half && (h & 1u))) ++h;
  return static_cast<uint16_t>(sign | h);
}

GV_HD inline float halfToFloat(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1Fu;
  uint32_t mant = h & 0x3FFu;
  if (exp == 0x1Fu) return bitsFloat(sign | 0x7F800000u | (mant << 13));
  if (exp != 0) return bitsFloat(sign | ((exp + 112) << 23) | (mant << 13));
  // Subnormal or zero: exact in float.
  float v = static_cast<float>(mant) * 0x1.0p-24f;
  return sign ? -v : v;
}

// bfloat16: the top 16 bits of a float, round-to-nearest-even; saturates at the largest finite
// bf16.
inline constexpr uint32_t kBf16MaxBits = 0x7F7F0000u;
GV_HD inline uint16_t floatToBf16(float f) {
  uint32_t x = floatBits(f);
  uint32_t absx = x & 0x7FFFFFFFu;
  if (absx > 0x7F800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // quiet NaN
  if (absx >= 0x7F7F8000u) return static_cast<uint16_t>(((x & 0x80000000u) | kBf16MaxBits) >> 16);
  uint32_t lsb = (x >> 16) & 1u;
  return static_cast<uint16_t>((x + 0x7FFFu + lsb) >> 16);
}
GV_HD inline float bf16ToFloat(uint16_t b) { return bitsFloat(static_cast<uint32_t>(b) << 16); }

}  // namespace grapevine::kernels
