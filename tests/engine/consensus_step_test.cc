// `algorithm.consensus_step: auto` (runtime/algorithms/consensus_step.h): the controller's rule,
// the proposal in the envelope, mean conservation with per-edge steps, no divergence where a large
// fixed step diverges, and accuracy against the best fixed step on a small Fashion-MNIST case.
#include "runtime/algorithms/consensus_step.h"

#include <Eigen/Dense>
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <set>
#include <string>

#include "runtime/engine/envelope.h"
#include "runtime/engine/lockstep.h"
#include "runtime/engine/setup.h"
#include "runtime/sim/simulator.h"
#include "tests/test_util/config.h"

using namespace grapevine;
using algorithms::AutoStep;
using engine::PeerCore;
using test_util::makePeers;

namespace {

Eigen::MatrixXd models(const std::vector<std::unique_ptr<PeerCore>>& peers) {
  const auto n = peers.size();
  const auto d = peers[0]->model().size();
  Eigen::MatrixXd X(n, d);
  for (size_t i = 0; i < n; ++i) {
    for (size_t k = 0; k < d; ++k) X(i, k) = peers[i]->model()[k];
  }
  return X;
}

double distance(const Eigen::MatrixXd& X) {
  const Eigen::RowVectorXd mean = X.colwise().mean();
  return (X.rowwise() - mean).squaredNorm() / static_cast<double>(X.rows());
}

// The consensus workload: lr 0, peers start apart; `step` is "auto" or a number.
config::Config consensusConfig(const std::string& topology, const std::string& compression,
                               const std::string& step) {
  return test_util::loadYaml("peers: { count: 8 }\ntopology: " + topology +
                                 "\nalgorithm: { name: choco, consensus_step: " + step +
                                 " }\noptimizer: { lr: 0.0, momentum: 0.0, nesterov: false }\n"
                                 "compression: " +
                                 compression + "\nworkload: { name: consensus, dim: 400 }\n",
                             "consensus_step_test.yaml");
}

}  // namespace

TEST_CASE("auto step: the proposal follows the measured quality and the peer's row") {
  // A lossless compressor proposes the largest step; a useless one the smallest.
  AutoStep exact;
  exact.observeCompression(1.0, 0.0, 1.0);
  CHECK(exact.proposal() == AutoStep::kMaxStep);
  CHECK(exact.quality() == 1.0);
  AutoStep useless;
  useless.observeCompression(1.0, 4.0, 1.0);
  CHECK(useless.proposal() == AutoStep::kMinStep);
  // In between: kGain * delta / a_i, smaller where more of the row goes to neighbours.
  AutoStep ring, dense;
  ring.observeRow(2.0 / 3);
  dense.observeRow(0.8);
  for (AutoStep* s : {&ring, &dense}) s->observeCompression(1.0, 0.95, 1.0);
  CHECK(ring.quality() == Approx(0.05));
  CHECK(ring.proposal() == Approx(AutoStep::kGain * 0.05 / (2.0 / 3)));
  CHECK(dense.proposal() == Approx(AutoStep::kGain * 0.05 / 0.8));
}

TEST_CASE("auto step: backs off while the public copy's lag grows, recovers while it shrinks") {
  AutoStep s;
  s.observeRow(2.0 / 3);
  double v2 = 1.0;
  // A steady lag: no back-off.
  for (int t = 0; t < 400; ++t) s.observeCompression(v2, 0.9 * v2, 10.0);
  CHECK(s.backoffs() == 0);
  const double steady = s.proposal();
  CHECK(steady == Approx(AutoStep::kGain * 0.1 / (2.0 / 3)));
  // The lag grows 0.5% a round, relative to a steady public copy (what a too-large step does):
  // the step halves, more than once.
  for (int t = 0; t < 500; ++t) {
    v2 *= 1.005;
    s.observeCompression(v2, 0.9 * v2, 10.0);
  }
  CHECK(s.backoffs() >= 3);
  CHECK(s.proposal() < 0.2 * steady);
  // A public copy that grows with the lag is not instability: once the smoothed lag has seen it
  // (a window), no further back-off.
  double x2 = 10.0;
  auto grow = [&](int rounds) {
    for (int t = 0; t < rounds; ++t) {
      v2 *= 1.005;
      x2 *= 1.005;
      s.observeCompression(v2, 0.9 * v2, x2);
    }
  };
  grow(AutoStep::kWindowRounds);
  const auto backoffs = s.backoffs();
  grow(500);
  CHECK(s.backoffs() == backoffs);
  // The lag shrinks: the step climbs back to the formula's, no further.
  for (int t = 0; t < 2000; ++t) {
    v2 *= 0.999;
    s.observeCompression(v2, 0.9 * v2, x2);
  }
  CHECK(s.backoffs() == backoffs);
  CHECK(s.proposal() == Approx(steady));
}

