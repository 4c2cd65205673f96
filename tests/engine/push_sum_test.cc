// Push-sum (Stochastic Gradient Push) in one process: the lockstep driver and the simulator, the
// same bytes a real run sends. Exact averaging on a directed, not-regular graph (and the weighted
// average that row-stochastic gossip reaches there instead, computed independently), one message
// per peer per round on one-peer-exponential, convergence on the quadratic and on Fashion-MNIST,
// and the algorithm state that checkpoints carry.
#include <Eigen/Dense>
#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "runtime/engine/lockstep.h"
#include "runtime/engine/setup.h"
#include "runtime/sim/simulator.h"
#include "tests/test_util/config.h"
#include "tests/test_util/quadratic.h"

using namespace grapevine;
using engine::PeerCore;
using test_util::makePeers;

namespace {

// 6 peers, [a, b]: a sends to b. The cycle 0->1->2->3->4->5->0 makes it strongly connected; the
// chords make in- and out-degrees differ (out 3,1,2,1,2,1; in 1,2,2,2,1,2), so the stationary
// distribution of row-stochastic gossip on it is far from uniform.
constexpr const char* kDirected6 =
    "peers: { count: 6 }\n"
    "topology:\n"
    "  kind: edges\n"
    "  directed: true\n"
    "  weights: uniform\n"
    "  edges: [[0, 1], [1, 2], [2, 3], [3, 4], [4, 5], [5, 0], [0, 2], [0, 3], [2, 5], [4, 1]]\n";

Eigen::MatrixXd models(const std::vector<std::unique_ptr<PeerCore>>& peers) {
  const auto n = peers.size();
  const auto d = peers[0]->model().size();
  Eigen::MatrixXd X(n, d);
  for (size_t i = 0; i < n; ++i) {
    for (size_t k = 0; k < d; ++k) X(i, k) = peers[i]->model()[k];
  }
  return X;
}

// The schedule's round-0 weights as a dense row-stochastic matrix (self weight on the diagonal).
Eigen::MatrixXd rowMatrix(const topology::Schedule& s) {
  const int n = s.peers();
  Eigen::MatrixXd W = Eigen::MatrixXd::Zero(n, n);
  for (int i = 0; i < n; ++i) {
    const auto plan = s.plan(i, 0);
    W(i, i) = plan.selfWeight;
    for (const auto& [j, w] : plan.weights) W(i, j) = w;
  }
  return W;
}

double stateWeight(const PeerCore& p) {
  for (const auto& [name, v] : p.algorithm().state()) {
    if (name == "weight") return v.at(0);
  }
  FAIL("no 'weight' in the push-sum state");
  return 0;
}

}  // namespace

