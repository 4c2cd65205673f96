// The vectorised CPU table against the reference table (the oracle) on seeded inputs of awkward
// sizes. Wire-relevant outputs must match bit for bit (ops.h); reductions within rounding.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/element_math.h"
#include "kernels/ops.h"
#include "tests/kernels/kernel_test_inputs.h"

using namespace grapevine::kernels;

namespace {

const std::vector<size_t> kSizes = {0, 1, 7, 8, 63, 64, 65, 127, 128, 255, 1000, 4096, 4097, 10007};

using testing::gaussian;
using testing::sameBits;

const Ops& ref() { return referenceOps(); }
const Ops& vec() { return cpuOps(); }

}  // namespace

TEST_CASE("cpu table reports its features", "[kernels]") {
  INFO("features: " << cpuFeatures());
  CHECK(vec().name == "cpu");
  CHECK(!cpuFeatures().empty());
}

TEST_CASE("reductions match the reference", "[kernels]") {
  for (size_t n : kSizes) {
    auto x = gaussian(n, 1 + static_cast<uint32_t>(n));
    auto y = gaussian(n, 2 + static_cast<uint32_t>(n));
    INFO("n=" << n);
    CHECK(floatBits(vec().maxAbs(x.data(), n)) == floatBits(ref().maxAbs(x.data(), n)));
    CHECK(floatBits(vec().maxAbsDiff(x.data(), y.data(), n)) ==
          floatBits(ref().maxAbsDiff(x.data(), y.data(), n)));
    {  // the definition: max |x - y| with the difference in float
      float want = 0.0f;
      for (size_t k = 0; k < n; ++k) want = std::max(want, std::fabs(x[k] - y[k]));
      CHECK(ref().maxAbsDiff(x.data(), y.data(), n) == want);
    }
    CHECK(vec().sumSquares(x.data(), n) == Approx(ref().sumSquares(x.data(), n)).epsilon(1e-12));
    CHECK(vec().dot(x.data(), y.data(), n) ==
          Approx(ref().dot(x.data(), y.data(), n)).epsilon(1e-12).margin(1e-12));
    CHECK(vec().allFinite(x.data(), n));
    if (n > 0) {
      auto z = x;
      z[n - 1] = std::numeric_limits<float>::infinity();
      CHECK_FALSE(vec().allFinite(z.data(), n));
      CHECK_FALSE(ref().allFinite(z.data(), n));
      CHECK(vec().maxAbsDiff(z.data(), x.data(), n) == std::numeric_limits<float>::infinity());
      z[n / 2] = std::nanf("");
      CHECK(std::isnan(vec().maxAbs(z.data(), n)));
      CHECK(floatBits(vec().maxAbs(z.data(), n)) == floatBits(ref().maxAbs(z.data(), n)));
      CHECK(std::isnan(vec().maxAbsDiff(z.data(), x.data(), n)));
      CHECK(std::isnan(vec().maxAbsDiff(x.data(), z.data(), n)));
    }
  }
}

TEST_CASE("axpy and add match bit for bit", "[kernels]") {
  for (size_t n : kSizes) {
    auto x = gaussian(n, 3), y1 = gaussian(n, 4), y2 = y1;
    ref().axpy(0.37f, x.data(), y1.data(), n);
    vec().axpy(0.37f, x.data(), y2.data(), n);
    CHECK(sameBits(y1, y2));
    std::vector<float> o1(n), o2(n);
    ref().add(x.data(), y1.data(), o1.data(), n);
    vec().add(x.data(), y1.data(), o2.data(), n);
    CHECK(sameBits(o1, o2));
  }
}

