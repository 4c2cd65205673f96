#include "runtime/algorithms/dense_passes.h"

#include <immintrin.h>

#include <algorithm>

#define GV_AVX2 __attribute__((target("avx2")))

namespace grapevine::algorithms::passes {
namespace {

// Mix tiles: the partial sums and the own copy of one tile in double stay in L1 while each replica
// streams through once.
constexpr std::size_t kTile = 1024;

double combine(const double* l) {
  return ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]));
}

GV_AVX2 void spill(__m256d lo, __m256d hi, double* l) {
  _mm256_storeu_pd(l, lo);
  _mm256_storeu_pd(l + 4, hi);
}

GV_AVX2 double subtractAvx2(const float* x, const float* y, float* out, std::size_t n) {
  __m256d a0 = _mm256_setzero_pd(), a1 = a0;
  std::size_t k = 0;
  for (; k + 8 <= n; k += 8) {
    const __m256 d = _mm256_sub_ps(_mm256_loadu_ps(x + k), _mm256_loadu_ps(y + k));
    _mm256_storeu_ps(out + k, d);
    const __m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(d));
    const __m256d hi = _mm256_cvtps_pd(_mm256_extractf128_ps(d, 1));
    a0 = _mm256_add_pd(a0, _mm256_mul_pd(lo, lo));
    a1 = _mm256_add_pd(a1, _mm256_mul_pd(hi, hi));
  }
  double l[8];
  spill(a0, a1, l);
  for (; k < n; ++k) {
    out[k] = x[k] - y[k];
    const double v = out[k];
    l[k % 8] += v * v;
  }
  return combine(l);
}

GV_AVX2 DistanceAndNorm distanceAndNormAvx2(const float* x, const float* y, std::size_t n) {
  __m256d d0 = _mm256_setzero_pd(), d1 = d0, n0 = d0, n1 = d0;
  std::size_t k = 0;
  for (; k + 8 <= n; k += 8) {
    const __m256 vx = _mm256_loadu_ps(x + k), vy = _mm256_loadu_ps(y + k);
    const __m256d ylo = _mm256_cvtps_pd(_mm256_castps256_ps128(vy));
    const __m256d yhi = _mm256_cvtps_pd(_mm256_extractf128_ps(vy, 1));
    const __m256d lo = _mm256_sub_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(vx)), ylo);
    const __m256d hi = _mm256_sub_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(vx, 1)), yhi);
    d0 = _mm256_add_pd(d0, _mm256_mul_pd(lo, lo));
    d1 = _mm256_add_pd(d1, _mm256_mul_pd(hi, hi));
    n0 = _mm256_add_pd(n0, _mm256_mul_pd(ylo, ylo));
    n1 = _mm256_add_pd(n1, _mm256_mul_pd(yhi, yhi));
  }
  double ld[8], ln[8];
  spill(d0, d1, ld);
  spill(n0, n1, ln);
  for (; k < n; ++k) {
    const double yk = y[k];
    const double d = static_cast<double>(x[k]) - yk;
    ld[k % 8] += d * d;
    ln[k % 8] += yk * yk;
  }
  return {combine(ld), combine(ln)};
}

