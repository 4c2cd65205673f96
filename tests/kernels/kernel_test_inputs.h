// Seeded inputs and bit comparisons shared by the kernel tests (CPU tables and the CUDA table).
#pragma once

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

namespace grapevine::kernels::testing {

inline std::vector<float> gaussian(size_t n, uint32_t seed, float sigma = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, sigma);
  std::vector<float> x(n);
  for (auto& v : x) v = d(rng);
  return x;
}

inline bool sameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * 4) == 0);
}

}  // namespace grapevine::kernels::testing
