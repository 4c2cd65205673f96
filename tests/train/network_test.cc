#include "runtime/train/network.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <vector>

#include "runtime/train/rng.h"

using namespace grapevine::train;

namespace {

struct Batch {
  std::vector<float> inputs;
  std::vector<std::uint8_t> labels;
};

Batch randomBatch(int batch, int features, int classes, std::uint64_t seed) {
  Rng rng(seed);
  Batch b;
  for (int i = 0; i < batch * features; ++i) b.inputs.push_back(static_cast<float>(rng.normal()));
  for (int i = 0; i < batch; ++i) b.labels.push_back(static_cast<std::uint8_t>(rng.below(classes)));
  return b;
}

double lossAt(Network& net, const Batch& b, std::span<const float> x, int batch) {
  std::copy(b.inputs.begin(), b.inputs.end(), net.input());
  return net.forward(x, b.labels.data(), batch, nullptr);
}

// Central differences in float against backward(). A coordinate passes when it agrees within 1e-2
// relative or 3e-4 absolute (the float loss's rounding noise / 2h) at step h, or, failing that, at
// h / 3: ReLU and max-pool kinks within +-h of the point bend the larger difference quotient (a
// wrong backward disagrees at every h). The whole vector must also agree within 1e-2 relative.
void checkGradient(Network& net, int batch, std::uint64_t seed, double h = 1e-3) {
  const int features = net.inputSize();
  net.reserve(batch);
  const Batch b = randomBatch(batch, features, net.classes(), seed);
  std::vector<float> x(net.parameterCount());
  net.initParameters(x, seed);
  // Non-zero biases, so their gradients and the ReLU masks are exercised away from the init.
  Rng rng(seed + 1);
  for (float& v : x) v += static_cast<float>(0.05 * rng.normal());

  std::vector<float> g(x.size(), 123.0f);  // backward must overwrite every entry
  lossAt(net, b, x, batch);
  net.backward(x, g, batch);

  auto numericAt = [&](std::size_t i, double step) {
    const float saved = x[i];
    x[i] = saved + static_cast<float>(step);
    const double up = lossAt(net, b, x, batch);
    x[i] = saved - static_cast<float>(step);
    const double down = lossAt(net, b, x, batch);
    x[i] = saved;
    // The float perturbation actually applied, not the nominal one.
    const double applied =
        (double(saved + static_cast<float>(step)) - double(saved - static_cast<float>(step)));
    return (up - down) / applied;
  };
  auto agrees = [](double numeric, double analytic) {
    return std::abs(numeric - analytic) <=
           1e-2 * std::max(std::abs(numeric), std::abs(analytic)) + 3e-4;
  };

  double diffSq = 0.0, sumSq = 0.0;
  int bad = 0, retried = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    double numeric = numericAt(i, h);
    if (!agrees(numeric, g[i])) {
      ++retried;
      numeric = numericAt(i, h / 3);
      if (!agrees(numeric, g[i]) && bad++ < 5) {
        std::printf("coordinate %zu: numeric %.6g analytic %.6g\n", i, numeric, double(g[i]));
      }
    }
    const double err = numeric - g[i];
    diffSq += err * err;
    sumSq += (std::abs(numeric) + std::abs(g[i])) * (std::abs(numeric) + std::abs(g[i]));
  }
  const double relative = std::sqrt(diffSq / sumSq);
  INFO("parameters " << x.size() << ", relative error " << relative << ", bad " << bad
                     << ", retried at h/3 " << retried);
  CHECK(bad == 0);
  CHECK(retried <= static_cast<int>(x.size() / 10));  // kinks are the exception, not the rule
  CHECK(relative < 1e-2);
  CHECK(sumSq > 1e-6);  // not trivially zero
}

}  // namespace

TEST_CASE("softmax regression gradient matches finite differences", "[train][gradcheck]") {
  Network net = Network::softmaxRegression(12, 4);
  CHECK(net.parameterCount() == 12 * 4 + 4);
  checkGradient(net, 5, 11);
}

