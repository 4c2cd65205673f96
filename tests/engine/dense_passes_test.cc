// The gossip algorithms' dense passes (kernels::Ops::subtractSquares, distanceAndNorm,
// mixDifferences, weightedSum): the table in use (cpuOps(), AVX2 where the CPU has it) against the
// reference table bit for bit, both against the plain definitions, and CHOCO's public copy, now
// decoded straight into, against a neighbour's replica of it for every compression method.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kernels/ops.h"
#include "runtime/engine/setup.h"
#include "tests/test_util/config.h"

using namespace grapevine;

namespace {

std::vector<float> randomVector(std::size_t n, std::uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

bool sameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

bool sameBits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

}  // namespace

TEST_CASE(
    "dense passes: the table in use equals the reference one bit for bit, and the definitions") {
  const kernels::Ops& used = kernels::cpuOps();
  const kernels::Ops& reference = kernels::referenceOps();
  INFO("cpu features: " << kernels::cpuFeatures());
  // Sizes around the 8-lane and 1024-element tile boundaries.
  for (std::size_t n : {0, 1, 7, 8, 9, 1023, 1024, 1025, 4096 + 13, 20000}) {
    INFO("n = " << n);
    const auto x = randomVector(n, 1), y = randomVector(n, 2, 0.5f);

    std::vector<float> d1(n), d2(n);
    const double s1 = used.subtractSquares(x.data(), y.data(), d1.data(), n);
    const double s2 = reference.subtractSquares(x.data(), y.data(), d2.data(), n);
    CHECK(sameBits(d1, d2));
    CHECK(sameBits(s1, s2));
    double naive = 0;
    for (std::size_t k = 0; k < n; ++k) {
      REQUIRE(d1[k] == x[k] - y[k]);
      naive += static_cast<double>(d1[k]) * d1[k];
    }
    CHECK(s1 == Approx(naive).epsilon(1e-12).margin(1e-300));

    const auto r1 = used.distanceAndNorm(x.data(), y.data(), n);
    const auto r2 = reference.distanceAndNorm(x.data(), y.data(), n);
    CHECK(sameBits(r1.distance2, r2.distance2));
    CHECK(sameBits(r1.norm2, r2.norm2));
    double nd = 0, nn = 0;
    for (std::size_t k = 0; k < n; ++k) {
      const double e = static_cast<double>(x[k]) - y[k];
      nd += e * e;
      nn += static_cast<double>(y[k]) * y[k];
    }
    CHECK(r1.distance2 == Approx(nd).epsilon(1e-12).margin(1e-300));
    CHECK(r1.norm2 == Approx(nn).epsilon(1e-12).margin(1e-300));

    for (std::size_t terms = 0; terms <= 3; ++terms) {
      INFO("terms = " << terms);
      std::vector<std::vector<float>> replicas;
      std::vector<kernels::MixTerm> t;
      for (std::size_t i = 0; i < terms; ++i) {
        replicas.push_back(randomVector(n, 10 + static_cast<std::uint32_t>(i), 0.7f));
        t.push_back({replicas.back().data(), 0.1 * static_cast<double>(i + 1), 1.0 / 3.0});
      }
      auto m1 = x, m2 = x;
      const double p1 = used.mixDifferences(m1.data(), y.data(), t.data(), t.size(), n);
      const double p2 = reference.mixDifferences(m2.data(), y.data(), t.data(), t.size(), n);
      CHECK(sameBits(m1, m2));
      CHECK(sameBits(p1, p2));
      // x + sum_t c_t (r_t - y), summed in double in term order and rounded once.
      double spread = 0;
      bool exact = true;
      for (std::size_t k = 0; k < n; ++k) {
        double s = 0;
        for (std::size_t i = 0; i < terms; ++i) {
          const double e = static_cast<double>(replicas[i][k]) - y[k];
          s += t[i].coefficient * e;
          spread += t[i].weight * e * e;
        }
        const float want = terms == 0 ? x[k] : static_cast<float>(x[k] + s);
        exact = exact && m1[k] == want;
      }
      CHECK(exact);
      CHECK(p1 == Approx(spread).epsilon(1e-12).margin(1e-300));

      // weightedSum: wa a + wb b + sum_t c_t r_t in double, in that order, rounded once; with and
      // without b, into a separate x and in place over a (D-PSGD's, gradient tracking's and
      // push-sum's mixes).
      for (const bool withB : {false, true}) {
        INFO("with b: " << withB);
        const float* b = withB ? y.data() : nullptr;
        std::vector<float> w1(n, 7.0f), w2(n, 7.0f);
        used.weightedSum(w1.data(), x.data(), 0.4, b, -0.3, t.data(), t.size(), n);
        reference.weightedSum(w2.data(), x.data(), 0.4, b, -0.3, t.data(), t.size(), n);
        CHECK(sameBits(w1, w2));
        bool defined = true;
        for (std::size_t k = 0; k < n; ++k) {
          double v = 0.4 * static_cast<double>(x[k]);
          if (withB) v += -0.3 * static_cast<double>(y[k]);
          for (std::size_t i = 0; i < terms; ++i)
            v += t[i].coefficient * static_cast<double>(replicas[i][k]);
          defined = defined && w1[k] == static_cast<float>(v);
        }
        CHECK(defined);
        auto inPlace = x;
        used.weightedSum(inPlace.data(), inPlace.data(), 0.4, b, -0.3, t.data(), t.size(), n);
        CHECK(sameBits(inPlace, w1));
      }
    }
  }
}

TEST_CASE("CHOCO's public copy, decoded straight into, equals the neighbour's replica of it") {
  // Two peers; peer 0's messages go to peer 1, whose replica of peer 0 must stay bit-identical to
  // peer 0's public copy (the drift check compares their hashes), for every compression method.
  // The layout has a matrix (low-rank's path), a vector and a small tensor (dense_below).
  std::vector<train::TensorInfo> layout = {
      {"w", {96, 64}, 0, 96 * 64}, {"b", {300}, 96 * 64, 300}, {"s", {5}, 96 * 64 + 300, 5}};
  const std::size_t dim = 96 * 64 + 300 + 5;
  for (const std::string method :
       {"none", "fp16", "bf16", "top-k", "rand-k", "qsgd", "int8", "int4", "sign", "low-rank"}) {
    INFO("compression.method: " << method);
    const auto c = test_util::loadYaml(
        "peers: { count: 2 }\ntopology: { kind: ring }\n"
        "algorithm: { name: choco, consensus_step: 0.3 }\n"
        "compression: { method: " +
            method +
            ", ratio: 0.1, rank: 2, dense_below: 16 }\n"
            "workload: { name: consensus, dim: " +
            std::to_string(dim) + " }\n",
        "dense_passes_" + method + ".yaml");
    auto plan = test_util::makePlan(c);
    const auto x0 = randomVector(dim, 5);
    auto a = engine::makePeerAlgorithm(*plan, 0, layout, x0);
    auto b = engine::makePeerAlgorithm(*plan, 1, layout, x0);
    REQUIRE(a.isOk());
    REQUIRE(b.isOk());
    std::vector<std::uint8_t> out((*a)->maxMessageBytes());
    auto x = x0;
    for (std::uint64_t round = 0; round < 5; ++round) {
      const auto step = randomVector(dim, 100 + static_cast<std::uint32_t>(round), 0.05f);
      for (std::size_t k = 0; k < dim; ++k) x[k] += step[k];
      const auto before = (*a)->publicCopy();
      const std::vector<float> old(before.begin(), before.end());
      auto n = (*a)->prepare(x, round, out);
      REQUIRE(n.isOk());
      REQUIRE((*b)->receive(0, 0.5, std::span(out).first(*n), round, 0.0f).isOk());
      INFO("round " << round);
      CHECK((*a)->publicCopyHash() == (*b)->replicaHash(0));
      // The copy moved towards x (a contractive compressor leaves a smaller residual).
      double was = 0, now = 0;
      const auto copy = (*a)->publicCopy();
      for (std::size_t k = 0; k < dim; ++k) {
        was += std::pow(static_cast<double>(x[k]) - old[k], 2);
        now += std::pow(static_cast<double>(x[k]) - copy[k], 2);
      }
      CHECK(now < was);
    }
  }
}

TEST_CASE("D-PSGD's own term is the model: no decoded copy, no message for nobody, same mix") {
  // Peer 0 of a 3-ring: D-PSGD's messages are dense fp32 (an exact codec), so its own term of the
  // mix is the model itself and a round without recipients encodes nothing; the mix is still
  // w_00 x_0 + w_01 x_1 + w_02 x_2 in double, rounded once, and what a neighbour decodes of a
  // message is the model (a -0 as +0).
  const std::size_t dim = 3000;
  std::vector<train::TensorInfo> layout = {{"w", {30, 100}, 0, dim}};
  const auto c = test_util::loadYaml(
      "peers: { count: 3 }\ntopology: { kind: ring }\nalgorithm: { name: dsgd }\n"
      "compression: { method: none, lossless: zstd }\n"
      "workload: { name: consensus, dim: 3000 }\n",
      "dense_passes_dsgd.yaml");
  auto plan = test_util::makePlan(c);
  std::vector<std::unique_ptr<algorithms::Algorithm>> peers;
  std::vector<std::vector<float>> x;
  for (int r = 0; r < 3; ++r) {
    x.push_back(randomVector(dim, 40 + static_cast<std::uint32_t>(r)));
    auto a = engine::makePeerAlgorithm(*plan, r, layout, x.back());
    REQUIRE(a.isOk());
    peers.push_back(std::move(*a));
  }
  x[0][7] = -0.0f;
  x[1][7] = -0.0f;
  std::vector<std::uint8_t> out(peers[0]->maxMessageBytes());
  for (int r = 1; r < 3; ++r) {
    const int to[] = {0};
    peers[r]->setRecipients(to);
    auto n = peers[r]->prepare(x[r], 0, out);
    REQUIRE(n.isOk());
    REQUIRE(*n > 0);
    REQUIRE(peers[0]->receive(r, 1.0 / 3.0, std::span(out).first(*n), 0, 0.0f).isOk());
  }
  peers[0]->setRecipients({});
  auto none = peers[0]->prepare(x[0], 0, out);
  REQUIRE(none.isOk());
  CHECK(*none == 0);
  auto mixed = x[0];
  algorithms::MixWeights w;
  w.neighbours = {{1, 1.0 / 3.0}, {2, 1.0 / 3.0}};
  peers[0]->mix(mixed, w);
  bool defined = true;
  const double self = 1.0 - (1.0 / 3.0 + 1.0 / 3.0);
  for (std::size_t k = 0; k < dim; ++k) {
    const double v = self * static_cast<double>(x[0][k]) +
                     1.0 / 3.0 * static_cast<double>(0.0f + x[1][k]) +
                     1.0 / 3.0 * static_cast<double>(0.0f + x[2][k]);
    defined = defined && sameBits(std::vector<float>{mixed[k]}, {static_cast<float>(v)});
  }
  CHECK(defined);

  // With a recipient the message goes out, and the neighbour decodes the model.
  const int to[] = {1};
  peers[0]->setRecipients(to);
  auto n = peers[0]->prepare(x[0], 1, out);
  REQUIRE(n.isOk());
  REQUIRE(*n > 0);
  REQUIRE(peers[1]->receive(0, 1.0, std::span(out).first(*n), 1, 0.0f).isOk());
  auto got = x[1];
  algorithms::MixWeights all;
  all.neighbours = {{0, 1.0}};
  peers[1]->mix(got, all);
  std::vector<float> want(dim);
  for (std::size_t k = 0; k < dim; ++k) want[k] = 0.0f + x[0][k];
  CHECK(sameBits(got, want));

  // A model that is not finite is refused, as decoding the message refused it.
  auto bad = x[0];
  bad[11] = std::numeric_limits<float>::infinity();
  peers[0]->setRecipients({});
  CHECK(!peers[0]->prepare(bad, 2, out).isOk());

  // security.max_delta_ratio: a received model with a value above the round's bound is refused
  // ("magnitude") and leaves its slot zero; under a bound above it, it goes in.
  auto big = x[1];
  big[5] = 5000.0f;
  const int toZero[] = {0};
  peers[1]->setRecipients(toZero);
  auto m = peers[1]->prepare(big, 3, out);
  REQUIRE(m.isOk());
  const Status refused = peers[0]->receive(1, 1.0 / 3.0, std::span(out).first(*m), 3, 4999.0f);
  REQUIRE(!refused.isOk());
  CHECK(refused.message().find("magnitude") != std::string::npos);
  bool zero = true;
  const auto refusedViews = peers[0]->neighbourViews();  // by rank: 1, then 2
  for (float v : refusedViews[0]) zero = zero && v == 0.0f;
  CHECK(zero);
  CHECK(peers[0]->receive(1, 1.0 / 3.0, std::span(out).first(*m), 3, 5000.0f).isOk());
  const auto views = peers[0]->neighbourViews();
  CHECK(views[0][5] == 5000.0f);
}
