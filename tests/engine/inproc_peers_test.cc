// gt and push-sum over the inproc transport: every peer of a run is a thread of this process
// (engine::runPeerProcess, the process driver with its loop thread, bootstrap, heartbeats and
// deadlines, as `grapevine peer` runs it), and the messages cross between them through the inproc
// fabric. `grapevine peer`/`launch` refuse inproc (their peers are separate processes, which inproc
// cannot connect), so this is the inproc path of issue 18's exactness tests: gt on the
// heterogeneous quadratic (deterministic gradients, constant step) reaches the exact optimum,
// solved here from the data file, uncompressed and with top-k, with and without momentum; and
// push-sum, plain and overlapped, averages exactly on a directed graph. Both compute bit for bit
// the models of the lockstep driver.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "runtime/engine/driver.h"
#include "runtime/engine/lockstep.h"
#include "runtime/engine/summary.h"
#include "tests/test_util/config.h"
#include "tests/test_util/ports.h"
#include "tests/test_util/quadratic.h"

using namespace grapevine;

namespace {

std::string freshDir(const std::string& name) {
  const std::string dir = std::string(GRAPEVINE_BINARY_DIR) + "/inproc_peers_test_" + name;
  std::filesystem::remove_all(dir);
  return dir;
}

// Runs every peer of `yaml` as a thread over inproc; returns their final models (model-<r>.bin).
std::vector<std::vector<float>> runThreads(const std::string& yaml, const std::string& dir) {
  const auto c = test_util::loadYaml(yaml, "inproc_peers_test.yaml");
  REQUIRE(c.transport.backend == "inproc");
  const auto plan = test_util::makePlan(c);
  const int n = c.peers.count;
  const std::size_t size = test_util::makePeers(*plan)[0]->model().size();
  std::vector<Status> results(n, Status::ok());
  std::vector<std::thread> peers;
  for (int rank = 0; rank < n; ++rank) {
    peers.emplace_back([&, rank] {
      engine::PeerRunOptions o;
      o.rank = rank;
      o.outDir = dir;
      results[rank] = engine::runPeerProcess(*plan, o);
    });
  }
  for (auto& t : peers) t.join();
  std::vector<std::vector<float>> models;
  for (int rank = 0; rank < n; ++rank) {
    INFO("peer " << rank << ": " << results[rank].toString());
    REQUIRE(results[rank].isOk());
    std::ifstream f(dir + "/peer-" + std::to_string(rank) + ".final.json");
    REQUIRE(f);
    const auto final = nlohmann::json::parse(f);
    INFO(final.dump());
    CHECK(final.at("suspect_rounds") == 0);
    CHECK(final.at("dead_neighbours") == 0);
    auto m = engine::readModel(dir + "/model-" + std::to_string(rank) + ".bin", size);
    INFO(m.status().toString());
    REQUIRE(m.isOk());
    models.push_back(std::move(*m));
  }
  return models;
}

// The same run in the lockstep driver (no transport): its final models.
std::vector<std::vector<float>> runLockstep(const std::string& yaml) {
  const auto c = test_util::loadYaml(yaml, "inproc_peers_test.yaml");
  const auto plan = test_util::makePlan(c);
  auto peers = test_util::makePeers(*plan);
  REQUIRE(engine::runLockstep(peers, 0, c.run.rounds).isOk());
  std::vector<std::vector<float>> models;
  for (const auto& p : peers) models.emplace_back(p->model().begin(), p->model().end());
  return models;
}

bool bitIdentical(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("gt over inproc (peers as threads) reaches the exact optimum of the quadratic",
          "[slow]") {
  constexpr int kPeers = 8, kDim = 10;
  for (const std::string compression : {"none", "top-k"}) {
    for (const double momentum : {0.0, 0.5}) {
      DYNAMIC_SECTION("compression " << compression << ", momentum " << momentum) {
        const std::string dir =
            freshDir("gt_" + compression + "_" + std::to_string(static_cast<int>(momentum * 10)));
        std::filesystem::create_directories(dir);
        const std::string data = dir + "/quad8.json";
        test_util::writeQuadraticData(data, kPeers, kDim);
        const std::string yaml =
            "run: { seed: 1, rounds: 800, log_level: warn }\n"
            "peers: { count: 8, host: 127.0.0.1, base_port: " +
            std::to_string(test_util::freeBasePort(kPeers)) +
            " }\n"
            "transport: { backend: inproc }\n"
            "topology: { kind: ring }\n"
            "workload: { name: quadratic, data: \"" +
            data +
            "\" }\n"
            "algorithm: { name: gt, round_timeout: 120 }\n"
            "compression: { method: " +
            compression +
            ", ratio: 0.5, selector: exact, dense_below: 0 }\n"
            "optimizer: { lr: 0.02, momentum: " +
            std::to_string(momentum) + ", schedule: constant }\n";
        const auto models = runThreads(yaml, dir);
        // x* of sum_i 1/2 |a_i x - b_i|^2: sum_i a_i (a_i x - b_i) = 0.
        std::ifstream in(data);
        const auto j = nlohmann::json::parse(in);
        double a2 = 0;
        std::vector<double> xs(kDim, 0.0);
        for (int i = 0; i < kPeers; ++i) {
          const double a = j["a"][i].get<double>();
          a2 += a * a;
          for (int k = 0; k < kDim; ++k) xs[k] += a * j["b"][i][k].get<double>();
        }
        double s = 0;
        for (auto& v : xs) {
          v /= a2;
          s += v * v;
        }
        for (int r = 0; r < kPeers; ++r) {
          REQUIRE(models[r].size() == static_cast<std::size_t>(kDim));
          double e = 0;
          for (int k = 0; k < kDim; ++k) e += (models[r][k] - xs[k]) * (models[r][k] - xs[k]);
          INFO("rank " << r << ": |x_r - x*|^2 / |x*|^2 = " << e / s);
          CHECK(e / s < 1e-8);
        }
        const auto lockstep = runLockstep(yaml);
        for (int r = 0; r < kPeers; ++r) CHECK(bitIdentical(models[r], lockstep[r]));
      }
    }
  }
}

TEST_CASE("push-sum over inproc (peers as threads), plain and overlapped, averages exactly",
          "[slow]") {
  for (const bool overlap : {false, true}) {
    DYNAMIC_SECTION((overlap ? "overlapped" : "plain")) {
      const std::string dir = freshDir(overlap ? "push_sum_overlap" : "push_sum");
      const std::string yaml =
          "run: { seed: 3, rounds: 300, log_level: warn }\n"
          "peers: { count: 6, host: 127.0.0.1, base_port: " +
          std::to_string(test_util::freeBasePort(6)) +
          " }\n"
          "transport: { backend: inproc }\n"
          "topology: { kind: edges, directed: true, weights: uniform, edges: "
          "[[0, 1], [1, 2], [2, 3], [3, 4], [4, 5], [5, 0], [0, 2], [0, 3], [2, 5], [4, 1]] }\n"
          "algorithm: { name: push-sum, round_timeout: 60, overlap: " +
          std::string(overlap ? "true" : "false") +
          ", overlap_rounds: 2 }\n"
          "optimizer: { lr: 0.0, momentum: 0.0, nesterov: false }\n"
          "workload: { name: consensus, dim: 16 }\n";
      const auto models = runThreads(yaml, dir);
      // The consensus workload's target: the average of the initial models.
      const auto c = test_util::loadYaml(yaml, "inproc_peers_test.yaml");
      const auto plan = test_util::makePlan(c);
      const auto peers = test_util::makePeers(*plan);
      const auto target = peers[0]->workload().optimum();
      double worst = 0;
      for (const auto& m : models) {
        REQUIRE(m.size() == target.size());
        for (std::size_t k = 0; k < m.size(); ++k)
          worst = std::max(worst, std::abs(static_cast<double>(m[k]) - target[k]));
      }
      INFO("max |z_i - average| " << worst);
      CHECK(worst < 2e-6);
      const auto lockstep = runLockstep(yaml);
      for (std::size_t r = 0; r < models.size(); ++r) CHECK(bitIdentical(models[r], lockstep[r]));
    }
  }
}
