// The contract of issue 13: with the same config and seed, and no neighbour suspect or dead,
// `grapevine sim` and `grapevine launch` (real processes, over tcp and ucx) produce bit-identical
// models and summaries (D-PSGD, CHOCO, DeepSqueeze, gt). Each case runs the simulator once and
// launch once per backend, then compares every model file byte for byte and the summary's results
// field by field.
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "tests/test_util/cli.h"
#include "tests/test_util/ports.h"
#include "tests/test_util/quadratic.h"
#include "tests/test_util/skip.h"

namespace {

using grapevine::test_util::grapevineBin;
using grapevine::test_util::readSummary;
using grapevine::test_util::runQuiet;

std::string scratch(const std::string& name) {
  return grapevine::test_util::freshDir("identity_test_" + name);
}

std::string readFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Runs `config` through `grapevine sim` and `grapevine launch` on each usable backend and checks
// the results are bit-identical.
void checkIdentical(const std::string& name, const std::string& yaml, int peers,
                    bool tcpOnly = false) {
  const std::string dir = scratch(name);
  grapevine::test_util::writeQuadraticData(dir + "/quad16.json", 16, 20);
  const std::string config = dir + "/config.yaml";
  std::ofstream(config) << yaml;
  const std::string bin = grapevineBin();
  REQUIRE(runQuiet(bin + " sim " + config + " --out " + dir + "/sim --quiet") == 0);
  const auto sim = readSummary(dir + "/sim");

  std::vector<std::string> backends = {"tcp"};
  std::string info;
  if (tcpOnly) {
    // The bytes are the same on every backend; the backends' own identity is checked above.
  } else if (grapevine::test_util::transportUsable("ucx", &info)) {
    backends.push_back("ucx");
  } else {
    GV_PART_MISSING("ucx", "the ucx transport is not usable here:\n" << info);
  }
  for (const auto& backend : backends) {
    INFO("backend " << backend);
    const std::string out = dir + "/launch-" + backend;
    const int port = grapevine::test_util::freeBasePort(peers);
    REQUIRE(runQuiet(bin + " launch " + config + " --out " + out + " --set transport.backend=" +
                     backend + " --set peers.base_port=" + std::to_string(port) + " --quiet") == 0);
    const auto real = readSummary(out);
    // The contract's precondition: nobody was suspect or dead (a generous round timeout).
    REQUIRE(real["peers_finished"] == peers);
    for (const auto& p : real["per_peer"]) REQUIRE(p["suspect_rounds"] == 0);
    for (int r = 0; r < peers; ++r) {
      INFO("rank " << r);
      const std::string model = "/model-" + std::to_string(r) + ".bin";
      CHECK(readFile(dir + "/sim" + model) == readFile(out + model));
    }
    for (const char* key :
         {"test_accuracy_mean", "test_accuracy_min", "test_accuracy_max", "averaged_model_accuracy",
          "averaged_model_loss", "consensus_distance_final", "consensus_error", "optimum_distance",
          "bytes_sent_total", "bytes_received_total", "bytes_dense_equivalent", "rounds",
          "peers_finished"}) {
      INFO(key);
      // A key missing from both would compare equal: each side must have it or lack it alike,
      // and what every run reports must be there.
      CHECK(sim.contains(key) == real.contains(key));
      CHECK(sim.value(key, nlohmann::json()) == real.value(key, nlohmann::json()));
    }
    for (const char* key : {"consensus_distance_final", "bytes_sent_total", "bytes_received_total",
                            "bytes_dense_equivalent", "rounds", "peers_finished"}) {
      INFO(key);
      CHECK(real.contains(key));
    }
    // The workload's own result: accuracy for a classifier, the distance to the optimum for the
    // quadratic.
    CHECK((real.contains("test_accuracy_mean") || real.contains("optimum_distance")));
    for (int r = 0; r < peers; ++r) {
      INFO("per_peer " << r);
      for (const char* key : {"test_accuracy", "test_loss", "bytes_sent", "bytes_received",
                              "rounds", "dropped_frames"}) {
        INFO(key);
        CHECK(sim["per_peer"][r][key] == real["per_peer"][r][key]);
      }
    }
  }
}

std::string quadratic(const std::string& momentum, const std::string& extra) {
  return "run: { seed: 3, rounds: 300 }\n"
         "peers: { count: 16 }\n"
         "topology: { kind: torus, dims: [4, 4] }\n"  // 4 neighbours: the sum order matters
         "workload: { name: quadratic, data: quad16.json }\n"
         "algorithm: { name: dsgd, round_timeout: 120 " +
         extra +
         "}\n"
         "compression: { method: none }\n"
         "optimizer: { lr: 0.001, momentum: 0.9, nesterov: false, schedule: constant, "
         "momentum_kind: " +
         momentum + " }\n";
}

}  // namespace

TEST_CASE("sim and launch are bit-identical: quadratic, D-PSGD, local momentum", "[slow]") {
  checkIdentical("local", quadratic("local", ""), 16);
}

