#include "runtime/train/workload.h"

#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <thread>
#include <vector>

#include "runtime/train/optimizer.h"
#include "tests/train/test_util.h"

using namespace grapevine;
using namespace grapevine::train;
using grapevine::train::testing::fashionData;
using grapevine::train::testing::TempDir;

namespace {

std::unique_ptr<Workload> build(const WorkloadOptions& options, int rank, int peers,
                                std::uint64_t seed, std::shared_ptr<const SharedData> shared) {
  auto r = makeWorkload(options, rank, peers, seed, std::move(shared));
  INFO((r.isOk() ? std::string("ok") : r.status().toString()));
  REQUIRE(r.isOk());
  return std::move(r).value();
}

WorkloadOptions classifier(WorkloadKind kind, int batch = 32) {
  WorkloadOptions o;
  o.kind = kind;
  o.batchSize = batch;
  o.hidden = {32};
  return o;
}

}  // namespace

TEST_CASE("makeWorkload rejects bad ranks and mismatched shared data", "[train][workload]") {
  auto shared = fashionData();
  REQUIRE(shared);
  WorkloadOptions o = classifier(WorkloadKind::kFashionMnistMlp);
  CHECK_FALSE(makeWorkload(o, 4, 4, 1, shared).isOk());
  CHECK_FALSE(makeWorkload(o, -1, 4, 1, shared).isOk());
  CHECK_FALSE(makeWorkload(o, 0, 0, 1, shared).isOk());
  o.batchSize = 0;
  CHECK_FALSE(makeWorkload(o, 0, 4, 1, shared).isOk());

  WorkloadOptions q;
  q.kind = WorkloadKind::kQuadratic;
  q.data = "unused.json";
  auto r = makeWorkload(q, 0, 1, 1, shared);  // Fashion-MNIST data, quadratic asked for
  REQUIRE_FALSE(r.isOk());
  CHECK_THAT(r.status().message(), Catch::Contains("lacks what 'quadratic' needs"));

  WorkloadOptions missing = classifier(WorkloadKind::kFashionMnistSoftmax);
  missing.dataDir = "/nonexistent/fashion";
  auto m = makeWorkload(missing, 0, 1, 1, nullptr);
  REQUIRE_FALSE(m.isOk());
  CHECK(m.status().code() == ErrorCode::kNotFound);
  CHECK_THAT(m.status().message(), Catch::Contains("dataset-fashion-mnist"));
}

TEST_CASE("classifier workloads: layout, init, deterministic minibatches", "[train][workload]") {
  auto shared = fashionData();
  REQUIRE(shared);
  for (auto kind : {WorkloadKind::kFashionMnistSoftmax, WorkloadKind::kFashionMnistMlp,
                    WorkloadKind::kFashionMnistCnn}) {
    WorkloadOptions o = classifier(kind, 16);
    o.cnnChannels = {2, 4};
    o.cnnHidden = 8;
    INFO(workloadKindName(kind));
    auto a = build(o, 1, 4, 77, shared);
    auto b = build(o, 1, 4, 77, shared);
    auto other = build(o, 2, 4, 77, shared);
    CHECK(a->name() == workloadKindName(kind));
    const std::size_t n = a->parameterCount();
    std::size_t covered = 0;
    for (const auto& t : a->layout()) covered += t.count;
    CHECK(covered == n);

    // Same seed -> same model on every rank; a different seed -> a different one.
    std::vector<float> x(n), xOther(n), xSeed(n);
    a->initParameters(x, 5);
    other->initParameters(xOther, 5);
    a->initParameters(xSeed, 6);
    CHECK(x == xOther);
    CHECK(x != xSeed);

    // Step k's minibatch is a function of (seed, rank, k): equal across instances, different
    // across ranks and steps, and setStep() repositions the stream.
    std::vector<float> ga(n), gb(n), go(n), g2(n);
    const float la = a->gradient(x, ga);
    const float lb = b->gradient(x, gb);
    other->gradient(x, go);
    CHECK(la == lb);
    CHECK(ga == gb);
    CHECK(ga != go);
    CHECK(std::isfinite(la));
    CHECK(la > 0.0f);
    a->gradient(x, g2);
    CHECK(g2 != ga);
    CHECK(a->step() == 2);
    b->setStep(1);
    b->gradient(x, gb);
    CHECK(gb == g2);
  }
}