TEST_CASE(
    "push-sum on a directed, not-regular graph reaches the exact average; "
    "row-stochastic gossip on the same graph reaches a weighted one") {
  auto c = test_util::loadYaml(std::string(kDirected6) +
                                   "algorithm: { name: push-sum }\n"
                                   "optimizer: { lr: 0.0, momentum: 0.0, nesterov: false }\n"
                                   "workload: { name: consensus, dim: 16 }\n",
                               "push_sum_directed6.yaml");
  auto plan = test_util::makePlan(c);
  const int n = 6;
  const topology::Schedule& schedule = *plan->schedule;
  // The schedule is directed: out- and in-neighbours differ.
  CHECK(schedule.plan(0, 0).sendTo == std::vector<int>{1, 2, 3});
  CHECK(schedule.plan(0, 0).recvFrom == std::vector<int>{5});
  CHECK(schedule.plan(1, 0).recvFrom == std::vector<int>{0, 4});

  auto peers = makePeers(*plan);
  const Eigen::MatrixXd X0 = models(peers);
  const Eigen::RowVectorXd average = X0.colwise().mean();
  // The workload's own target is the average of the initial models.
  const auto target = peers[0]->workload().optimum();
  for (Eigen::Index k = 0; k < average.size(); ++k)
    REQUIRE(std::abs(target[k] - average(k)) < 1e-6);

  const int rounds = 300;
  REQUIRE(engine::runLockstep(peers, 0, rounds).isOk());
  const Eigen::MatrixXd Z = models(peers);
  const double pushSumError = (Z.rowwise() - average).cwiseAbs().maxCoeff();
  INFO("push-sum: max |z_i - average| " << pushSumError);
  CHECK(pushSumError < 2e-6);
  // The weights are conserved (they sum to n) and not uniform: the de-biasing does real work.
  double wsum = 0, wmin = 1e9, wmax = 0;
  for (const auto& p : peers) {
    const double w = stateWeight(*p);
    wsum += w;
    wmin = std::min(wmin, w);
    wmax = std::max(wmax, w);
  }
  INFO("push-sum weights: sum " << wsum << ", min " << wmin << ", max " << wmax);
  CHECK(std::abs(wsum - n) < 1e-4);
  CHECK(wmax - wmin > 0.3);

  // Plain gossip x <- W x with the graph's row-stochastic weights (each peer averages itself and
  // its in-neighbours), computed here by power iteration, converges to pi^T X0 where pi is W's
  // stationary distribution (left Perron vector), computed independently from an eigensolver.
  const Eigen::MatrixXd W = rowMatrix(schedule);
  for (int i = 0; i < n; ++i) REQUIRE(std::abs(W.row(i).sum() - 1.0) < 1e-12);
  Eigen::MatrixXd X = X0;
  for (int t = 0; t < rounds; ++t) X = W * X;
  Eigen::EigenSolver<Eigen::MatrixXd> es(W.transpose());
  Eigen::Index best = 0;
  for (Eigen::Index k = 0; k < es.eigenvalues().size(); ++k) {
    if (std::abs(es.eigenvalues()(k) - 1.0) < std::abs(es.eigenvalues()(best) - 1.0)) best = k;
  }
  Eigen::VectorXd pi = es.eigenvectors().col(best).real();
  pi /= pi.sum();
  INFO("stationary distribution " << pi.transpose());
  const Eigen::RowVectorXd weighted = pi.transpose() * X0;
  CHECK((X.rowwise() - weighted).cwiseAbs().maxCoeff() < 1e-9);
  // ... which is not the average: the gap is what push-sum's weights remove.
  const double bias = (weighted - average).cwiseAbs().maxCoeff();
  INFO("row-stochastic gossip: max |weighted - average| " << bias);
  CHECK(bias > 0.05);
  CHECK(bias > 1e4 * pushSumError);

  // The engine's own plain gossip (dsgd mixes with the schedule's row weights; validate refuses it
  // on a directed graph, so the config is changed after loading) reaches that weighted average.
  c.algorithm.name = algorithms::AlgorithmKind::kDsgd;
  auto dsgdPlan = test_util::makePlan(c);
  auto gossip = makePeers(*dsgdPlan);
  REQUIRE(engine::runLockstep(gossip, 0, rounds).isOk());
  const Eigen::MatrixXd G = models(gossip);
  CHECK((G.rowwise() - weighted).cwiseAbs().maxCoeff() < 1e-5);
  CHECK((G.rowwise() - average).cwiseAbs().maxCoeff() > 0.05);
}

TEST_CASE("topology analysis of a directed graph: in/out degrees and strong connectivity") {
  topology::Spec spec;
  spec.kind = topology::Kind::kEdges;
  spec.peers = 6;
  spec.directed = true;
  spec.weights = topology::WeightsKind::kUniform;
  for (auto [a, b] : std::vector<std::pair<int, int>>{
           {0, 1}, {1, 2}, {2, 3}, {3, 4}, {4, 5}, {5, 0}, {0, 2}, {0, 3}, {2, 5}, {4, 1}})
    spec.edges.push_back({a, b, std::nullopt});
  auto strong = topology::makeSchedule(spec);
  REQUIRE(strong.isOk());
  auto a = topology::analyze(**strong, spec);
  CHECK(a.directed);
  CHECK(a.stronglyConnected);
  CHECK(a.outDegreeMin == 1);
  CHECK(a.outDegreeMax == 3);
  CHECK(a.inDegreeMin == 1);
  CHECK(a.inDegreeMax == 2);
  CHECK(a.sendsPerRound == 3);
  // Drop 5 -> 0: still connected as an undirected graph, but nobody reaches peer 0.
  spec.edges.erase(spec.edges.begin() + 5);
  auto weak = topology::makeSchedule(spec);
  REQUIRE(weak.isOk());
  a = topology::analyze(**weak, spec);
  CHECK(a.connected);
  CHECK(!a.stronglyConnected);
  CHECK(a.inDegreeMin == 0);
  CHECK(!topology::isStronglyConnected(topology::sendGraph(**weak)));
  // [a, b] and [b, a] are two edges; the same ordered pair twice is an error.
  spec.edges = {{0, 1, std::nullopt}, {1, 0, std::nullopt}};
  spec.peers = 2;
  auto both = topology::makeSchedule(spec);
  REQUIRE(both.isOk());
  CHECK(topology::isStronglyConnected(topology::sendGraph(**both)));
  spec.edges.push_back({0, 1, std::nullopt});
  CHECK(!topology::makeSchedule(spec).isOk());
}

