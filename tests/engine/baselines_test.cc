// The same-kernel baselines (issue 40): algorithm.name allreduce (every round an exact average of
// the models over the ring collective: with plain SGD and one local step, data-parallel SGD on the
// averaged gradient) and diloco (that average with DiLoCo's outer step), in the lockstep driver
// on the heterogeneous quadratic f_i(x) = 1/2 |a_i x - b_i|^2. Checked against what is known
// without the engine:
//   - allreduce keeps every peer bit-identical and follows gradient descent on the global
//     objective (1/n) sum_i f_i, computed here in double;
//   - diloco with outer.lr 1 and outer.momentum 0 is allreduce bit for bit;
//   - diloco's constant-step limit is the closed form sum_i (1 - p_i) u_i / sum_i (1 - p_i)
//     (p_i = (1 - lr a_i^2)^H, u_i = b_i / a_i: the average of the peers' H-step maps is the
//     identity there);
//   - each peer sends 2 (n - 1) / n of the model a round in f32 (the ring's reduce-scatter and
//     all-gather), plus the envelopes and a closing ack.
#include <Eigen/Dense>
#include <catch2/catch.hpp>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "runtime/engine/envelope.h"
#include "runtime/engine/lockstep.h"
#include "runtime/engine/setup.h"
#include "tests/test_util/config.h"
#include "tests/test_util/quadratic.h"

using namespace grapevine;
using engine::PeerCore;

namespace {

constexpr int kPeers = 8;
constexpr int kDim = 40;  // at least the peers: the ring's chunks
constexpr double kLr = 0.05;

struct Quadratic {
  std::vector<double> a;
  Eigen::MatrixXd b;  // peers x dim
};

Quadratic quadratic(std::string* path) {
  *path = std::string(GRAPEVINE_BINARY_DIR) + "/baselines_test_quadratic.json";
  test_util::writeQuadraticData(*path, kPeers, kDim);
  std::ifstream in(*path);
  const auto j = nlohmann::json::parse(in);
  Quadratic q;
  q.b.resize(kPeers, kDim);
  for (int i = 0; i < kPeers; ++i) {
    q.a.push_back(j["a"][i].get<double>());
    for (int k = 0; k < kDim; ++k) q.b(i, k) = j["b"][i][k].get<double>();
  }
  return q;
}

std::string yamlFor(const std::string& data, const std::string& algorithm, int localSteps,
                    const std::string& extra = "") {
  return "peers: { count: " + std::to_string(kPeers) +
         " }\ntopology: { kind: ring }\n"
         "algorithm: { name: " +
         algorithm + ", local_steps: " + std::to_string(localSteps) +
         " }\n"
         "optimizer: { lr: " +
         std::to_string(kLr) +
         ", momentum: 0, schedule: constant }\n"
         "compression: { method: none }\n"
         "workload: { name: quadratic, data: \"" +
         data + "\" }\n" + extra;
}

std::vector<std::unique_ptr<PeerCore>> peersFor(const std::string& yaml,
                                                std::shared_ptr<engine::RunPlan>* plan) {
  return test_util::peersFromYaml(yaml, "baselines_test.yaml", plan);
}

bool allIdentical(const std::vector<std::unique_ptr<PeerCore>>& peers) {
  const auto x0 = peers.front()->model();
  for (const auto& p : peers) {
    const auto x = p->model();
    if (!std::equal(x.begin(), x.end(), x0.begin(), x0.end())) return false;
  }
  return true;
}

double maxRelativeDifference(std::span<const float> x, const Eigen::VectorXd& y) {
  double worst = 0;
  for (int k = 0; k < kDim; ++k) worst = std::max(worst, std::abs(double(x[k]) - y(k)));
  return worst / y.cwiseAbs().maxCoeff();
}

}  // namespace