TEST_CASE("minibatches visit the whole shard once per epoch", "[train][workload]") {
  // A single-peer MLP sees the same per-epoch multiset regardless of order: summing the gradients
  // of one epoch at a fixed x equals the full-shard gradient (batch 50 divides the 60000/4 shard).
  auto shared = fashionData();
  REQUIRE(shared);
  WorkloadOptions o = classifier(WorkloadKind::kFashionMnistSoftmax, 50);
  auto w = build(o, 0, 4, 3, shared);
  std::vector<float> x(w->parameterCount()), g(x.size());
  std::vector<double> epochA(x.size(), 0.0), epochB(x.size(), 0.0);
  w->initParameters(x, 3);
  const int steps = 15000 / 50;
  for (int s = 0; s < steps; ++s) {
    w->gradient(x, g);
    for (std::size_t i = 0; i < g.size(); ++i) epochA[i] += g[i];
  }
  std::vector<float> firstOfEpoch2(x.size());
  for (int s = 0; s < steps; ++s) {
    w->gradient(x, g);
    if (s == 0) firstOfEpoch2 = g;
    for (std::size_t i = 0; i < g.size(); ++i) epochB[i] += g[i];
  }
  for (std::size_t i = 0; i < x.size(); i += 97) CHECK(epochA[i] == Approx(epochB[i]).margin(1e-3));
  // ...but in a different order (a new permutation per epoch).
  w->setStep(0);
  w->gradient(x, g);
  CHECK(g != firstOfEpoch2);
}

TEST_CASE("evaluation subsets: test subset shared by all peers, train subset per peer",
          "[train][workload]") {
  auto shared = fashionData();
  REQUIRE(shared);
  WorkloadOptions o = classifier(WorkloadKind::kFashionMnistSoftmax, 64);
  o.evalTestSamples = 500;
  o.evalTrainSamples = 300;
  auto a = build(o, 0, 3, 8, shared);
  auto b = build(o, 2, 3, 8, shared);
  std::vector<float> x(a->parameterCount());
  a->initParameters(x, 8);
  const auto ta = a->evaluateTest(x);
  const auto tb = b->evaluateTest(x);
  CHECK(ta.loss == tb.loss);
  CHECK(ta.accuracy == tb.accuracy);
  CHECK(ta.accuracy * 500 == Approx(std::round(ta.accuracy * 500)));  // counts over 500 samples
  const auto ra = a->evaluateTrain(x);
  const auto rb = b->evaluateTrain(x);
  CHECK(ra.loss != rb.loss);
  // Evaluation does not disturb the minibatch stream.
  auto c = build(o, 0, 3, 8, shared);
  std::vector<float> g1(x.size()), g2(x.size());
  a->gradient(x, g1);
  c->gradient(x, g2);
  CHECK(g1 == g2);
}

