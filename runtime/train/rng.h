// Small, portable, seeded random numbers for the training workloads.
//
// Why not <random>: the standard distributions are implementation-defined, so the same seed could
// give different shards or initial models under another standard library. Everything here is
// specified bit for bit (xoshiro256** seeded through SplitMix64; Box-Muller normals;
// Marsaglia-Tsang gammas), so every peer (and every platform) derives the same values from the same
// seed. Not thread-safe: one Rng per thread/peer.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <numbers>
#include <span>
#include <utility>

#include "runtime/common/random_bits.h"

namespace grapevine::train {

// SplitMix64 step: a good 64-bit mixer, used to derive seeds and stream keys.
inline std::uint64_t splitMix64(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// Derives an independent stream key from a seed and up to three integers (rank, step, purpose).
inline std::uint64_t deriveSeed(std::uint64_t seed, std::uint64_t a, std::uint64_t b = 0,
                                std::uint64_t c = 0) {
  std::uint64_t s = seed;
  std::uint64_t h = splitMix64(s);
  for (std::uint64_t v : {a, b, c}) {
    s = h ^ (v + 0x632be59bd9b4e019ULL);
    h = splitMix64(s);
  }
  return h;
}

class Rng {
 public:
  explicit Rng(std::uint64_t seed) {
    for (auto& w : s_) w = splitMix64(seed);
  }

  std::uint64_t next() {
    const std::uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const std::uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }

  // Uniform in [0, 1) with 53 random bits.
  double uniform() { return unitInterval(next()); }
  // Uniform in (0, 1]: safe for log().
  double uniformPositive() { return 1.0 - uniform(); }

  // Uniform integer in [0, n), unbiased (Lemire's multiply-and-reject). n > 0.
  std::uint64_t below(std::uint64_t n) {
    unsigned __int128 m = static_cast<unsigned __int128>(next()) * n;
    auto low = static_cast<std::uint64_t>(m);
    if (low < n) {
      const std::uint64_t threshold = (0 - n) % n;
      while (low < threshold) {
        m = static_cast<unsigned __int128>(next()) * n;
        low = static_cast<std::uint64_t>(m);
      }
    }
    return static_cast<std::uint64_t>(m >> 64);
  }

  // Standard normal (Box-Muller; the second value is cached).
  double normal() {
    if (haveSpare_) {
      haveSpare_ = false;
      return spare_;
    }
    const double r = std::sqrt(-2.0 * std::log(uniformPositive()));
    const double theta = 2.0 * std::numbers::pi * uniform();
    spare_ = r * std::sin(theta);
    haveSpare_ = true;
    return r * std::cos(theta);
  }

  // Gamma(shape, 1), shape > 0 (Marsaglia-Tsang; boosted for shape < 1).
  double gamma(double shape) {
    if (shape < 1.0) {
      const double u = uniformPositive();
      return gamma(shape + 1.0) * std::pow(u, 1.0 / shape);
    }
    const double d = shape - 1.0 / 3.0;
    const double c = 1.0 / std::sqrt(9.0 * d);
    for (;;) {
      double x;
      double v;
      do {
        x = normal();
        v = 1.0 + c * x;
      } while (v <= 0.0);
      v = v * v * v;
      const double u = uniformPositive();
      if (u < 1.0 - 0.0331 * x * x * x * x) return d * v;
      if (std::log(u) < 0.5 * x * x + d * (1.0 - v + std::log(v))) return d * v;
    }
  }

  // Fisher-Yates shuffle.
  template <typename T>
  void shuffle(std::span<T> items) {
    for (std::size_t i = items.size(); i > 1; --i) {
      const std::size_t j = static_cast<std::size_t>(below(i));
      std::swap(items[i - 1], items[j]);
    }
  }

 private:
  static std::uint64_t rotl(std::uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

  std::uint64_t s_[4];
  double spare_ = 0.0;
  bool haveSpare_ = false;
};

}  // namespace grapevine::train