TEST_CASE("half and bfloat16 conversions match bit for bit", "[kernels]") {
  for (size_t n : kSizes) {
    auto x = gaussian(n, 5, 3.0f);
    // Awkward values: overflow, subnormal halves, exact ties, zeros of both signs.
    const float special[] = {
        1e6f,  -1e6f, 65504.0f, 65520.0f,          6e-8f,   3e-8f,     -2.98e-8f,
        1e-5f, 0.0f,  -0.0f,    1.0f + 0x1.0p-11f, 3.4e38f, -3.39e38f, 1e-40f};
    for (size_t i = 0; i < n && i < std::size(special); ++i) x[i * 7 % n] = special[i];
    std::vector<uint16_t> h1(n), h2(n), b1(n), b2(n);
    ref().toHalf(x.data(), n, h1.data());
    vec().toHalf(x.data(), n, h2.data());
    CHECK(h1 == h2);
    ref().toBf16(x.data(), n, b1.data());
    vec().toBf16(x.data(), n, b2.data());
    CHECK(b1 == b2);
    CHECK(vec().allFiniteHalf(h1.data(), n));
    CHECK(vec().allFiniteBf16(b1.data(), n));
    auto acc1 = gaussian(n, 6), acc2 = acc1;
    ref().halfAccumulate(h1.data(), n, -0.5f, acc1.data());
    vec().halfAccumulate(h1.data(), n, -0.5f, acc2.data());
    CHECK(sameBits(acc1, acc2));
    ref().bf16Accumulate(b1.data(), n, 1.5f, acc1.data());
    vec().bf16Accumulate(b1.data(), n, 1.5f, acc2.data());
    CHECK(sameBits(acc1, acc2));
  }
}

TEST_CASE("half conversion is round-to-nearest-even with saturation", "[kernels]") {
  CHECK(floatToHalf(1.0f) == 0x3C00);
  CHECK(floatToHalf(-2.0f) == 0xC000);
  CHECK(floatToHalf(65504.0f) == 0x7BFF);
  CHECK(floatToHalf(1e9f) == 0x7BFF);               // saturates instead of inf
  CHECK(floatToHalf(1.0f + 0x1.0p-11f) == 0x3C00);  // tie -> even
  CHECK(floatToHalf(1.0f + 0x1.8p-11f) == 0x3C01);
  CHECK(floatToHalf(0x1.0p-24f) == 0x0001);  // smallest subnormal
  CHECK(halfToFloat(0x0001) == 0x1.0p-24f);
  for (uint32_t h = 0; h < 0x7C00; ++h) {  // every finite half round-trips
    REQUIRE(floatToHalf(halfToFloat(static_cast<uint16_t>(h))) == h);
  }
  CHECK(floatToBf16(1.0f) == 0x3F80);
  CHECK(floatToBf16(1.0f + 0x1.0p-8f) == 0x3F80);              // tie -> even
  CHECK(floatToBf16(1.0f + 0x1.8p-8f) == 0x3F81);              // 0.75 ulp -> up
  CHECK(std::isfinite(bf16ToFloat(floatToBf16(3.4028e38f))));  // saturates
}

TEST_CASE("block quantization matches bit for bit", "[kernels]") {
  for (int bits : {8, 4}) {
    for (auto rounding : {Rounding::kNearest, Rounding::kStochastic}) {
      for (size_t block : {64, 256, 4096}) {
        for (size_t n : kSizes) {
          auto x = gaussian(n, 7 + static_cast<uint32_t>(n + block));
          if (n > 70) std::fill(x.begin() + 64, x.begin() + 70, 0.0f);
          const size_t nb = (n + block - 1) / block;
          const size_t codeBytes = bits == 8 ? n : (n + 1) / 2;
          std::vector<uint8_t> c1(codeBytes), c2(codeBytes, 0xAB);
          std::vector<float> s1(nb), s2(nb);
          ref().quantizeBlocks(x.data(), n, block, bits, rounding, 42, c1.data(), s1.data());
          vec().quantizeBlocks(x.data(), n, block, bits, rounding, 42, c2.data(), s2.data());
          INFO("bits=" << bits << " block=" << block << " n=" << n);
          REQUIRE(c1 == c2);
          REQUIRE(sameBits(s1, s2));
          auto a1 = gaussian(n, 8), a2 = a1;
          ref().dequantizeAccumulate(c1.data(), s1.data(), n, block, bits, 0.75f, a1.data());
          vec().dequantizeAccumulate(c1.data(), s1.data(), n, block, bits, 0.75f, a2.data());
          REQUIRE(sameBits(a1, a2));
          // Round-trip error within half a step (nearest) or one step (stochastic) per element.
          std::vector<float> d(n, 0.0f);
          vec().dequantizeAccumulate(c1.data(), s1.data(), n, block, bits, 1.0f, d.data());
          for (size_t i = 0; i < n; ++i) {
            const float step = s1[i / block];
            const float tol = rounding == Rounding::kNearest ? 0.5001f * step : 1.0001f * step;
            REQUIRE(std::fabs(d[i] - x[i]) <= tol + 1e-30f);
          }
        }
      }
    }
  }
}