TEST_CASE("softmax regression reaches > 75% test accuracy in 300 steps", "[train][workload]") {
  auto shared = fashionData();
  REQUIRE(shared);
  WorkloadOptions o = classifier(WorkloadKind::kFashionMnistSoftmax, 64);
  o.evalTestSamples = 0;
  const std::uint64_t seed = 2024;
  std::printf("softmax training seed %llu\n", static_cast<unsigned long long>(seed));
  auto w = build(o, 0, 1, seed, shared);
  OptimizerOptions oo;
  oo.schedule.kind = LrScheduleKind::kConstant;
  oo.schedule.lr = 0.005;
  oo.momentum = 0.9;
  oo.nesterov = false;
  Optimizer opt(oo, w->parameterCount());
  std::vector<float> x(w->parameterCount()), g(x.size()), u(x.size());
  w->initParameters(x, seed);
  const double before = w->evaluateTest(x).accuracy;
  const auto t0 = std::chrono::steady_clock::now();
  for (int s = 0; s < 300; ++s) {
    w->gradient(x, g);
    opt.direction(g, x, u, s);
    const float lr = static_cast<float>(opt.lr(s));
    for (std::size_t i = 0; i < x.size(); ++i) x[i] -= lr * u[i];
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const auto test = w->evaluateTest(x);
  const auto train = w->evaluateTrain(x);
  std::printf("softmax: 300 steps in %.2f s, test acc %.4f loss %.4f, train acc %.4f\n", seconds,
              test.accuracy, test.loss, train.accuracy);
  CHECK(before < 0.3);
  CHECK(test.accuracy > 0.75);
  CHECK(train.accuracy > 0.75);
  CHECK(test.loss < 0.7);
}

TEST_CASE("peers in threads compute the same bits as one after another", "[train][workload]") {
  // The simulator runs many peers' workloads on threads over one SharedData and one BLAS.
  auto shared = fashionData();
  REQUIRE(shared);
  WorkloadOptions o = classifier(WorkloadKind::kFashionMnistMlp, 32);
  const int peers = 4;
  auto run = [&](int rank, std::vector<float>* out) {
    auto r = makeWorkload(o, rank, peers, 5, shared);
    if (!r.isOk()) return;
    auto& w = *r.value();
    std::vector<float> x(w.parameterCount()), g(x.size());
    w.initParameters(x, 5);
    for (int s = 0; s < 20; ++s) {
      w.gradient(x, g);
      for (std::size_t i = 0; i < x.size(); ++i) x[i] -= 0.05f * g[i];
    }
    *out = x;
  };
  std::vector<std::vector<float>> serial(peers), parallel(peers);
  for (int r = 0; r < peers; ++r) run(r, &serial[r]);
  std::vector<std::thread> threads;
  for (int r = 0; r < peers; ++r) threads.emplace_back(run, r, &parallel[r]);
  for (auto& t : threads) t.join();
  for (int r = 0; r < peers; ++r) {
    REQUIRE_FALSE(serial[r].empty());
    CHECK(serial[r] == parallel[r]);
  }
  CHECK(serial[0] != serial[1]);
}

TEST_CASE("dirichlet partition through makeWorkload skews evaluation per peer",
          "[train][workload]") {
  auto shared = fashionData();
  REQUIRE(shared);
  WorkloadOptions o = classifier(WorkloadKind::kFashionMnistSoftmax, 32);
  o.partition = PartitionKind::kDirichlet;
  o.alpha = 0.05;
  auto a = build(o, 0, 8, 4, shared);
  auto b = build(o, 0, 8, 4, shared);
  std::vector<float> x(a->parameterCount()), ga(x.size()), gb(x.size());
  a->initParameters(x, 4);
  a->gradient(x, ga);
  b->gradient(x, gb);
  CHECK(ga == gb);  // deterministic shard and batches
}

TEST_CASE("quadratic workload: exact gradients and closed-form optimum", "[train][quadratic]") {
  TempDir dir;
  const std::string path = dir.file("q.json");
  {
    std::ofstream out(path);
    out << R"({"a": [1, 2, -1], "b": [[1, 0], [2, 4], [3, -3]]})";
  }
  WorkloadOptions o;
  o.kind = WorkloadKind::kQuadratic;
  o.data = path;
  auto shared = loadSharedData(o);
  REQUIRE(shared.isOk());

  // n = 3 functions need exactly 3 peers.
  auto wrong = makeWorkload(o, 0, 4, 1, *shared);
  REQUIRE_FALSE(wrong.isOk());
  CHECK_THAT(wrong.status().message(), Catch::Contains("n = 3") && Catch::Contains("4 peers"));

  // x* = sum a_i b_i / sum a_i^2 = ([1,0] + [4,8] - [3,-3]) / 6 = [1/3, 11/6]
  std::vector<std::unique_ptr<Workload>> peers;
  for (int r = 0; r < 3; ++r) peers.push_back(build(o, r, 3, 1, *shared));
  const auto opt = peers[0]->optimum();
  REQUIRE(opt.size() == 2);
  CHECK(opt[0] == Approx(1.0 / 3.0));
  CHECK(opt[1] == Approx(11.0 / 6.0));
  CHECK(peers[0]->layout()[0].shape == std::vector<std::int64_t>{2});

  // Peer 1: f = 1/2 |2x - [2, 4]|^2, gradient 2 (2x - b) at x = [1, 1] is [0, -4], loss 2.
  std::vector<float> x = {1, 1}, g(2);
  const float loss = peers[1]->gradient(x, g);
  CHECK(loss == Approx(2.0));
  CHECK(g[0] == Approx(0.0));
  CHECK(g[1] == Approx(-4.0));
  CHECK(peers[1]->evaluateTrain(x).loss == Approx(2.0));
  CHECK(std::isnan(peers[1]->evaluateTrain(x).accuracy));

  // At x* the peers' gradients sum to zero, and the global objective is at its minimum.
  std::vector<float> xs(opt.begin(), opt.end());
  std::vector<double> sum(2, 0.0);
  for (auto& p : peers) {
    p->gradient(xs, g);
    sum[0] += g[0];
    sum[1] += g[1];
  }
  CHECK(sum[0] == Approx(0.0).margin(1e-5));
  CHECK(sum[1] == Approx(0.0).margin(1e-5));
  const double atOpt = peers[0]->evaluateTest(xs).loss;
  CHECK(peers[0]->evaluateTest(std::vector<float>{0.4f, 1.8f}).loss > atOpt);
  CHECK(peers[2]->evaluateTest(xs).loss == atOpt);  // global: the same on every peer

  std::vector<float> x0(2, 5.0f);
  peers[0]->initParameters(x0, 9);
  CHECK(x0 == std::vector<float>{0, 0});
}

TEST_CASE("quadratic noise is seeded per (seed, rank, step) and zero-mean", "[train][quadratic]") {
  TempDir dir;
  const std::string path = dir.file("q.json");
  {
    std::ofstream out(path);
    out << R"({"a": [1, 1], "b": [[0, 0, 0, 0], [1, 1, 1, 1]]})";
  }
  WorkloadOptions o;
  o.kind = WorkloadKind::kQuadratic;
  o.data = path;
  o.noise = 0.5;
  auto shared = loadSharedData(o);
  REQUIRE(shared.isOk());
  auto a = build(o, 0, 2, 3, *shared);
  auto b = build(o, 0, 2, 3, *shared);
  std::vector<float> x(4, 0.0f), ga(4), gb(4);
  a->gradient(x, ga);
  b->gradient(x, gb);
  CHECK(ga == gb);
  double sum = 0.0, sumSq = 0.0;
  const int n = 2000;
  for (int s = 0; s < n; ++s) {
    a->gradient(x, ga);  // exact gradient at x = 0 for peer 0 is 0, so g is pure noise
    for (float v : ga) {
      sum += v;
      sumSq += double(v) * v;
    }
  }
  CHECK(std::abs(sum / (4 * n)) < 0.03);
  CHECK(std::sqrt(sumSq / (4 * n)) == Approx(0.5).epsilon(0.05));
}

TEST_CASE("consensus workload: per-rank starts, zero gradient, average as optimum",
          "[train][consensus]") {
  WorkloadOptions o;
  o.kind = WorkloadKind::kConsensus;
  o.dim = 64;
  const int peers = 5;
  std::vector<std::unique_ptr<Workload>> ws;
  for (int r = 0; r < peers; ++r) ws.push_back(build(o, r, peers, 11, nullptr));
  std::vector<std::vector<float>> xs(peers, std::vector<float>(64));
  for (int r = 0; r < peers; ++r) ws[r]->initParameters(xs[r], 11);
  CHECK(xs[0] != xs[1]);
  std::vector<float> again(64);
  ws[0]->initParameters(again, 11);
  CHECK(again == xs[0]);

  std::vector<float> g(64, 1.0f);
  CHECK(ws[2]->gradient(xs[2], g) == 0.0f);
  CHECK(std::all_of(g.begin(), g.end(), [](float v) { return v == 0.0f; }));

  const auto avg = ws[3]->optimum();
  REQUIRE(avg.size() == 64);
  for (std::size_t k = 0; k < 64; ++k) {
    double mean = 0.0;
    for (int r = 0; r < peers; ++r) mean += xs[r][k];
    CHECK(avg[k] == Approx(mean / peers).margin(1e-6));
  }
  std::vector<float> avgCopy(avg.begin(), avg.end());
  CHECK(ws[0]->evaluateTest(avgCopy).loss == Approx(0.0).margin(1e-9));
  double d = 0.0;
  for (std::size_t k = 0; k < 64; ++k) d += (xs[1][k] - avg[k]) * double(xs[1][k] - avg[k]);
  CHECK(ws[1]->evaluateTrain(xs[1]).loss == Approx(d));
}