GV_AVX2 double mixAvx2(float* x, const float* y, const MixTerm* terms, std::size_t count,
                       std::size_t n) {
  alignas(32) double t[kTile];
  alignas(32) double yd[kTile];
  __m256d a0 = _mm256_setzero_pd(), a1 = a0;
  for (std::size_t k0 = 0; k0 < n; k0 += kTile) {
    const std::size_t m = std::min(kTile, n - k0);
    const std::size_t m8 = m - m % 8;
    std::size_t k = 0;
    for (; k < m8; k += 8) {
      const __m256 vy = _mm256_loadu_ps(y + k0 + k);
      _mm256_store_pd(yd + k, _mm256_cvtps_pd(_mm256_castps256_ps128(vy)));
      _mm256_store_pd(yd + k + 4, _mm256_cvtps_pd(_mm256_extractf128_ps(vy, 1)));
      _mm256_store_pd(t + k, _mm256_setzero_pd());
      _mm256_store_pd(t + k + 4, _mm256_setzero_pd());
    }
    for (; k < m; ++k) {
      yd[k] = y[k0 + k];
      t[k] = 0.0;
    }
    for (std::size_t i = 0; i < count; ++i) {
      const float* r = terms[i].replica + k0;
      const __m256d c = _mm256_set1_pd(terms[i].coefficient);
      const __m256d w = _mm256_set1_pd(terms[i].weight);
      for (k = 0; k < m8; k += 8) {
        const __m256 vr = _mm256_loadu_ps(r + k);
        const __m256d lo =
            _mm256_sub_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(vr)), _mm256_load_pd(yd + k));
        const __m256d hi = _mm256_sub_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(vr, 1)),
                                         _mm256_load_pd(yd + k + 4));
        _mm256_store_pd(t + k, _mm256_add_pd(_mm256_load_pd(t + k), _mm256_mul_pd(c, lo)));
        _mm256_store_pd(t + k + 4, _mm256_add_pd(_mm256_load_pd(t + k + 4), _mm256_mul_pd(c, hi)));
        a0 = _mm256_add_pd(a0, _mm256_mul_pd(_mm256_mul_pd(w, lo), lo));
        a1 = _mm256_add_pd(a1, _mm256_mul_pd(_mm256_mul_pd(w, hi), hi));
      }
      if (m8 < m) {  // the model's last elements, in the same lanes and order as the portable path
        double l[8];
        spill(a0, a1, l);
        for (k = m8; k < m; ++k) {
          const double d = static_cast<double>(r[k]) - yd[k];
          t[k] += terms[i].coefficient * d;
          l[(k0 + k) % 8] += (terms[i].weight * d) * d;
        }
        a0 = _mm256_loadu_pd(l);
        a1 = _mm256_loadu_pd(l + 4);
      }
    }
    float* xx = x + k0;
    for (k = 0; k < m8; k += 8) {
      const __m256 vx = _mm256_loadu_ps(xx + k);
      const __m128 lo = _mm256_cvtpd_ps(
          _mm256_add_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(vx)), _mm256_load_pd(t + k)));
      const __m128 hi = _mm256_cvtpd_ps(
          _mm256_add_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(vx, 1)), _mm256_load_pd(t + k + 4)));
      _mm256_storeu_ps(xx + k, _mm256_set_m128(hi, lo));
    }
    for (; k < m; ++k) xx[k] = static_cast<float>(xx[k] + t[k]);
  }
  double l[8];
  spill(a0, a1, l);
  return combine(l);
}

bool haveAvx2() {
  static const bool yes = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") != 0;
  }();
  return yes;
}

}  // namespace

namespace portable {

double subtract(std::span<const float> x, std::span<const float> y, std::span<float> out) {
  double l[8] = {};
  for (std::size_t k = 0; k < x.size(); ++k) {
    out[k] = x[k] - y[k];
    const double v = out[k];
    l[k % 8] += v * v;
  }
  return combine(l);
}

DistanceAndNorm distanceAndNorm(std::span<const float> x, std::span<const float> y) {
  double ld[8] = {}, ln[8] = {};
  for (std::size_t k = 0; k < x.size(); ++k) {
    const double yk = y[k];
    const double d = static_cast<double>(x[k]) - yk;
    ld[k % 8] += d * d;
    ln[k % 8] += yk * yk;
  }
  return {combine(ld), combine(ln)};
}

double mixDifferences(std::span<float> x, std::span<const float> y,
                      std::span<const MixTerm> terms) {
  if (terms.empty()) return 0.0;
  double t[kTile], yd[kTile], l[8] = {};
  for (std::size_t k0 = 0; k0 < x.size(); k0 += kTile) {
    const std::size_t m = std::min(kTile, x.size() - k0);
    for (std::size_t k = 0; k < m; ++k) {
      yd[k] = y[k0 + k];
      t[k] = 0.0;
    }
    for (const MixTerm& term : terms) {
      const float* r = term.replica + k0;
      for (std::size_t k = 0; k < m; ++k) {
        const double d = static_cast<double>(r[k]) - yd[k];
        t[k] += term.coefficient * d;
        l[(k0 + k) % 8] += (term.weight * d) * d;
      }
    }
    for (std::size_t k = 0; k < m; ++k) x[k0 + k] = static_cast<float>(x[k0 + k] + t[k]);
  }
  return combine(l);
}

}  // namespace portable

double subtract(std::span<const float> x, std::span<const float> y, std::span<float> out) {
  if (haveAvx2()) return subtractAvx2(x.data(), y.data(), out.data(), x.size());
  return portable::subtract(x, y, out);
}

DistanceAndNorm distanceAndNorm(std::span<const float> x, std::span<const float> y) {
  if (haveAvx2()) return distanceAndNormAvx2(x.data(), y.data(), x.size());
  return portable::distanceAndNorm(x, y);
}

double mixDifferences(std::span<float> x, std::span<const float> y,
                      std::span<const MixTerm> terms) {
  if (terms.empty()) return 0.0;
  if (haveAvx2()) return mixAvx2(x.data(), y.data(), terms.data(), terms.size(), x.size());
  return portable::mixDifferences(x, y, terms);
}

bool vectorized() { return haveAvx2(); }

}  // namespace grapevine::algorithms::passes