TEST_CASE("sign pack matches bit for bit", "[kernels]") {
  for (size_t block : {64, 128, 4096}) {
    for (size_t n : kSizes) {
      auto x = gaussian(n, 9 + static_cast<uint32_t>(n));
      if (n > 3) x[3] = -0.0f;
      const size_t nb = (n + block - 1) / block;
      std::vector<uint8_t> b1((n + 7) / 8), b2((n + 7) / 8, 0xCD);
      std::vector<float> s1(nb), s2(nb);
      ref().signPack(x.data(), n, block, b1.data(), s1.data());
      vec().signPack(x.data(), n, block, b2.data(), s2.data());
      INFO("block=" << block << " n=" << n);
      REQUIRE(b1 == b2);
      REQUIRE(sameBits(s1, s2));
      auto a1 = gaussian(n, 10), a2 = a1;
      ref().signAccumulate(b1.data(), s1.data(), n, block, -1.25f, a1.data());
      vec().signAccumulate(b1.data(), s1.data(), n, block, -1.25f, a2.data());
      REQUIRE(sameBits(a1, a2));
    }
  }
}

TEST_CASE("top-k exact matches the reference; approx is a top set within slack", "[kernels]") {
  std::vector<size_t> sizes = kSizes;
  sizes.push_back(300000);  // above the small-input cut-off: sample + candidates path
  sizes.push_back(1 << 20);
  for (size_t n : sizes) {
    for (double ratio : {0.0, 0.001, 0.01, 0.1, 0.5, 1.0}) {
      const size_t k = static_cast<size_t>(ratio * n) + (ratio > 0 && n > 0 ? 1 : 0);
      auto x = gaussian(n, 11 + static_cast<uint32_t>(n));
      // Ties: repeat a few magnitudes so the tie rule matters.
      for (size_t i = 0; i + 10 < n; i += 97) x[i] = (i % 2 ? 2.0f : -2.0f);
      std::vector<uint8_t> ws1(ref().topkWorkspaceBytes(n, k)), ws2(vec().topkWorkspaceBytes(n, k));
      std::vector<uint32_t> i1(std::min(n, k) + 1),
          i2(topkMaxCount(n, k, Selector::kApprox, 0.05) + 1);
      INFO("n=" << n << " k=" << k);
      auto s1 = ref().topkSelect(x.data(), n, k, Selector::kExact, 0, 1, ws1.data(), i1.data());
      auto s2 = vec().topkSelect(x.data(), n, k, Selector::kExact, 0, 1, ws2.data(), i2.data());
      REQUIRE(s1.count == std::min(n, k));
      REQUIRE(s2.count == s1.count);
      REQUIRE(std::equal(i1.begin(), i1.begin() + s1.count, i2.begin()));

      auto s3 = vec().topkSelect(x.data(), n, k, Selector::kApprox, 0.05, 7, ws2.data(), i2.data());
      REQUIRE(s3.count <= topkMaxCount(n, k, Selector::kApprox, 0.05));
      REQUIRE(static_cast<double>(s3.count) >=
              std::floor(0.95 * static_cast<double>(std::min(n, k))));
      REQUIRE(std::is_sorted(i2.begin(), i2.begin() + s3.count));
      REQUIRE(std::adjacent_find(i2.begin(), i2.begin() + s3.count) == i2.begin() + s3.count);
      // Top set: min selected magnitude >= max unselected magnitude.
      std::vector<char> sel(n, 0);
      uint32_t minSel = 0xFFFFFFFFu, maxUnsel = 0;
      for (size_t j = 0; j < s3.count; ++j) {
        sel[i2[j]] = 1;
        minSel = std::min(minSel, floatBits(x[i2[j]]) & 0x7FFFFFFFu);
      }
      for (size_t i = 0; i < n; ++i) {
        if (!sel[i]) maxUnsel = std::max(maxUnsel, floatBits(x[i]) & 0x7FFFFFFFu);
      }
      if (s3.count > 0 && s3.count < n) REQUIRE(minSel >= maxUnsel);
    }
  }
}

