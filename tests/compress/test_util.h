// Helpers shared by the compress tests.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "compress/compressor.h"

namespace grapevine::compress::testing {

inline std::vector<float> gaussian(size_t n, uint32_t seed, float sigma = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, sigma);
  std::vector<float> x(n);
  for (auto& v : x) v = d(rng);
  return x;
}

inline double sq(const std::vector<float>& a) {
  double s = 0;
  for (float v : a) s += static_cast<double>(v) * v;
  return s;
}

inline double sqDiff(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = static_cast<double>(a[i]) - b[i];
    s += d * d;
  }
  return s;
}

// Encodes x with c and decodes into a zero vector: returns C(x) (payload bytes in *bytes).
inline std::vector<float> roundTrip(Compressor& c, const std::vector<float>& x, uint64_t key,
                                    size_t* bytes = nullptr) {
  std::vector<uint64_t> buf((c.maxEncodedBytes(x.size()) + 7) / 8 + 1);
  std::span<uint8_t> out(reinterpret_cast<uint8_t*>(buf.data()), buf.size() * 8);
  auto n = c.encode(x, key, out);
  REQUIRE(n.isOk());
  REQUIRE(*n <= c.maxEncodedBytes(x.size()));
  if (bytes) *bytes = *n;
  std::vector<float> y(x.size(), 0.0f);
  Status st = c.decodeAccumulate(out.first(*n), 1.0f, y);
  INFO(st.toString());
  REQUIRE(st.isOk());
  return y;
}

}  // namespace grapevine::compress::testing
