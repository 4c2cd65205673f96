// Attackers and robust mixing in the simulator (issue 43): an attack runs deterministically (the
// same bits with 1 or 2 threads, another attack another result); on Fashion-MNIST a member that
// flips its model's sign wrecks plain mixing, and clip keeps the honest peers within a point of the
// clean run, its two neighbours quarantine it (and nobody else), and the records show the clipping;
// a replayed initial model, which distance never tells on a ring, is caught by loss screening.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "runtime/sim/simulator.h"
#include "tests/test_util/config.h"
#include "tests/test_util/sim.h"

using namespace grapevine;

namespace {

sim::SimResult simulate(const std::string& yaml, int threads = 2, const std::string& out = "") {
  return test_util::simulateYaml(yaml, threads, out, "attacks_test.yaml");
}

bool sameModels(const sim::SimResult& a, const sim::SimResult& b) {
  if (a.peers.size() != b.peers.size()) return false;
  for (std::size_t i = 0; i < a.peers.size(); ++i) {
    const auto& x = a.peers[i].model;
    const auto& y = b.peers[i].model;
    if (x.size() != y.size() || std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) != 0)
      return false;
  }
  return true;
}

std::string consensus(const std::string& robust, const std::string& faults) {
  return "run: { seed: 3, rounds: 80 }\npeers: { count: 8 }\ntopology: { kind: ring }\n"
         "algorithm: { name: choco, consensus_step: 0.4, robust: " +
         robust +
         " }\ncompression: { method: top-k, ratio: 0.2 }\noptimizer: { lr: 0.05 }\n"
         "workload: { name: consensus, dim: 64 }\n" +
         faults;
}

// 16 peers on a ring, CHOCO + top-10%, the MLP: configs/sweeps/robust.yaml's cells, shorter.
std::string mlp(const std::string& robust, const std::string& faults) {
  return "run: { seed: 1, rounds: 300 }\npeers: { count: 16 }\ntopology: { kind: ring }\n"
         "algorithm: { name: choco, consensus_step: 0.3, robust: " +
         robust +
         " }\noptimizer: { lr: 0.02, momentum: 0.9, nesterov: true, batch_size: 64 }\n"
         "compression: { method: top-k, ratio: 0.1, lossless: none }\n"
         "workload: { name: fashion-mnist-mlp, hidden: [64], partition: iid, eval_every: 0 }\n" +
         faults;
}

double number(const nlohmann::json& s, const char* key) {
  return s.contains(key) && s[key].is_number() ? s[key].get<double>() : -1.0;
}

}  // namespace

TEST_CASE("an attack in the simulator is deterministic, whatever the thread count", "[attacks]") {
  const std::string noise = "faults: [{ kind: noise, peer: 2, at_round: 5, rounds: 40 }]\n";
  const auto one = simulate(consensus("clip", noise), 1);
  const auto two = simulate(consensus("clip", noise), 2);
  CHECK(sameModels(one, two));
  CHECK(one.summary["attackers"] == nlohmann::json::array({2}));
  // Another attack, or none, gives other models.
  const auto bias = simulate(consensus("clip",
                                       "faults: [{ kind: bias, peer: 2, at_round: 5, "
                                       "rounds: 40 }]\n"));
  CHECK_FALSE(sameModels(one, bias));
  const auto clean = simulate(consensus("clip", ""));
  CHECK_FALSE(sameModels(one, clean));
  CHECK_FALSE(clean.summary.contains("attackers"));
  CHECK(clean.summary["quarantined_by_trust"].empty());
}