TEST_CASE("top-k exact survives adversarial inputs (all equal, sorted)", "[kernels]") {
  const size_t n = 1 << 19, k = 5000;
  std::vector<float> same(n, 1.0f), sorted(n);
  for (size_t i = 0; i < n; ++i) sorted[i] = static_cast<float>(i);
  for (auto* x : {&same, &sorted}) {
    std::vector<uint8_t> ws(cpuOps().topkWorkspaceBytes(n, k));
    std::vector<uint32_t> idx(k);
    auto s = cpuOps().topkSelect(x->data(), n, k, Selector::kExact, 0, 3, ws.data(), idx.data());
    REQUIRE(s.count == k);
    if (x == &same) {
      for (size_t j = 0; j < k; ++j) REQUIRE(idx[j] == j);  // ties go to the lowest indices
    } else {
      for (size_t j = 0; j < k; ++j) REQUIRE(idx[j] == n - k + j);
    }
  }
}

TEST_CASE("optimizer steps match bit for bit", "[kernels]") {
  for (size_t n :
       {size_t{0}, size_t{1}, size_t{7}, size_t{8}, size_t{9}, size_t{1000}, size_t{4099}}) {
    INFO("n=" << n);
    const auto g = gaussian(n, 31), x = gaussian(n, 32), m0 = gaussian(n, 33, 0.1f);
    for (SgdMomentum kind : {SgdMomentum::kNone, SgdMomentum::kLocal, SgdMomentum::kLocalNesterov,
                             SgdMomentum::kQuasiGlobal, SgdMomentum::kQuasiGlobalNesterov}) {
      INFO("momentum kind " << static_cast<int>(kind));
      const SgdStep step{kind, 0.9f, 1e-4f};
      auto m1 = m0, m2 = m0;
      std::vector<float> u1(n), u2 = g;  // u2 aliases the gradient
      ref().sgdDirection(g.data(), x.data(), m1.data(), u1.data(), n, step);
      vec().sgdDirection(u2.data(), x.data(), m2.data(), u2.data(), n, step);
      CHECK(sameBits(u1, u2));
      CHECK(sameBits(m1, m2));
      // The definition, element by element.
      bool exact = true;
      for (size_t i = 0; i < n; ++i) {
        const float gi = g[i] + 1e-4f * x[i];
        float mi = m0[i], ui = gi;
        if (kind == SgdMomentum::kLocal || kind == SgdMomentum::kLocalNesterov) {
          mi = 0.9f * m0[i] + gi;
          ui = kind == SgdMomentum::kLocal ? mi : gi + 0.9f * mi;
        } else if (kind == SgdMomentum::kQuasiGlobal) {
          ui = gi + 0.9f * m0[i];
        } else if (kind == SgdMomentum::kQuasiGlobalNesterov) {
          ui = gi + 0.9f * (0.9f * m0[i] + gi);
        }
        exact = exact && u1[i] == ui && m1[i] == mi;
      }
      CHECK(exact);
    }
    AdamwStep a;
    a.beta1 = 0.9f;
    a.beta2 = 0.95f;
    a.eps = 1e-8f;
    a.weightDecay = 0.1f;
    a.biasCorrection1 = 0.19f;
    a.biasCorrection2 = 0.0975f;
    auto m1 = m0, m2 = m0;
    auto v1 = gaussian(n, 34, 0.1f);
    for (float& e : v1) e = e * e;
    auto v2 = v1;
    std::vector<float> u1(n), u2(n);
    ref().adamwDirection(g.data(), x.data(), m1.data(), v1.data(), u1.data(), n, a);
    vec().adamwDirection(g.data(), x.data(), m2.data(), v2.data(), u2.data(), n, a);
    CHECK(sameBits(u1, u2));
    CHECK(sameBits(m1, m2));
    CHECK(sameBits(v1, v2));
    auto q1 = m0, q2 = m0;
    ref().momentumFromChange(g.data(), x.data(), q1.data(), n, 0.9f, 12.5f);
    vec().momentumFromChange(g.data(), x.data(), q2.data(), n, 0.9f, 12.5f);
    CHECK(sameBits(q1, q2));
  }
}

