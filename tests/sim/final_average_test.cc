// run.final_average in the simulator, which runs the peers' own tree and ring collectives in
// lockstep (engine::averagingCollectives): every live peer ends with the same bits, the exact
// average of the models the same run has without it; a lost leaf is left out of the average; a lost
// interior peer cuts its subtree off, which keeps its own models; a lost ring peer sends the others
// down the tree. Real processes: tests/cli/identity_test.cc.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "runtime/engine/driver.h"
#include "runtime/sim/simulator.h"
#include "tests/test_util/config.h"

using namespace grapevine;

namespace {

std::string yamlFor(const std::string& topology, int peers, const std::string& extra,
                    bool average = false) {
  return std::string("run: { seed: 9, rounds: 30") + (average ? ", final_average: true" : "") +
         " }\n"
         "peers: { count: " +
         std::to_string(peers) +
         " }\n"
         "topology: " +
         topology +
         "\n"
         "algorithm: { name: choco, consensus_step: 0.3, check_every: 0 }\n"
         "compression: { method: top-k, ratio: 0.25 }\n"
         "optimizer: { lr: 0.05 }\n"
         "workload: { name: consensus, dim: 40 }\n" +
         extra;
}

sim::SimResult simulate(const std::string& yaml) {
  const auto c = test_util::loadYaml(yaml, "final_average_test.yaml");
  auto plan = test_util::makePlan(c);
  sim::SimOptions o;
  o.threads = 2;
  auto r = sim::runSimulation(*plan, o);
  INFO(r.status().toString());
  REQUIRE(r.isOk());
  return std::move(*r);
}

bool sameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// The mean of `ranks`' models, in double.
std::vector<double> meanOf(const sim::SimResult& r, const std::vector<int>& ranks) {
  std::vector<double> m(r.peers[ranks.front()].model.size(), 0.0);
  for (int i : ranks) {
    for (std::size_t k = 0; k < m.size(); ++k) m[k] += r.peers[i].model[k];
  }
  for (auto& v : m) v /= static_cast<double>(ranks.size());
  return m;
}

void checkAverage(const std::vector<float>& got, const std::vector<double>& want) {
  REQUIRE(got.size() == want.size());
  for (std::size_t k = 0; k < got.size(); ++k) {
    INFO("k " << k);
    CHECK(std::abs(got[k] - want[k]) <= 1e-6 * std::max(1.0, std::abs(want[k])));
  }
}

}  // namespace

TEST_CASE("collectiveTree: breadth-first from rank 0, neighbours in increasing rank") {
  const auto c = test_util::loadYaml(yamlFor("{ kind: ring }", 8, ""), "tree.yaml");
  auto plan = test_util::makePlan(c);
  // 0 -> 1, 7; 1 -> 2; 7 -> 6; 2 -> 3; 6 -> 5; 3 -> 4 (3 is dequeued before 5).
  const int parents[8] = {-1, 0, 1, 2, 3, 6, 7, 0};
  const int depths[8] = {0, 1, 2, 3, 4, 3, 2, 1};
  for (int r = 0; r < 8; ++r) {
    const engine::CollectiveTree t = engine::collectiveTree(*plan, r);
    INFO("rank " << r);
    CHECK(t.parent == parents[r]);
    CHECK(t.depth == depths[r]);
    CHECK(t.height == 4);
  }
  CHECK(engine::collectiveTree(*plan, 0).children == std::vector<int>{1, 7});
  CHECK(engine::collectiveTree(*plan, 3).children == std::vector<int>{4});
  CHECK(engine::collectiveTree(*plan, 5).children.empty());
  // 4 reduce steps and 4 broadcast steps.
  const auto kinds = engine::averagingCollectives(*plan, 40);
  REQUIRE(kinds.size() == 8);
  CHECK(kinds[3] == engine::CollectiveKind::kTreeSum);
  CHECK(kinds[4] == engine::CollectiveKind::kTreeBroadcast);
  // A model of more than 1 MiB of f64 goes in pipelined chunks: height + chunks - 1 steps each.
  CHECK(engine::treeChunks(0) == 1);
  CHECK(engine::treeChunks(131072) == 1);
  CHECK(engine::treeChunks(131073) == 2);
  CHECK(engine::treeChunks(300000) == 3);
  CHECK(engine::treeChunks(std::size_t{1} << 30) == engine::kMaxTreeChunks);
  CHECK(engine::collectiveTree(*plan, 3, 300000).chunks == 3);
  const auto chunked = engine::averagingCollectives(*plan, 300000);
  REQUIRE(chunked.size() == 12);
  CHECK(chunked[5] == engine::CollectiveKind::kTreeSum);
  CHECK(chunked[6] == engine::CollectiveKind::kTreeBroadcast);
}