TEST_CASE("a sign-flipping member: plain mixing is wrecked, clip holds and quarantines it",
          "[attacks]") {
  const std::string attack = "faults: [{ kind: sign-flip, peer: 5, at_round: 0 }]\n";
  const std::string dir = (std::filesystem::temp_directory_path() / "attacks_test_clip").string();
  std::filesystem::remove_all(dir);
  const auto clean = simulate(mlp("none", ""));
  const auto plain = simulate(mlp("none", attack));
  const auto clipped = simulate(mlp("clip", attack), 2, dir);
  const double cleanAccuracy = number(clean.summary, "test_accuracy_mean");
  const double plainHonest = number(plain.summary, "honest_test_accuracy_mean");
  const double clipHonest = number(clipped.summary, "honest_test_accuracy_mean");
  INFO("clean " << cleanAccuracy << ", attacked: plain " << plainHonest << ", clip " << clipHonest);
  CHECK(cleanAccuracy > 0.8);
  CHECK(plainHonest < cleanAccuracy - 0.05);
  CHECK(clipHonest > cleanAccuracy - 0.01);
  // Its two neighbours quarantined it, nobody else was.
  INFO(clipped.summary.dump());
  CHECK(clipped.summary["quarantined_by_trust"] ==
        nlohmann::json::parse(R"([{"peer": 4, "neighbour": 5}, {"peer": 6, "neighbour": 5}])"));
  CHECK(clipped.peers[4].deadNeighbours == 1);
  bool sawTrust = false;
  for (const auto& t : clipped.peers[4].neighbourTrust) {
    if (t["neighbour"] != 5) {
      CHECK(t["quarantined"] == false);
      continue;
    }
    sawTrust = true;
    CHECK(t["quarantined"] == true);
    CHECK(t["rounds_clipped"].get<int>() >= 30);
    CHECK(t["clip_mean"].get<double>() > 0.9);
  }
  CHECK(sawTrust);
  // The records name the clipped neighbour while it was mixed.
  std::ifstream records(dir + "/peer-6.jsonl");
  std::string line;
  int clippedRounds = 0;
  while (std::getline(records, line)) {
    const auto r = nlohmann::json::parse(line);
    if (r.contains("clipped") && r["clipped"].contains("5")) ++clippedRounds;
  }
  CHECK(clippedRounds > 0);
}

TEST_CASE(
    "a replayed initial model on a ring: distance alone misses it, loss screening "
    "quarantines it",
    "[attacks]") {
  const std::string attack = "faults: [{ kind: replay, peer: 5, at_round: 0 }]\n";
  const std::string dir = (std::filesystem::temp_directory_path() / "attacks_test_probe").string();
  std::filesystem::remove_all(dir);
  const auto clean = simulate(mlp("clip, robust_probe: 64", ""));
  const auto clipOnly = simulate(mlp("clip", attack));
  const auto screened = simulate(mlp("clip, robust_probe: 64", attack), 2, dir);
  const double cleanAccuracy = number(clean.summary, "test_accuracy_mean");
  const double clipHonest = number(clipOnly.summary, "honest_test_accuracy_mean");
  const double screenedHonest = number(screened.summary, "honest_test_accuracy_mean");
  INFO("clean " << cleanAccuracy << ", replayed: clip " << clipHonest << ", clip + probe "
                << screenedHonest);
  CHECK(cleanAccuracy > 0.8);
  // The clean run quarantines nobody; distance alone never catches the replay.
  CHECK(clean.summary["quarantined_by_trust"].empty());
  CHECK(clipHonest < cleanAccuracy - 0.02);
  for (const auto& q : clipOnly.summary["quarantined_by_trust"]) CHECK(q["neighbour"] != 5);
  CHECK(screenedHonest > cleanAccuracy - 0.01);
  INFO(screened.summary.dump());
  CHECK(screened.summary["quarantined_by_trust"] ==
        nlohmann::json::parse(R"([{"peer": 4, "neighbour": 5}, {"peer": 6, "neighbour": 5}])"));
  for (const auto& t : screened.peers[6].neighbourTrust) {
    if (t["neighbour"] != 5) continue;
    CHECK(t["quarantined"] == true);
    CHECK(t["rounds_loss_flagged"].get<int>() >= 16);
  }
  // The records carry each neighbour's loss ratio on the probe, the replayer's far above 1.
  std::ifstream records(dir + "/peer-6.jsonl");
  std::string line;
  double highest = 0.0;
  while (std::getline(records, line)) {
    const auto r = nlohmann::json::parse(line);
    if (r.contains("probe_loss_ratio") && r["probe_loss_ratio"].contains("5"))
      highest = std::max(highest, r["probe_loss_ratio"]["5"].get<double>());
  }
  CHECK(highest > 2.0);
}