TEST_CASE("MLP gradient matches finite differences", "[train][gradcheck]") {
  Network net = Network::mlp(10, {7, 6}, 3);
  CHECK(net.parameterCount() == (10 * 7 + 7) + (7 * 6 + 6) + (6 * 3 + 3));
  checkGradient(net, 4, 12);
}

TEST_CASE("CNN gradient matches finite differences (batch spans two conv chunks)",
          "[train][gradcheck]") {
  Network net = Network::cnn(8, 8, {2, 3}, 5, 4);
  // conv1 2x(5x5x1)+2, conv2 3x(5x5x2)+3, dense 2*2*3 -> 5, dense 5 -> 4
  CHECK(net.parameterCount() == (50 + 2) + (150 + 3) + (12 * 5 + 5) + (5 * 4 + 4));
  checkGradient(net, 18, 13);  // 18 > the 16-sample im2col chunk
}

TEST_CASE("layout tiles the parameter vector in order", "[train][network]") {
  std::vector<Network> nets;
  nets.push_back(Network::softmaxRegression(784, 10));
  nets.push_back(Network::mlp(784, {128, 64}, 10));
  nets.push_back(Network::cnn(28, 28, {8, 16}, 64, 10));
  for (const Network& net : nets) {
    std::size_t offset = 0;
    for (const auto& t : net.layout()) {
      CHECK(t.offset == offset);
      std::int64_t prod = 1;
      for (auto d : t.shape) prod *= d;
      CHECK(static_cast<std::size_t>(prod) == t.count);
      offset += t.count;
    }
    CHECK(offset == net.parameterCount());
  }
  Network mlp = Network::mlp(784, {128}, 10);
  REQUIRE(mlp.layout().size() == 4);
  CHECK(mlp.layout()[0].name == "dense1.weight");
  CHECK(mlp.layout()[0].shape == std::vector<std::int64_t>{128, 784});
  CHECK(mlp.layout()[3].name == "dense2.bias");
}

TEST_CASE("batch gradient is the mean of per-sample gradients", "[train][network]") {
  // Exercises batch sizes below maxBatch and the conv chunk boundary (17 samples = 16 + 1).
  Network net = Network::cnn(8, 8, {2, 2}, 4, 3);
  const int batch = 17;
  net.reserve(batch);
  const Batch b = randomBatch(batch, net.inputSize(), 3, 5);
  std::vector<float> x(net.parameterCount()), g(x.size()), gi(x.size());
  std::vector<double> mean(x.size(), 0.0);
  net.initParameters(x, 5);
  double lossMean = 0.0;
  for (int s = 0; s < batch; ++s) {
    std::copy(b.inputs.begin() + s * net.inputSize(), b.inputs.begin() + (s + 1) * net.inputSize(),
              net.input());
    lossMean += net.forward(x, &b.labels[s], 1, nullptr) / batch;
    net.backward(x, gi, 1);
    for (std::size_t i = 0; i < x.size(); ++i) mean[i] += gi[i] / batch;
  }
  std::copy(b.inputs.begin(), b.inputs.end(), net.input());
  const double loss = net.forward(x, b.labels.data(), batch, nullptr);
  net.backward(x, g, batch);
  CHECK(loss == Approx(lossMean).epsilon(1e-5));
  for (std::size_t i = 0; i < x.size(); ++i) CHECK(g[i] == Approx(mean[i]).margin(1e-5));
}

TEST_CASE("initParameters is a pure function of the seed", "[train][network]") {
  Network net = Network::mlp(20, {10}, 3);
  std::vector<float> a(net.parameterCount()), b(a.size()), c(a.size());
  net.initParameters(a, 7);
  net.initParameters(b, 7);
  net.initParameters(c, 8);
  CHECK(a == b);
  CHECK(a != c);
  // Biases start at zero, weights within the He bound sqrt(6 / fan_in).
  const auto& bias = net.layout()[1];
  for (std::size_t i = 0; i < bias.count; ++i) CHECK(a[bias.offset + i] == 0.0f);
  const float bound = std::sqrt(6.0f / 20.0f);
  for (std::size_t i = 0; i < net.layout()[0].count; ++i) CHECK(std::abs(a[i]) <= bound);
}