TEST_CASE("sim and launch are bit-identical: quadratic, D-PSGD, quasi-global momentum, overlap",
          "[slow]") {
  checkIdentical("qgm", quadratic("quasi-global", ", overlap: true"), 16);
}

TEST_CASE("sim and launch are bit-identical: quadratic, D-PSGD, lazy Metropolis weights",
          "[slow]") {
  std::string yaml = quadratic("local", "");
  const std::string torus = "topology: { kind: torus, dims: [4, 4] }";
  REQUIRE(yaml.find(torus) != std::string::npos);
  yaml.replace(yaml.find(torus), torus.size(),
               "topology: { kind: torus, dims: [4, 4], weights: lazy-metropolis }");
  checkIdentical("lazy", yaml, 16);
}

TEST_CASE("sim and launch are bit-identical: an outer optimizer (outer.*) over D-PSGD and CHOCO",
          "[slow]") {
  std::string yaml = quadratic("local", ", local_steps: 4");
  checkIdentical("outer-dsgd", yaml + "outer: { optimizer: nesterov, lr: 0.7, momentum: 0.9 }\n",
                 16, /*tcpOnly=*/true);
  checkIdentical("outer-choco",
                 "run: { seed: 5, rounds: 100 }\n"
                 "peers: { count: 6 }\n"
                 "topology: { kind: ring }\n"
                 "optimizer: { lr: 0.05, momentum: 0.9, nesterov: true, batch_size: 32 }\n"
                 "workload: { name: fashion-mnist-mlp, hidden: [32], eval_every: 50, "
                 "eval_samples: 2000 }\n"
                 "algorithm: { name: choco, consensus_step: 0.2, local_steps: 8, "
                 "round_timeout: 120 }\n"
                 "compression: { method: sign }\n"
                 "outer: { optimizer: sgd, lr: 1.0, momentum: 0.5 }\n",
                 6, /*tcpOnly=*/true);
}

TEST_CASE("sim and launch are bit-identical: the baselines allreduce and diloco", "[slow]") {
  const std::string common =
      "run: { seed: 5, rounds: 60 }\n"
      "peers: { count: 6 }\n"
      "topology: { kind: ring }\n"
      "optimizer: { lr: 0.05, momentum: 0.9, nesterov: true, batch_size: 32 }\n"
      "compression: { method: none }\n"
      "workload: { name: fashion-mnist-mlp, hidden: [32], eval_every: 30, "
      "eval_samples: 2000 }\n";
  checkIdentical("allreduce", common + "algorithm: { name: allreduce, round_timeout: 120 }\n", 6);
  checkIdentical("diloco",
                 common +
                     "algorithm: { name: diloco, local_steps: 8, round_timeout: 120 }\n"
                     "outer: { optimizer: nesterov, lr: 0.7, momentum: 0.9 }\n",
                 6, /*tcpOnly=*/true);
}

TEST_CASE("sim and launch are bit-identical: Fashion-MNIST MLP, CHOCO + top-k, DeepSqueeze",
          "[slow]") {
  const std::string common =
      "run: { seed: 5, rounds: 200 }\n"
      "peers: { count: 6 }\n"
      "topology: { kind: torus, dims: [2, 3] }\n"
      "optimizer: { lr: 0.05, momentum: 0.9, nesterov: true, batch_size: 32 }\n"
      "workload: { name: fashion-mnist-mlp, hidden: [32], eval_every: 100, "
      "eval_samples: 2000 }\n";
  checkIdentical("choco",
                 common +
                     "algorithm: { name: choco, consensus_step: 0.2, round_timeout: 120 }\n"
                     "compression: { method: top-k, ratio: 0.05 }\n",
                 6);
  checkIdentical("deepsqueeze",
                 common +
                     "algorithm: { name: deepsqueeze, consensus_step: 0.2, round_timeout: 120 }\n"
                     "compression: { method: sign }\n",
                 6);
}

TEST_CASE("sim and launch are bit-identical: every compressor and lossless stage, real processes",
          "[compressors]") {
  // Each method's bytes cross real processes (tcp: the bytes are the backend's cargo, whichever
  // backend carries them; the cases above run ucx too) and decode to exactly
  // what the simulator computed: a wrong seed for rand-k's indices or qsgd's stochastic rounding,
  // a dropped low-rank factor, a lossless stage that does not invert would each change the models.
  // The MLP's matrices give low-rank something to factor; 4 peers, 30 rounds keep each run short.
  const std::string common =
      "run: { seed: 7, rounds: 30 }\n"
      "peers: { count: 4 }\n"
      "topology: { kind: ring }\n"
      "optimizer: { lr: 0.05, momentum: 0.9, nesterov: true, batch_size: 32 }\n"
      "workload: { name: fashion-mnist-mlp, hidden: [16], eval_every: 30, eval_samples: 500 }\n"
      "algorithm: { name: choco, consensus_step: 0.2, round_timeout: 120 }\n";
  for (const auto& [name, compression] : std::vector<std::pair<std::string, std::string>>{
           {"qsgd", "{ method: qsgd, levels: 16 }"},
           {"rand-k", "{ method: rand-k, ratio: 0.05 }"},
           {"low-rank", "{ method: low-rank, rank: 2 }"},
           {"fp16", "{ method: fp16 }"},
           {"bf16", "{ method: bf16 }"},
           {"int4", "{ method: int4 }"},
           {"top-k-zstd", "{ method: top-k, ratio: 0.05, lossless: zstd }"},
           {"fp16-exponent", "{ method: fp16, lossless: exponent }"}}) {
    INFO("compression " << compression);
    checkIdentical("compress-" + name, common + "compression: " + compression + "\n", 4,
                   /*tcpOnly=*/true);
  }
}

