// Directed graphs and push-sum through the CLI, as a user runs them: `grapevine topo` reports in-
// and out-degrees and strong connectivity, `grapevine validate` refuses what cannot work (exit 2,
// the keys and why), and `grapevine launch` over tcp (and ucx, libfabric where usable) with real
// processes on a directed graph reaches the exact average of the peers' initial models, plain and
// overlapped (algorithm.overlap), bit-identical to `grapevine sim`.
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "tests/test_util/cli.h"
#include "tests/test_util/ports.h"
#include "tests/test_util/skip.h"

namespace {

using grapevine::test_util::freshDir;
using grapevine::test_util::grapevineBin;
using grapevine::test_util::readFile;

struct Outcome {
  int exitCode = -1;
  std::string out;  // stdout and stderr together
};

Outcome run(const std::string& args) {
  const std::string cmd = grapevineBin() + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p);
  Outcome o;
  char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) o.out.append(buf, n);
  const int st = pclose(p);
  o.exitCode = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return o;
}

// The 6-peer directed graph of configs/directed6-pushsum.yaml.
const std::string kEdges =
    "[[0, 1], [1, 2], [2, 3], [3, 4], [4, 5], [5, 0], [0, 2], [0, 3], [2, 5], [4, 1]]";

std::string writeConfig(const std::string& dir, const std::string& name, const std::string& body) {
  const std::string path = dir + "/" + name;
  std::ofstream(path) << body;
  return path;
}

std::string directedConfig(const std::string& algorithm, const std::string& edges,
                           const std::string& extra = "") {
  return "peers: { count: 6 }\n"
         "topology: { kind: edges, directed: true, weights: uniform, edges: " +
         edges + " }\nalgorithm: { name: " + algorithm +
         " }\nworkload: { name: consensus, dim: 16 }\n" + extra;
}

}  // namespace

TEST_CASE(
    "grapevine topo reports in- and out-degrees and strong connectivity of a directed graph") {
  const std::string dir = freshDir("push_sum_topo");
  const std::string strong = writeConfig(dir, "strong.yaml", directedConfig("push-sum", kEdges));
  Outcome o = run("topo " + strong + " --json");
  INFO(o.out);
  REQUIRE(o.exitCode == 0);
  auto j = nlohmann::json::parse(o.out);
  CHECK(j["directed"] == true);
  CHECK(j["strongly_connected"] == true);
  CHECK(j["out_degree_min"] == 1);
  CHECK(j["out_degree_max"] == 3);
  CHECK(j["in_degree_min"] == 1);
  CHECK(j["in_degree_max"] == 2);
  CHECK(j["sends_per_round"] == 3);
  o = run("topo " + strong);
  INFO(o.out);
  CHECK(o.out.find("in-degree 1..2, out-degree 1..3, strongly connected") != std::string::npos);

  // Without 5 -> 0 nobody reaches peer 0: topo loads the config as validate does, and says why.
  const std::string weak = writeConfig(
      dir, "weak.yaml",
      directedConfig("push-sum", "[[0, 1], [1, 2], [2, 3], [3, 4], [4, 5], [0, 2], [4, 1]]"));
  o = run("topo " + weak + " --json");
  INFO(o.out);
  CHECK(o.exitCode == 2);
  CHECK(o.out.find("not strongly connected") != std::string::npos);

  // An undirected graph: in = out = degree, strongly connected = connected.
  o = run("topo --kind ring --peers 5 --json");
  INFO(o.out);
  REQUIRE(o.exitCode == 0);
  j = nlohmann::json::parse(o.out);
  CHECK(j["directed"] == false);
  CHECK(j["strongly_connected"] == true);
  CHECK(j["in_degree_max"] == 2);
  CHECK(j["out_degree_min"] == 2);
}