TEST_CASE("ringAveraging: a graph with the ring 0 -> 1 -> ... -> n-1 and a model over one chunk") {
  auto planOf = [](const std::string& topology, int peers) {
    return test_util::makePlan(test_util::loadYaml(yamlFor(topology, peers, ""), "ring.yaml"));
  };
  const auto ring8 = planOf("{ kind: ring }", 8);
  CHECK(engine::ringAveraging(*ring8, 300000));
  CHECK_FALSE(engine::ringAveraging(*ring8, 131072));  // one chunk: the tree's fewer steps
  CHECK(engine::ringAveraging(*planOf("{ kind: exponential }", 16), 300000));
  // A 4 x 4 torus has no edge 3 - 4; two peers are no ring.
  CHECK_FALSE(engine::ringAveraging(*planOf("{ kind: torus, dims: [4, 4] }", 16), 300000));
  CHECK_FALSE(engine::ringAveraging(*planOf("{ kind: ring }", 2), 300000));
  const auto kinds = engine::averagingCollectives(*ring8, 300000, true);
  REQUIRE(kinds.size() == 15);  // 7 reduce-scatter steps, 7 all-gather steps, the ack
  CHECK(kinds[6] == engine::CollectiveKind::kRingSum);
  CHECK(kinds[7] == engine::CollectiveKind::kRingGather);
  CHECK(kinds[13] == engine::CollectiveKind::kRingGather);
  CHECK(kinds[14] == engine::CollectiveKind::kRingAck);
  // Without `ring` (or when the peers found a ring neighbour lost): the tree.
  CHECK(engine::averagingCollectives(*ring8, 300000)[0] == engine::CollectiveKind::kTreeSum);
  CHECK(engine::averagingCollectives(*ring8, 40, true)[0] == engine::CollectiveKind::kTreeSum);
  const auto t = engine::collectiveTree(*ring8, 0, 300000);
  CHECK(t.ringSize == 8);
  CHECK(t.ringPrev == 7);
  CHECK(t.ringNext == 1);
  CHECK(engine::ringAgreementCollectives(*ring8).size() == 7);
}

TEST_CASE(
    "run.final_average over a model of several chunks: the same bits at every peer, the exact "
    "average, around the ring and down the pipelined tree") {
  // 300000 values: more than one tree chunk (engine::treeChunks: 3 of 100000). A ring averages
  // around the ring (8 chunks of 37500), a torus down the tree in 3 pipelined chunks.
  for (const auto& [topology, n] :
       {std::pair<std::string, int>{"{ kind: ring }", 8}, {"{ kind: torus, dims: [3, 3] }", 9}}) {
    INFO(topology);
    auto yaml = [&](bool average) {
      std::string y = yamlFor(topology, n, "", average);
      const auto at = y.find("dim: 40");
      return y.replace(at, 7, "dim: 300000");
    };
    const auto plain = simulate(yaml(false));
    const auto averaged = simulate(yaml(true));
    REQUIRE(averaged.peers[0].model.size() == 300000);
    CHECK_FALSE(sameBits(plain.peers[0].model, plain.peers[1].model));
    for (int i = 1; i < n; ++i) CHECK(sameBits(averaged.peers[i].model, averaged.peers[0].model));
    std::vector<int> all(n);
    for (int i = 0; i < n; ++i) all[i] = i;
    checkAverage(averaged.peers[0].model, meanOf(plain, all));
  }
}