TEST_CASE("envelope: the proposed step travels bit for bit and a bad one is refused") {
  using namespace engine;
  Envelope e;
  e.sender = 3;
  e.proposedStep = 0.123456f;
  std::vector<std::uint8_t> bytes(kEnvelopeBytes);
  e.payloadCrc = payloadChecksum({});
  writeEnvelope(e, bytes);
  auto ok = readEnvelope(bytes);
  REQUIRE(ok.isOk());
  CHECK(ok->proposedStep == 0.123456f);
  for (float bad : {1.5f, -0.25f, std::numeric_limits<float>::quiet_NaN()}) {
    e.proposedStep = bad;
    writeEnvelope(e, bytes);
    auto r = readEnvelope(bytes);
    REQUIRE_FALSE(r.isOk());
    CHECK(envelopeErrorReason(r.status()) == "bad_step");
  }
}

TEST_CASE("auto step: per-edge steps conserve the mean exactly and reach consensus") {
  // Erdos-Renyi: the peers' degrees differ, so their rows and proposals differ and the edge rule
  // (the smaller proposal on both ends) is what keeps the consensus term symmetric.
  const auto c = consensusConfig("{ kind: erdos-renyi, probability: 0.4 }",
                                 "{ method: top-k, ratio: 0.1, dense_below: 0 }", "auto");
  auto plan = test_util::makePlan(c);
  auto peers = makePeers(*plan);
  const Eigen::MatrixXd X0 = models(peers);
  REQUIRE(engine::runLockstep(peers, 0, 60).isOk());
  std::set<double> proposals;
  for (const auto& p : peers) {
    const auto report = p->algorithm().stepReport();
    REQUIRE(report.has_value());
    proposals.insert(report->proposed);
    CHECK(report->compressorQuality > 0.1);
    CHECK(report->compressorQuality < 1.0);
  }
  CHECK(proposals.size() > 1);
  const Status st = engine::runLockstep(peers, 60, 1500);
  INFO(st.toString());
  REQUIRE(st.isOk());
  const Eigen::MatrixXd X = models(peers);
  INFO("distance " << distance(X0) << " -> " << distance(X));
  CHECK(distance(X) < 1e-6 * distance(X0));
  // The mean moves only by float rounding of each peer's once-per-round update.
  const double drift = (X.colwise().mean() - X0.colwise().mean()).cwiseAbs().maxCoeff();
  INFO("mean drift " << drift);
  CHECK(drift < 1e-5);
}

TEST_CASE("auto step converges where a large fixed step diverges") {
  const std::string topo = "{ kind: ring }";
  const std::string comp = "{ method: top-k, ratio: 0.02, dense_below: 0 }";
  double fixedGrowth = 0;
  {
    auto plan = test_util::makePlan(consensusConfig(topo, comp, "1.0"));
    auto peers = makePeers(*plan);
    const double d0 = distance(models(peers));
    // Diverging CHOCO ends with non-finite values, which the compressor refuses: either way the
    // fixed step does not reach consensus.
    const bool ran = engine::runLockstep(peers, 0, 400).isOk();
    const double d = distance(models(peers));
    fixedGrowth = ran && std::isfinite(d) ? d / d0 : std::numeric_limits<double>::infinity();
  }
  INFO("fixed step 1.0: distance ratio " << fixedGrowth);
  CHECK(fixedGrowth > 1.0);
  auto plan = test_util::makePlan(consensusConfig(topo, comp, "auto"));
  auto peers = makePeers(*plan);
  const double d0 = distance(models(peers));
  REQUIRE(engine::runLockstep(peers, 0, 400).isOk());
  const double d = distance(models(peers));
  const auto report = peers[0]->algorithm().stepReport();
  REQUIRE(report.has_value());
  INFO("auto: distance ratio " << d / d0 << ", step " << report->step << ", quality "
                               << report->compressorQuality << ", backoffs " << report->backoffs);
  CHECK(d < 1e-2 * d0);
}

TEST_CASE("auto step trains within a point and a half of the best fixed step (Fashion-MNIST)") {
  // 8 peers on a ring, top-1%, the default optimizer: the case where a fixed step is easiest to get
  // wrong (0.4 collapses, 0.02 is slow). Every step is measured here, in the same test.
  auto accuracy = [](const std::string& step) {
    const auto c = test_util::loadYaml(
        "run: { rounds: 250 }\npeers: { count: 8 }\ntopology: { kind: ring }\n"
        "algorithm: { name: choco, consensus_step: " +
            step +
            " }\ncompression: { method: top-k, ratio: 0.01 }\n"
            "workload: { name: fashion-mnist-mlp, hidden: [64], partition: iid, eval_every: 0 }\n",
        "consensus_step_fmnist.yaml");
    auto plan = test_util::makePlan(c);
    sim::SimOptions o;
    o.threads = 2;
    auto r = sim::runSimulation(*plan, o);
    INFO(r.status().toString());
    REQUIRE(r.isOk());
    const auto& acc = r->summary["test_accuracy_mean"];
    return acc.is_number() ? acc.get<double>() : 0.0;
  };
  const double autoAccuracy = accuracy("auto");
  double best = 0;
  std::string bestStep;
  for (const char* step : {"0.02", "0.05", "0.1", "0.2", "0.4", "0.8"}) {
    const double a = accuracy(step);
    INFO(step << ": " << a);
    if (a > best) {
      best = a;
      bestStep = step;
    }
  }
  INFO("auto " << autoAccuracy << ", best fixed " << bestStep << ": " << best);
  CHECK(autoAccuracy > best - 0.015);
}