TEST_CASE("validate refuses what push-sum and directed graphs cannot do: exit 2, keys and why") {
  const std::string dir = freshDir("push_sum_validate");
  const std::string ok = writeConfig(dir, "ok.yaml", directedConfig("push-sum", kEdges));
  Outcome o = run("validate " + ok);
  INFO(o.out);
  CHECK(o.exitCode == 0);

  // Algorithms that need symmetric doubly stochastic weights.
  for (const std::string algorithm : {"dsgd", "choco", "deepsqueeze"}) {
    const std::string path =
        writeConfig(dir, algorithm + ".yaml", directedConfig(algorithm, kEdges));
    o = run("validate " + path);
    INFO(algorithm << ":\n" << o.out);
    CHECK(o.exitCode == 2);
    CHECK(o.out.find("topology.directed: true cannot be used with algorithm.name: " + algorithm) !=
          std::string::npos);
    CHECK(o.out.find("symmetric, doubly stochastic") != std::string::npos);
  }
  // Not strongly connected.
  const std::string weak = writeConfig(
      dir, "weak.yaml",
      directedConfig("push-sum", "[[0, 1], [1, 2], [2, 3], [3, 4], [4, 5], [0, 2], [4, 1]]"));
  o = run("validate " + weak);
  INFO(o.out);
  CHECK(o.exitCode == 2);
  CHECK(o.out.find("topology.directed: the directed graph is not strongly connected") !=
        std::string::npos);
  // Lossy compression, overlap.
  o = run("validate " + ok + " --set compression.method=top-k");
  INFO(o.out);
  CHECK(o.exitCode == 2);
  CHECK(o.out.find("compression.method: top-k cannot be used with algorithm.name: push-sum") !=
        std::string::npos);
  o = run("validate " + ok + " --set compression.lossless=zstd");
  INFO(o.out);
  CHECK(o.exitCode == 0);
  // Overlap is overlapped SGP; its staleness means nothing without it (a warning, exit 0).
  o = run("validate " + ok + " --set algorithm.overlap=true --set algorithm.overlap_rounds=3");
  INFO(o.out);
  CHECK(o.exitCode == 0);
  CHECK(o.out.find("algorithm.overlap_rounds") == std::string::npos);
  CHECK(o.out.find("overlapped: shares mixed 3 rounds late") != std::string::npos);
  o = run("validate " + ok + " --set algorithm.overlap_rounds=3");
  INFO(o.out);
  CHECK(o.exitCode == 0);
  CHECK(o.out.find("algorithm.overlap_rounds: has no effect") != std::string::npos);
  o = run("validate " + ok + " --set algorithm.overlap=true --set algorithm.overlap_rounds=0");
  INFO(o.out);
  CHECK(o.exitCode == 2);
  // directed needs kind edges; directed edges [a, b] and [b, a] are two edges, a repeat is not.
  o = run("validate " + ok + " --set topology.kind=ring");
  INFO(o.out);
  CHECK(o.exitCode == 2);
  CHECK(o.out.find("topology.directed: true needs topology.kind: edges") != std::string::npos);
  const std::string both =
      writeConfig(dir, "both.yaml", directedConfig("push-sum", "[[0, 1], [1, 0]]", "") + "");
  o = run("validate " + both + " --set peers.count=2");
  INFO(o.out);
  CHECK(o.exitCode == 0);
  const std::string twice =
      writeConfig(dir, "twice.yaml", directedConfig("push-sum", "[[0, 1], [1, 0], [0, 1]]"));
  o = run("validate " + twice + " --set peers.count=2");
  INFO(o.out);
  CHECK(o.exitCode == 2);
  CHECK(o.out.find("listed twice") != std::string::npos);
  // Push-sum runs on any kind, time-varying included.
  o = run("validate " + ok +
          " --set topology.directed=false --set topology.kind=one-peer-exponential");
  INFO(o.out);
  CHECK(o.exitCode == 0);
}