TEST_CASE("gather and scatter", "[kernels]") {
  auto x = gaussian(1000, 12);
  std::vector<uint32_t> idx = {0, 5, 999, 500};
  std::vector<float> g(4);
  vec().gather(x.data(), idx.data(), 4, g.data());
  CHECK(g[2] == x[999]);
  std::vector<float> acc(1000, 1.0f);
  vec().scatterAccumulate(idx.data(), g.data(), 4, 2.0f, acc.data());
  CHECK(acc[999] == 1.0f + 2.0f * x[999]);
  CHECK(acc[1] == 1.0f);
}

TEST_CASE("crc32c: check value, chaining, table vs sse4.2", "[kernels]") {
  const char* s = "123456789";
  const auto* p = reinterpret_cast<const uint8_t*>(s);
  CHECK(ref().crc32c(0, p, 9) == 0xE3069283u);
  CHECK(vec().crc32c(0, p, 9) == 0xE3069283u);
  CHECK(vec().crc32c(vec().crc32c(0, p, 4), p + 4, 5) == 0xE3069283u);
  std::mt19937 rng(13);
  for (size_t n : kSizes) {
    std::vector<uint8_t> b(n);
    for (auto& v : b) v = static_cast<uint8_t>(rng());
    CHECK(ref().crc32c(7, b.data(), n) == vec().crc32c(7, b.data(), n));
  }
  // The three-lane blocks (3 x 4096 bytes): below, at and around one and several blocks, from
  // every alignment, and chained across a split inside a block.
  std::vector<uint8_t> big(5 * 12288 + 77);
  for (auto& v : big) v = static_cast<uint8_t>(rng());
  for (size_t n : {12287u, 12288u, 12289u, 24576u, 24583u, 5u * 12288u + 77u - 3u}) {
    for (size_t at : {0u, 1u, 3u}) {
      const uint32_t want = ref().crc32c(0x12345678u, big.data() + at, n);
      CHECK(vec().crc32c(0x12345678u, big.data() + at, n) == want);
      const size_t split = n / 3 + 5;
      CHECK(vec().crc32c(vec().crc32c(0x12345678u, big.data() + at, split), big.data() + at + split,
                         n - split) == want);
    }
  }
}

TEST_CASE("counter-based uniforms are uniform and key-dependent", "[kernels]") {
  double sum = 0;
  int same = 0;
  const int n = 100000;
  for (int i = 0; i < n; ++i) {
    float u = uniform01(99, static_cast<uint32_t>(i));
    REQUIRE(u >= 0.0f);
    REQUIRE(u < 1.0f);
    sum += u;
    same += uniform01(100, static_cast<uint32_t>(i)) == u;
  }
  CHECK(sum / n == Approx(0.5).margin(0.005));
  CHECK(same < 50);
}