TEST_CASE(
    "push-sum with a dead peer: the survivors' mass is conserved (a share for the dead "
    "out-neighbour stays with its sender)") {
  const auto c = test_util::loadYaml(std::string(kDirected6) +
                                         "algorithm: { name: push-sum }\n"
                                         "optimizer: { lr: 0.0, momentum: 0.0, nesterov: false }\n"
                                         "workload: { name: consensus, dim: 8 }\n",
                                     "push_sum_dead.yaml");
  auto plan = test_util::makePlan(c);
  auto peers = makePeers(*plan);
  REQUIRE(engine::runLockstep(peers, 0, 20).isOk());
  // Peer 3 (in-neighbours 0 and 2, out-neighbour 4) dies after round 19: its neighbours drop the
  // edge, and it hears nobody (what it still sends is refused as from an unknown sender).
  const int dead = 3;
  for (int j : peers[dead]->neighbours()) {
    peers[j]->markDead(dead);
    peers[dead]->markDead(j);
  }
  auto survivorsWeight = [&] {
    double s = 0;
    for (int i = 0; i < 6; ++i) {
      if (i != dead) s += stateWeight(*peers[i]);
    }
    return s;
  };
  const double before = survivorsWeight();
  REQUIRE(engine::runLockstep(peers, 20, 50).isOk());
  CHECK(peers[0]->sendTo() == std::vector<int>{1, 2});  // 3 is left out of the recipients
  const double after = survivorsWeight();
  INFO("survivors' total weight: " << before << " at the death, " << after << " 50 rounds later");
  // Had peers 0 and 2 kept splitting by their full out-degree, they would lose 1/4 and 1/3 of
  // their mass to the dead peer every round.
  CHECK(std::abs(after - before) < 1e-5);
  CHECK(before > 3.0);
}

TEST_CASE(
    "push-sum on one-peer-exponential: one message per peer per round, exact average in "
    "log2(n) rounds") {
  const auto c = test_util::loadYaml(
      "peers: { count: 8 }\ntopology: { kind: one-peer-exponential }\n"
      "algorithm: { name: push-sum }\n"
      "optimizer: { lr: 0.0, momentum: 0.0, nesterov: false }\n"
      "workload: { name: consensus, dim: 32 }\n",
      "push_sum_ope.yaml");
  auto plan = test_util::makePlan(c);
  auto peers = makePeers(*plan);
  const Eigen::RowVectorXd average = models(peers).colwise().mean();
  const int rounds = 6;  // two periods of log2(8) = 3
  engine::LockstepHooks hooks;
  bool oneEach = true;
  hooks.afterRound = [&](std::int64_t) {
    for (const auto& p : peers) oneEach = oneEach && p->sendTo().size() == 1;
  };
  REQUIRE(engine::runLockstep(peers, 0, 3, hooks).isOk());
  // After one period: the exact average (shares of 1/2, w stays 1 on a regular graph).
  CHECK((models(peers).rowwise() - average).cwiseAbs().maxCoeff() < 1e-5);
  REQUIRE(engine::runLockstep(peers, 3, rounds - 3, hooks).isOk());
  CHECK(oneEach);
  const std::uint64_t bytes0 = peers[0]->counters().bytesSent;
  for (const auto& p : peers) {
    // One message a round, every one received and applied, all the same size.
    CHECK(p->counters().messagesApplied == static_cast<std::uint64_t>(rounds));
    CHECK(p->counters().bytesSent == bytes0);
    CHECK(p->counters().bytesSentTo.size() == 3);  // hops 1, 2, 4 over a period
    CHECK(p->counters().bytesReceived == bytes0);
  }
  CHECK(bytes0 % rounds == 0);  // bytesSent is rounds x one message of a fixed size
  // One message carries the model and the weight: 33 floats, plus framing, well under two models.
  CHECK(bytes0 / rounds < 2 * 32 * sizeof(float) + 256);
  CHECK(bytes0 / rounds > 33 * sizeof(float));
}