TEST_CASE("run.final_average: every peer ends with the same bits, the exact average") {
  for (const std::string topology :
       {"{ kind: ring }", "{ kind: torus, dims: [4, 4] }", "{ kind: exponential }",
        "{ kind: erdos-renyi, probability: 0.3 }"}) {
    INFO(topology);
    const int n = topology.find("ring") != std::string::npos ? 8 : 16;
    const auto plain = simulate(yamlFor(topology, n, ""));
    auto averaged = simulate(yamlFor(topology, n, "", true));
    std::vector<int> all(n);
    for (int i = 0; i < n; ++i) all[i] = i;
    // The peers disagree before the averaging (30 rounds of compressed gossip from random starts).
    CHECK_FALSE(sameBits(plain.peers[0].model, plain.peers[1].model));
    for (int i = 1; i < n; ++i) CHECK(sameBits(averaged.peers[i].model, averaged.peers[0].model));
    checkAverage(averaged.peers[0].model, meanOf(plain, all));
    CHECK(averaged.summary["consensus_distance_final"].get<double>() == 0.0);
  }
}

TEST_CASE(
    "run.final_average with lost peers: a leaf is left out, an interior peer cuts its "
    "subtree off") {
  const std::string ring = "{ kind: ring }";
  SECTION("leaf 5 killed: the other seven average") {
    const std::string kill = "faults:\n  - { kind: kill, peer: 5, at_round: 10 }\n";
    const auto plain = simulate(yamlFor(ring, 8, kill));
    const auto averaged = simulate(yamlFor(ring, 8, kill, true));
    const std::vector<int> live = {0, 1, 2, 3, 4, 6, 7};
    for (int i : live) {
      INFO("rank " << i);
      CHECK(sameBits(averaged.peers[i].model, averaged.peers[0].model));
    }
    checkAverage(averaged.peers[0].model, meanOf(plain, live));
  }
  SECTION(
      "a model of several chunks, peer 5 killed: its ring neighbours say so, the tree averages") {
    // Without the agreement the ring would run with a gap and every chunk would miss peers.
    const std::string kill = "faults:\n  - { kind: kill, peer: 5, at_round: 10 }\n";
    auto big = [&](bool average) {
      std::string y = yamlFor(ring, 8, kill, average);
      return y.replace(y.find("dim: 40"), 7, "dim: 300000");
    };
    const auto plain = simulate(big(false));
    const auto averaged = simulate(big(true));
    const std::vector<int> live = {0, 1, 2, 3, 4, 6, 7};
    for (int i : live) {
      INFO("rank " << i);
      CHECK(sameBits(averaged.peers[i].model, averaged.peers[0].model));
    }
    checkAverage(averaged.peers[0].model, meanOf(plain, live));
  }
  SECTION("peer 1 killed: 2, 3 and 4 (its subtree) keep their models, the rest average") {
    const std::string kill = "faults:\n  - { kind: kill, peer: 1, at_round: 10 }\n";
    const auto plain = simulate(yamlFor(ring, 8, kill));
    const auto averaged = simulate(yamlFor(ring, 8, kill, true));
    for (int i : {2, 3, 4}) {
      INFO("rank " << i);
      CHECK(sameBits(averaged.peers[i].model, plain.peers[i].model));
    }
    for (int i : {5, 6, 7}) {
      INFO("rank " << i);
      CHECK(sameBits(averaged.peers[i].model, averaged.peers[0].model));
    }
    checkAverage(averaged.peers[0].model, meanOf(plain, {0, 5, 6, 7}));
  }
}