TEST_CASE("allreduce: every peer holds the same model, gradient descent on the global objective") {
  std::string data;
  const Quadratic q = quadratic(&data);
  std::shared_ptr<engine::RunPlan> plan;
  auto peers = peersFor(yamlFor(data, "allreduce", 1), &plan);
  // The peers start from the common initial model.
  Eigen::VectorXd x(kDim);
  for (int k = 0; k < kDim; ++k) x(k) = peers[0]->model()[k];
  REQUIRE(allIdentical(peers));
  for (int t = 0; t < 60; ++t) {
    REQUIRE(engine::runLockstep(peers, t, 1).isOk());
    INFO("round " << t);
    REQUIRE(allIdentical(peers));  // bit for bit, every round
    Eigen::VectorXd g = Eigen::VectorXd::Zero(kDim);
    for (int i = 0; i < kPeers; ++i) g += q.a[i] * (q.a[i] * x - q.b.row(i).transpose());
    x -= kLr * g / kPeers;
    CHECK(maxRelativeDifference(peers[0]->model(), x) < 1e-5);
  }
  // Bytes: per round, the ring's 2 (n - 1) steps each carry one f32 chunk of kDim / kPeers values,
  // and its closing ack one f64 value; each message in an envelope with the collective header.
  const std::size_t chunk = kDim / kPeers;
  const std::size_t perRound =
      2 * (kPeers - 1) * (engine::kEnvelopeBytes + engine::kCollectiveHeaderBytes + 4 * chunk) +
      (engine::kEnvelopeBytes + engine::kCollectiveHeaderBytes + 8);
  for (const auto& p : peers) {
    CHECK(p->counters().bytesSent == 60 * perRound);
    CHECK(p->counters().bytesReceived == 60 * perRound);
    CHECK(p->counters().collectiveBytes == 0);
  }
}

TEST_CASE(
    "diloco: outer.lr 1 and outer.momentum 0 is allreduce bit for bit; its limit is the "
    "closed form") {
  std::string data;
  const Quadratic q = quadratic(&data);
  constexpr int kH = 4;
  std::shared_ptr<engine::RunPlan> planA, planB, planC;
  auto allreduce = peersFor(yamlFor(data, "allreduce", kH), &planA);
  auto identity = peersFor(
      yamlFor(data, "diloco", kH, "outer: { optimizer: nesterov, lr: 1, momentum: 0 }\n"), &planB);
  REQUIRE(engine::runLockstep(allreduce, 0, 30).isOk());
  REQUIRE(engine::runLockstep(identity, 0, 30).isOk());
  for (int i = 0; i < kPeers; ++i) {
    const auto x = allreduce[i]->model();
    const auto y = identity[i]->model();
    CHECK(std::equal(x.begin(), x.end(), y.begin(), y.end()));
  }

  // The limit: sum_i (1 - p_i) u_i / sum_i (1 - p_i), reached with DiLoCo's outer step.
  Eigen::VectorXd num = Eigen::VectorXd::Zero(kDim);
  double den = 0;
  for (int i = 0; i < kPeers; ++i) {
    const double p = std::pow(1.0 - kLr * q.a[i] * q.a[i], kH);
    num += (1.0 - p) * q.b.row(i).transpose() / q.a[i];
    den += 1.0 - p;
  }
  const Eigen::VectorXd xs = num / den;
  auto diloco = peersFor(
      yamlFor(data, "diloco", kH, "outer: { optimizer: nesterov, lr: 0.7, momentum: 0.9 }\n"),
      &planC);
  REQUIRE(engine::runLockstep(diloco, 0, 400).isOk());
  CHECK(allIdentical(diloco));
  INFO("max |x - x*| / max |x*| = " << maxRelativeDifference(diloco[0]->model(), xs));
  CHECK(maxRelativeDifference(diloco[0]->model(), xs) < 1e-5);
  // And one local step's fixed point (the global optimum), far from it, is not where it went.
  Eigen::VectorXd opt = Eigen::VectorXd::Zero(kDim);
  double a2 = 0;
  for (int i = 0; i < kPeers; ++i) {
    opt += q.a[i] * q.b.row(i).transpose();
    a2 += q.a[i] * q.a[i];
  }
  CHECK(maxRelativeDifference(diloco[0]->model(), opt / a2) > 1e-3);
}