TEST_CASE("push-sum on one-peer-exponential converges on the heterogeneous quadratic") {
  const int n = 8, d = 8;
  const std::string data = std::string(GRAPEVINE_BINARY_DIR) + "/push_sum_quadratic.json";
  test_util::writeQuadraticData(data, n, d);
  const auto c = test_util::loadYaml(
      "run: { rounds: 1500 }\npeers: { count: 8 }\ntopology: { kind: one-peer-exponential }\n"
      "algorithm: { name: push-sum }\n"
      "optimizer: { lr: 0.1, momentum: 0.0, nesterov: false, schedule: cosine }\n"
      "workload: { name: quadratic, data: \"" +
          data + "\" }\n",
      "push_sum_quadratic.yaml");
  auto plan = test_util::makePlan(c);
  auto peers = makePeers(*plan);
  const auto optimum = peers[0]->workload().optimum();
  Eigen::RowVectorXd xStar(d);
  for (int k = 0; k < d; ++k) xStar(k) = optimum[k];
  auto error = [&] {
    const Eigen::MatrixXd Z = models(peers);
    return (Z.rowwise() - xStar).rowwise().squaredNorm().maxCoeff();
  };
  const double e0 = error();
  REQUIRE(engine::runLockstep(peers, 0, 1500).isOk());
  const double e = error();
  INFO("max_i |z_i - x*|^2: start " << e0 << ", end " << e);
  // Measured: 0.31 -> 5.3e-6 (cosine to 0 over 1500 rounds).
  CHECK(e < 1e-4 * e0);
  CHECK(e < 2e-5);
}

TEST_CASE("push-sum state (numerator, weight, inboxes) restores a run bit for bit") {
  // Directed graph, a gradient (quadratic) so z, x and w all move; run 20 rounds straight, or 10,
  // then the models and algorithm states into fresh peers, then 10 more.
  const std::string data = std::string(GRAPEVINE_BINARY_DIR) + "/push_sum_state_quadratic.json";
  test_util::writeQuadraticData(data, 6, 5);
  const auto c = test_util::loadYaml(std::string(kDirected6) +
                                         "algorithm: { name: push-sum }\n"
                                         "optimizer: { lr: 0.05, momentum: 0.0, nesterov: false, "
                                         "schedule: constant }\n"
                                         "workload: { name: quadratic, data: \"" +
                                         data + "\" }\n",
                                     "push_sum_state.yaml");
  auto plan = test_util::makePlan(c);
  auto straight = makePeers(*plan);
  REQUIRE(engine::runLockstep(straight, 0, 20).isOk());

  auto first = makePeers(*plan);
  REQUIRE(engine::runLockstep(first, 0, 10).isOk());
  auto second = makePeers(*plan);
  for (size_t i = 0; i < first.size(); ++i) {
    const auto state = first[i]->algorithm().state();
    REQUIRE(state.size() >= 3);
    CHECK(state[0].first == "numerator");
    CHECK(state[1].first == "weight");
    CHECK(state[2].first == "debiased");
    REQUIRE(second[i]->mutableAlgorithm().loadState(state).isOk());
    const auto m = first[i]->model();
    std::copy(m.begin(), m.end(), second[i]->mutableModel().begin());
  }
  // A state of the wrong shape is refused, naming the buffer.
  auto bad = first[0]->algorithm().state();
  bad[1].second.push_back(1.0f);
  const Status st = second[0]->mutableAlgorithm().loadState(bad);
  CHECK(!st.isOk());
  CHECK(st.message().find("weight") != std::string::npos);

  REQUIRE(engine::runLockstep(second, 10, 10).isOk());
  for (size_t i = 0; i < straight.size(); ++i) {
    const auto a = straight[i]->model();
    const auto b = second[i]->model();
    CHECK(std::equal(a.begin(), a.end(), b.begin(), b.end()));
    CHECK(stateWeight(*straight[i]) == stateWeight(*second[i]));
  }
}