TEST_CASE("push-sum over tcp with real processes on a directed graph reaches the exact average",
          "[slow]") {
  const std::string dir = freshDir("push_sum_launch");
  const int port = grapevine::test_util::freeBasePort(6);
  const std::string config =
      writeConfig(dir, "directed6.yaml",
                  "run: { name: push-sum-tcp, seed: 3, rounds: 300 }\n"
                  "peers: { count: 6, host: 127.0.0.1, base_port: " +
                      std::to_string(port) +
                      " }\ntransport: { backend: tcp }\n"
                      "topology: { kind: edges, directed: true, weights: uniform, edges: " +
                      kEdges +
                      " }\nalgorithm: { name: push-sum, round_timeout: 30 }\n"
                      "optimizer: { lr: 0.0, momentum: 0.0, nesterov: false }\n"
                      "workload: { name: consensus, dim: 16 }\n");
  const Outcome o = run("launch " + config + " --out " + dir + "/out --quiet");
  INFO(o.out);
  REQUIRE(o.exitCode == 0);
  const auto summary = grapevine::test_util::readSummary(dir + "/out");
  INFO(summary.dump(2));
  REQUIRE(summary["per_peer"].size() == 6);
  for (const auto& p : summary["per_peer"]) {
    CHECK(p["finished"] == true);
    CHECK(p["rounds"] == 300);
    CHECK(p["dead_neighbours"] == 0);
    CHECK(p["suspect_rounds"] == 0);
    // The consensus workload's test loss is |z_i - average of the initial models|^2 (16 values
    // of unit size at the start).
    CHECK(p["test_loss"].get<double>() < 1e-10);
  }
  // The simulator computes the same models bit for bit (same shares, summed in the same order).
  const Outcome sim = run("sim " + config + " --out " + dir + "/sim --quiet");
  INFO(sim.out);
  REQUIRE(sim.exitCode == 0);
  for (int r = 0; r < 6; ++r) {
    const std::string model = "/model-" + std::to_string(r) + ".bin";
    const std::string a = readFile(dir + "/out" + model);
    CHECK(!a.empty());
    CHECK(a == readFile(dir + "/sim" + model));
  }
}

TEST_CASE(
    "push-sum over tcp on one-peer-exponential: one message per peer per round, the exact "
    "average, the same models as the simulator",
    "[slow]") {
  const std::string dir = freshDir("push_sum_launch_ope");
  const int port = grapevine::test_util::freeBasePort(8);
  const std::string config =
      writeConfig(dir, "ope8.yaml",
                  "run: { name: push-sum-ope, seed: 4, rounds: 60 }\n"
                  "peers: { count: 8, host: 127.0.0.1, base_port: " +
                      std::to_string(port) +
                      " }\ntransport: { backend: tcp }\n"
                      "topology: { kind: one-peer-exponential }\n"
                      "algorithm: { name: push-sum, round_timeout: 30 }\n"
                      "optimizer: { lr: 0.0, momentum: 0.0, nesterov: false }\n"
                      "workload: { name: consensus, dim: 16 }\n");
  const Outcome o = run("launch " + config + " --out " + dir + "/out --quiet");
  INFO(o.out);
  REQUIRE(o.exitCode == 0);
  const auto summary = grapevine::test_util::readSummary(dir + "/out");
  INFO(summary.dump(2));
  REQUIRE(summary["per_peer"].size() == 8);
  const auto bytes0 = summary["per_peer"][0]["bytes_sent"].get<std::uint64_t>();
  for (const auto& p : summary["per_peer"]) {
    CHECK(p["finished"] == true);
    // Every edge is one-way in each round: the receiver closes it after the sender's last message,
    // which counts as finished, not as a lost neighbour.
    CHECK(p["dead_neighbours"] == 0);
    CHECK(p["suspect_rounds"] == 0);
    CHECK(p["bytes_sent"] == bytes0);      // 60 messages of one size each
    CHECK(p["bytes_received"] == bytes0);  // and one received per round
    CHECK(p["test_loss"].get<double>() < 1e-10);
  }
  CHECK(bytes0 % 60 == 0);
  const Outcome sim = run("sim " + config + " --out " + dir + "/sim --quiet");
  INFO(sim.out);
  REQUIRE(sim.exitCode == 0);
  for (int r = 0; r < 8; ++r) {
    const std::string model = "/model-" + std::to_string(r) + ".bin";
    CHECK(readFile(dir + "/out" + model) == readFile(dir + "/sim" + model));
  }
}

