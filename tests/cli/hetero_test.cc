// Heterogeneous peers with real processes (issue 42): a peer made slower by network.compute_scale
// (or its own in network.peers) sleeps the difference after each computation, says so in its
// records, and changes nothing but the time: the models are the simulator's, bit for bit.
#include <catch2/catch.hpp>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "tests/test_util/cli.h"
#include "tests/test_util/ports.h"

namespace {

using grapevine::test_util::freshDir;
using grapevine::test_util::readFile;
using grapevine::test_util::readSummary;
using grapevine::test_util::runQuiet;
const std::string kBin = grapevine::test_util::grapevineBin();

// The last round record (not the closing "final" one) of peer-<rank>.jsonl in `out`.
nlohmann::json lastRecord(const std::string& out, int rank) {
  std::istringstream in(readFile(out + "/peer-" + std::to_string(rank) + ".jsonl"));
  std::string line;
  nlohmann::json last;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    auto r = nlohmann::json::parse(line);
    if (!r.contains("final")) last = std::move(r);
  }
  REQUIRE(last.contains("round"));
  return last;
}

}  // namespace

TEST_CASE("network.compute_scale under launch: the slow peer sleeps, the models are sim's",
          "[hetero]") {
  const std::string dir = freshDir("hetero_test_throttle");
  const int port = grapevine::test_util::freeBasePort(4);
  const std::string config = dir + "/slow.yaml";
  std::ofstream(config) << "run: { name: slow-peer, seed: 2, rounds: 40 }\n"
                        << "peers: { count: 4, host: 127.0.0.1, base_port: " << port << " }\n"
                        << "topology: { kind: ring }\n"
                        << "transport: { backend: tcp }\n"
                        << "algorithm: { name: choco, consensus_step: 0.4 }\n"
                        << "optimizer: { lr: 0.05, batch_size: 32 }\n"
                        << "compression: { method: top-k, ratio: 0.1 }\n"
                        << "workload: { name: fashion-mnist-mlp, hidden: [64], eval_every: 20 }\n"
                        << "network:\n  peers: [{rank: 1, compute_scale: 4}]\n"
                        << "output: { dir: " << dir << "/out }\n";
  REQUIRE(runQuiet(kBin + " launch " + config + " --quiet") == 0);
  const auto s = readSummary(dir + "/out");
  INFO(s.dump(2));
  CHECK(s["peers_finished"] == 4);
  CHECK(s["suspect_rounds_total"] == 0);
  // Peer 1 slept 3x the CPU time of its steps: more than nothing, and at most 3x its step time
  // (which includes the sleep: step = cpu-or-more + 3 cpu, so sleep <= 3/4 of it).
  const auto slow = lastRecord(dir + "/out", 1);
  INFO(slow.dump());
  REQUIRE(slow.contains("throttle_seconds"));
  const double slept = slow["throttle_seconds"].get<double>();
  CHECK(slept > 0.0);
  CHECK(slept <= 0.75 * slow["step_seconds"].get<double>() + 1e-9);
  for (int r : {0, 2, 3}) {
    INFO("peer " << r);
    CHECK_FALSE(lastRecord(dir + "/out", r).contains("throttle_seconds"));
  }
  // Only the time changed: the same models as the simulator's (which scales its clock instead).
  REQUIRE(runQuiet(kBin + " sim " + config + " --out " + dir + "/sim --quiet") == 0);
  for (int r = 0; r < 4; ++r) {
    INFO("model of peer " << r);
    const std::string m = "/model-" + std::to_string(r) + ".bin";
    const std::string launched = readFile(dir + "/out" + m);
    CHECK(launched.size() > 100000);
    CHECK(launched == readFile(dir + "/sim" + m));
  }
  // The simulator's clock has the slow peer's compute in it: the others wait for it.
  const auto t = readSummary(dir + "/sim");
  CHECK(t["simulated_seconds"].get<double>() > 0.0);
}

TEST_CASE(
    "algorithm.staleness under launch: the slow peer skips rounds' steps, nobody waits for it",
    "[hetero]") {
  // Issue 42 with real processes: peer 1 of a 4-peer ring computes 4x slower (it sleeps 3x each
  // step's CPU time). With staleness 4 its neighbours mix its replica as it stands instead of
  // waiting for each of its messages, and it takes no local steps in the rounds whose every
  // neighbour's message was there before it began them. Exact replicas throughout.
  const std::string dir = freshDir("hetero_test_staleness");
  const int port = grapevine::test_util::freeBasePort(4);
  const std::string config = dir + "/async.yaml";
  std::ofstream(config) << "run: { name: async, seed: 1, rounds: 200 }\n"
                        << "peers: { count: 4, host: 127.0.0.1, base_port: " << port << " }\n"
                        << "topology: { kind: ring }\n"
                        << "transport: { backend: tcp }\n"
                        << "algorithm: { name: choco, consensus_step: 0.3, staleness: 4, "
                           "check_every: 10 }\n"
                        << "optimizer: { lr: 0.02, batch_size: 64 }\n"
                        << "compression: { method: top-k, ratio: 0.1 }\n"
                        << "workload: { name: fashion-mnist-mlp, hidden: [64], eval_every: 100 }\n"
                        << "network:\n  peers: [{rank: 1, compute_scale: 4}]\n"
                        << "output: { dir: " << dir << "/out }\n";
  REQUIRE(runQuiet(kBin + " launch " + config + " --quiet") == 0);
  const auto s = readSummary(dir + "/out");
  INFO(s.dump(2));
  CHECK(s["peers_finished"] == 4);
  CHECK(s["test_accuracy_mean"].get<double>() > 0.75);
  std::uint64_t staleAtNeighbours = 0;
  for (int r = 0; r < 4; ++r) {
    const auto f =
        nlohmann::json::parse(readFile(dir + "/out/peer-" + std::to_string(r) + ".final.json"));
    INFO("peer " << r << ": " << f.dump());
    CHECK(f["replica_mismatches"] == 0);
    CHECK(f["dead_neighbours"] == 0);
    if (r == 1) CHECK(f.value("rounds_compute_skipped", 0) > 0);
    if (r == 0 || r == 2) staleAtNeighbours += f.value("stale_mixes", 0);
  }
  CHECK(staleAtNeighbours > 0);
}

TEST_CASE("validate shows the slow peers and warns that a real peer cannot be faster", "[hetero]") {
  const std::string dir = freshDir("hetero_test_validate");
  const std::string config = dir + "/c.yaml";
  std::ofstream(config) << "peers: { count: 4 }\n"
                        << "topology: { kind: ring }\n"
                        << "network:\n  peers: [{rank: 3, compute_scale: 4}, {rank: 0, "
                           "compute_scale: 0.5}]\n";
  const std::string out = dir + "/validate.out";
  REQUIRE(runQuiet(kBin + " validate " + config + " > " + out + " 2>&1; exit 0") == 0);
  const std::string text = readFile(out);
  INFO(text);
  CHECK(text.find("peer 3 x4") != std::string::npos);
  CHECK(text.find("peer 0 x0.5") != std::string::npos);
  CHECK(text.find("cannot compute faster") != std::string::npos);
}