TEST_CASE("sim and launch are bit-identical: gt uncompressed (quadratic) and gt + sign (MLP)",
          "[slow]") {
  checkIdentical("gt",
                 "run: { seed: 3, rounds: 300 }\n"
                 "peers: { count: 16 }\n"
                 "topology: { kind: torus, dims: [4, 4] }\n"
                 "workload: { name: quadratic, data: quad16.json, noise: 0.1 }\n"
                 "algorithm: { name: gt, round_timeout: 120 }\n"
                 "compression: { method: none }\n"
                 "optimizer: { lr: 0.01, momentum: 0.5, schedule: constant }\n",
                 16);
  checkIdentical("gt-sign",
                 "run: { seed: 5, rounds: 200 }\n"
                 "peers: { count: 6 }\n"
                 "topology: { kind: torus, dims: [2, 3] }\n"
                 "optimizer: { lr: 0.01, momentum: 0.9, batch_size: 32 }\n"
                 "workload: { name: fashion-mnist-mlp, hidden: [32], eval_every: 100, "
                 "eval_samples: 2000 }\n"
                 "algorithm: { name: gt, consensus_step: 0.1, round_timeout: 120 }\n"
                 "compression: { method: sign }\n",
                 6);
}

TEST_CASE("sim and launch are bit-identical with run.final_average: every model the same average",
          "[slow]") {
  // CHOCO + top-k leaves the peers apart; the averaging ends every peer, in both, on the same bits:
  // on a 2 x 3 torus the tree reduce and broadcast (height 3, the model's 152650 values in 2
  // pipelined chunks), on a ring of 6 the ring's reduce-scatter and all-gather (6 chunks).
  for (const std::string topology : {"{ kind: torus, dims: [2, 3] }", "{ kind: ring }"}) {
    INFO(topology);
    const bool ring = topology.find("ring") != std::string::npos;
    const std::string yaml =
        "run: { seed: 5, rounds: 60, final_average: true }\n"
        "peers: { count: 6 }\n"
        "topology: " +
        topology +
        "\n"
        "optimizer: { lr: 0.05, momentum: 0.9, nesterov: true, batch_size: 32 }\n"
        "workload: { name: fashion-mnist-mlp, hidden: [192], eval_every: 30, eval_samples: 2000 "
        "}\n"
        "algorithm: { name: choco, consensus_step: 0.2, round_timeout: 120 }\n"
        "compression: { method: top-k, ratio: 0.05 }\n";
    const std::string name = ring ? "final-average-ring" : "final-average";
    checkIdentical(name, yaml, 6);
    const std::string out = std::string(GRAPEVINE_BINARY_DIR) + "/identity_test_" + name + "/";
    for (const std::string run : {"sim", "launch-tcp"}) {
      INFO(run);
      const std::string first = readFile(out + run + "/model-0.bin");
      for (int r = 1; r < 6; ++r)
        CHECK(readFile(out + run + "/model-" + std::to_string(r) + ".bin") == first);
      const auto s = readSummary(out + run);
      CHECK(s["consensus_distance_final"].get<double>() == 0.0);
    }
    // The final record has the averaging's wall time.
    std::ifstream records(out + "launch-tcp/peer-0.jsonl");
    std::string line, last;
    while (std::getline(records, line)) last = line;
    CHECK(nlohmann::json::parse(last).contains("average_seconds"));
    if (ring) {
      // Around the ring every peer sends and receives 5/6 of the model in f64 and 5/6 in f32
      // (a tree's root: the whole model from and to each of its 2 children, its leaves half that).
      const double expected = 2.0 * 5.0 / 6.0 * 152650 * (8 + 4);
      for (int r = 0; r < 6; ++r) {
        INFO("rank " << r);
        std::ifstream in(out + "launch-tcp/peer-" + std::to_string(r) + ".final.json");
        const auto f = nlohmann::json::parse(in);
        CHECK(f.value("averaged", false));
        const double bytes = f.at("collective_bytes").get<double>();
        CHECK(bytes > expected);
        CHECK(bytes < 1.02 * expected);
      }
    }
  }
}