TEST_CASE(
    "push-sum over real processes on every usable transport, plain and overlapped: the exact "
    "average, the same models as the simulator",
    "[slow]") {
  // tcp without overlap is the first launch test above.
  std::vector<std::pair<std::string, bool>> runs = {{"tcp", true}};
  for (const std::string backend : {"ucx", "libfabric"}) {
    std::string info;
    if (!grapevine::test_util::transportUsable(backend, &info)) {
      GV_PART_MISSING(backend, backend << " not usable here:\n" << info);
      continue;
    }
    runs.emplace_back(backend, false);
    runs.emplace_back(backend, true);
  }
  for (const auto& [backend, overlap] : runs) {
    DYNAMIC_SECTION(backend << (overlap ? ", overlap" : "")) {
      const std::string dir = freshDir("push_sum_launch_" + backend + (overlap ? "_overlap" : ""));
      const int port = grapevine::test_util::freeBasePort(6);
      // Overlap with tau 2 and a checkpoint every 100 rounds (those rounds, and the last, wait
      // for every share in flight).
      const std::string config =
          writeConfig(dir, "directed6.yaml",
                      "run: { name: push-sum-transports, seed: 3, rounds: 300 }\n"
                      "peers: { count: 6, host: 127.0.0.1, base_port: " +
                          std::to_string(port) + " }\ntransport: { backend: " + backend +
                          " }\n"
                          "topology: { kind: edges, directed: true, weights: uniform, edges: " +
                          kEdges + " }\nalgorithm: { name: push-sum, round_timeout: 30, overlap: " +
                          (overlap ? "true" : "false") +
                          ", overlap_rounds: 2 }\n"
                          "checkpoint: { every: 100 }\n"
                          "optimizer: { lr: 0.0, momentum: 0.0, nesterov: false }\n"
                          "workload: { name: consensus, dim: 16 }\n");
      const Outcome o = run("launch " + config + " --out " + dir + "/out --quiet");
      INFO(o.out);
      REQUIRE(o.exitCode == 0);
      const auto summary = grapevine::test_util::readSummary(dir + "/out");
      INFO(summary.dump(2));
      REQUIRE(summary["per_peer"].size() == 6);
      for (const auto& p : summary["per_peer"]) {
        CHECK(p["finished"] == true);
        CHECK(p["rounds"] == 300);
        CHECK(p["dead_neighbours"] == 0);
        CHECK(p["suspect_rounds"] == 0);
        CHECK(p["test_loss"].get<double>() < 1e-10);
      }
      const Outcome sim = run("sim " + config + " --out " + dir + "/sim --quiet");
      INFO(sim.out);
      REQUIRE(sim.exitCode == 0);
      for (int r = 0; r < 6; ++r) {
        const std::string model = "/model-" + std::to_string(r) + ".bin";
        const std::string a = readFile(dir + "/out" + model);
        CHECK(!a.empty());
        CHECK(a == readFile(dir + "/sim" + model));
      }
    }
  }
}

TEST_CASE("a push-sum run that diverges because its weight drained away says so") {
  // configs/directed6-pushsum.yaml with peer 2 paused past peers.dead_after: peer 1's only
  // out-edge is [1, 2], so the live graph is no longer strongly connected; 0 and 4 push weight into
  // peer 1 that never comes back, their weights decay, and the de-biased step (gradient over
  // weight) runs away. The divergence names the weight instead of only blaming the learning rate.
  const std::string dir = freshDir("push_sum_drained");
  const std::string config = std::string(GRAPEVINE_SOURCE_DIR) + "/configs/directed6-pushsum.yaml";
  const std::string common = "sim " + config + " --quiet --set run.rounds=300 --out " + dir;
  Outcome o = run(common +
                  "/paused --set 'faults.events=[{kind: pause, peer: 2, at_round: 100, "
                  "rounds: 50}]'");
  INFO(o.out);
  REQUIRE(o.exitCode == 3);
  CHECK(o.out.find("its push-sum weight fell to 0.0") != std::string::npos);
  CHECK(o.out.find("no longer strongly connected") != std::string::npos);
  // A plain overshoot (a learning rate far too high) diverges with the weight near 1: no such hint.
  o = run(common + "/overshoot --set optimizer.lr=10");
  INFO(o.out);
  REQUIRE(o.exitCode == 3);
  CHECK(o.out.find("diverged at round") != std::string::npos);
  CHECK(o.out.find("push-sum weight") == std::string::npos);
}