TEST_CASE(
    "push-sum on one-peer-exponential trains Fashion-MNIST like dsgd on the exponential "
    "graph (simulator)") {
  auto accuracy = [](const std::string& algorithm, const std::string& kind,
                     const std::string& extra = "") {
    const auto c = test_util::loadYaml(
        "run: { rounds: 150 }\npeers: { count: 8 }\ntopology: { kind: " + kind +
            " }\nalgorithm: { name: " + algorithm + extra +
            " }\n"
            "workload: { name: fashion-mnist-mlp, hidden: [64], partition: iid, eval_every: 0 }\n",
        "push_sum_fmnist.yaml");
    auto plan = test_util::makePlan(c);
    sim::SimOptions o;
    o.threads = 2;
    auto r = sim::runSimulation(*plan, o);
    INFO(r.status().toString());
    REQUIRE(r.isOk());
    const auto& acc = r->summary["test_accuracy_mean"];
    REQUIRE(acc.is_number());
    return std::make_pair(acc.get<double>(), r->summary["bytes_sent_total"]);
  };
  const auto [pushSum, pushSumBytes] = accuracy("push-sum", "one-peer-exponential");
  const auto [dsgd, dsgdBytes] = accuracy("dsgd", "exponential");
  INFO("push-sum on one-peer-exponential " << pushSum << " (" << pushSumBytes
                                           << " bytes), dsgd on exponential " << dsgd << " ("
                                           << dsgdBytes << " bytes)");
  CHECK(pushSum > 0.75);  // chance is 0.1
  CHECK(pushSum > dsgd - 0.03);
  // Overlapped SGP (each share mixed one round late) trains as well.
  const auto [overlapped, overlappedBytes] =
      accuracy("push-sum", "one-peer-exponential", ", overlap: true");
  INFO("overlapped push-sum " << overlapped << " (" << overlappedBytes << " bytes)");
  CHECK(overlapped > 0.75);
  CHECK(overlapped > pushSum - 0.03);
  CHECK(overlappedBytes == pushSumBytes);
}

namespace {

// Push-sum mass held by a peer: its weight plus the weight of every share it holds but has not
// mixed yet (the last value of each "inbox/<j>" and "inflight/<j>/<k>" buffer).
std::pair<double, double> heldMass(const PeerCore& p) {
  double w = 0, pending = 0;
  for (const auto& [name, v] : p.algorithm().state()) {
    if (name == "weight") w = v.at(0);
    if (name.rfind("inbox/", 0) == 0 || name.rfind("inflight/", 0) == 0) pending += v.back();
  }
  return {w, pending};
}

}  // namespace

TEST_CASE(
    "overlapped push-sum (shares mixed tau rounds late) conserves mass every round and reaches "
    "the exact average on a directed graph") {
  for (const int tau : {1, 3}) {
    DYNAMIC_SECTION("overlap_rounds " << tau) {
      const int rounds = 400;
      auto c = test_util::loadYaml(
          std::string(kDirected6) + "run: { rounds: " + std::to_string(rounds) +
              " }\nalgorithm: { name: push-sum, overlap: true, overlap_rounds: " +
              std::to_string(tau) +
              " }\n"
              "optimizer: { lr: 0.0, momentum: 0.0, nesterov: false }\n"
              "workload: { name: consensus, dim: 16 }\n",
          "push_sum_overlap_directed6.yaml");
      auto plan = test_util::makePlan(c);
      auto peers = makePeers(*plan);
      REQUIRE(peers[0]->mixDelay() == tau);
      const Eigen::MatrixXd X0 = models(peers);
      const Eigen::RowVectorXd average = X0.colwise().mean();
      // Every round: the mass held (weights) plus the mass in flight (shares received but not
      // mixed) is n, and after round tau - 1 some of it is really in flight.
      double minHeld = 1e9;
      engine::LockstepHooks hooks;
      hooks.afterRound = [&](std::int64_t t) {
        double held = 0, pending = 0;
        for (const auto& p : peers) {
          const auto [w, q] = heldMass(*p);
          held += w;
          pending += q;
        }
        INFO("round " << t << ": held " << held << ", in flight " << pending);
        CHECK(std::abs(held + pending - 6.0) < 1e-4);
        if (t + 1 < rounds) minHeld = std::min(minHeld, held);
        if (t + 1 == rounds) CHECK(pending == 0.0);  // the last round mixes every share
      };
      REQUIRE(engine::runLockstep(peers, 0, rounds, hooks).isOk());
      CHECK(minHeld < 6.0 - 0.5);
      const Eigen::MatrixXd Z = models(peers);
      const double error = (Z.rowwise() - average).cwiseAbs().maxCoeff();
      INFO("overlap " << tau << ": max |z_i - average| " << error);
      CHECK(error < 2e-6);
      for (const auto& p : peers) CHECK(p->counters().suspectRounds == 0);

      // The delay is real: the trajectory differs from plain push-sum's after a few rounds.
      c.algorithm.overlap = false;
      auto plainPlan = test_util::makePlan(c);
      auto plain = makePeers(*plainPlan);
      auto delayed = makePeers(*plan);
      REQUIRE(engine::runLockstep(plain, 0, 5).isOk());
      REQUIRE(engine::runLockstep(delayed, 0, 5).isOk());
      CHECK((models(plain) - models(delayed)).cwiseAbs().maxCoeff() > 1e-3);
    }
  }
}

TEST_CASE("overlapped push-sum converges on the heterogeneous quadratic (one-peer-exponential)") {
  const int n = 8, d = 8;
  const std::string data = std::string(GRAPEVINE_BINARY_DIR) + "/push_sum_overlap_quadratic.json";
  test_util::writeQuadraticData(data, n, d);
  const auto c = test_util::loadYaml(
      "run: { rounds: 1500 }\npeers: { count: 8 }\ntopology: { kind: one-peer-exponential }\n"
      "algorithm: { name: push-sum, overlap: true }\n"
      "optimizer: { lr: 0.1, momentum: 0.0, nesterov: false, schedule: cosine }\n"
      "workload: { name: quadratic, data: \"" +
          data + "\" }\n",
      "push_sum_overlap_quadratic.yaml");
  auto plan = test_util::makePlan(c);
  auto peers = makePeers(*plan);
  const auto optimum = peers[0]->workload().optimum();
  Eigen::RowVectorXd xStar(d);
  for (int k = 0; k < d; ++k) xStar(k) = optimum[k];
  auto error = [&] {
    const Eigen::MatrixXd Z = models(peers);
    return (Z.rowwise() - xStar).rowwise().squaredNorm().maxCoeff();
  };
  const double e0 = error();
  REQUIRE(engine::runLockstep(peers, 0, 1500).isOk());
  const double e = error();
  INFO("overlap: max_i |z_i - x*|^2: start " << e0 << ", end " << e);
  CHECK(e < 1e-4 * e0);
  CHECK(e < 2e-5);
}

TEST_CASE("overlapped push-sum state (shares in flight included) restores a run bit for bit") {
  // tau = 2: after round 9 each peer holds the shares of round 9 (due at round 11) and, in
  // lockstep, those of round 8 (due at round 10): "inbox/<j>" and "inflight/<j>/1".
  const std::string data =
      std::string(GRAPEVINE_BINARY_DIR) + "/push_sum_overlap_state_quadratic.json";
  test_util::writeQuadraticData(data, 6, 5);
  const auto c = test_util::loadYaml(std::string(kDirected6) +
                                         "run: { rounds: 20 }\n"
                                         "algorithm: { name: push-sum, overlap: true, "
                                         "overlap_rounds: 2 }\n"
                                         "optimizer: { lr: 0.05, momentum: 0.0, nesterov: false, "
                                         "schedule: constant }\n"
                                         "workload: { name: quadratic, data: \"" +
                                         data + "\" }\n",
                                     "push_sum_overlap_state.yaml");
  auto plan = test_util::makePlan(c);
  auto straight = makePeers(*plan);
  REQUIRE(engine::runLockstep(straight, 0, 20).isOk());

  auto first = makePeers(*plan);
  REQUIRE(engine::runLockstep(first, 0, 10).isOk());
  auto second = makePeers(*plan);
  for (size_t i = 0; i < first.size(); ++i) {
    const engine::PeerState saved = first[i]->saveState();
    // Peer 1 hears from 0 and 4: both slots of both senders hold a share.
    if (i == 1) {
      int nonzero = 0;
      for (const auto& [name, v] : saved.algorithm) {
        if ((name.rfind("inbox/", 0) == 0 || name.rfind("inflight/", 0) == 0) && v.back() > 0)
          ++nonzero;
      }
      CHECK(nonzero == 4);
    }
    REQUIRE(second[i]->restoreState(saved).isOk());
  }
  REQUIRE(engine::runLockstep(second, 10, 10).isOk());
  for (size_t i = 0; i < straight.size(); ++i) {
    const auto a = straight[i]->model();
    const auto b = second[i]->model();
    CHECK(std::equal(a.begin(), a.end(), b.begin(), b.end()));
    CHECK(stateWeight(*straight[i]) == stateWeight(*second[i]));
  }
}
