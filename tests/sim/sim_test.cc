// The simulator: the worker pool, the link model's draws, a round's simulated time against the
// formula, bit-identical models whatever the thread count (and identical to runLockstep), losses
// that the engine repairs, the files `grapevine sim` writes, 64 consensus peers, and the CLI.
#include <atomic>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "runtime/config/loader.h"
#include "runtime/engine/lockstep.h"
#include "runtime/engine/setup.h"
#include "runtime/sim/link_model.h"
#include "runtime/sim/simulator.h"
#include "runtime/sim/worker_pool.h"
#include "tests/test_util/config.h"

using namespace grapevine;

namespace {

config::Config loadYaml(const std::string& yaml) {
  return test_util::loadYaml(yaml, "sim_test.yaml");
}

using test_util::makePlan;

sim::SimResult simulate(const engine::RunPlan& plan, int threads, const std::string& out = "") {
  sim::SimOptions o;
  o.threads = threads;
  o.outDir = out;
  auto r = sim::runSimulation(plan, o);
  INFO(r.status().toString());
  REQUIRE(r.isOk());
  return std::move(*r);
}

std::string tempDir(const std::string& name) {
  auto d = std::filesystem::temp_directory_path() /
           ("grapevine-sim-test-" + std::to_string(::getpid()) + "-" + name);
  std::filesystem::remove_all(d);
  return d.string();
}

bool sameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("worker pool runs every index exactly once") {
  for (int threads : {1, 2, 4}) {
    sim::WorkerPool pool(threads);
    CHECK(pool.threads() == threads);
    for (std::size_t n : {0u, 1u, 7u, 1000u}) {
      std::vector<std::atomic<int>> hits(n);
      for (int rep = 0; rep < 3; ++rep) pool.parallelFor(n, [&](std::size_t i) { hits[i]++; });
      for (std::size_t i = 0; i < n; ++i) REQUIRE(hits[i].load() == 3);
    }
  }
}

TEST_CASE("link model: delay formula, bounded seeded jitter, loss rate") {
  sim::LinkParams p;
  p.bandwidthBitsPerSecond = 100e6;
  p.latencySeconds = 0.005;
  sim::LinkModel plain(p, 1);
  CHECK(plain.delaySeconds(0, 1, 3, 125000) == Approx(0.005 + 125000 * 8 / 100e6));
  CHECK_FALSE(plain.lost(0, 1, 3));

  p.jitterSeconds = 0.002;
  p.lossProbability = 0.1;
  sim::LinkModel a(p, 7), b(p, 7), other(p, 8);
  int lost = 0, differs = 0;
  double jmin = 1, jmax = 0;
  const int draws = 20000;
  for (int k = 0; k < draws; ++k) {
    const int from = k % 50, to = (k / 50) % 40;
    const std::int64_t round = k / 2000;
    const double j = a.jitterSeconds(from, to, round);
    REQUIRE(j >= 0.0);
    REQUIRE(j <= 0.002);
    jmin = std::min(jmin, j);
    jmax = std::max(jmax, j);
    REQUIRE(j == b.jitterSeconds(from, to, round));  // a function of (seed, edge, round)
    REQUIRE(a.lost(from, to, round) == b.lost(from, to, round));
    if (j != other.jitterSeconds(from, to, round)) ++differs;
    if (a.lost(from, to, round)) ++lost;
  }
  CHECK(jmin < 0.0001);
  CHECK(jmax > 0.0019);
  CHECK(differs > draws * 9 / 10);
  CHECK(lost == Approx(0.1 * draws).margin(0.01 * draws));  // 4+ standard deviations
}

TEST_CASE("a round's simulated time is compute + latency + bytes*8/bandwidth") {
  // Two peers, fixed compute, dense messages of known size: every round takes the same time.
  const auto c = loadYaml(R"(
run: { seed: 3, rounds: 1 }
peers: { count: 2 }
topology: { kind: complete }
algorithm: { name: choco, consensus_step: 0.5 }
compression: { method: none }
optimizer: { lr: 0.0, momentum: 0.0, nesterov: false }
workload: { name: consensus, dim: 1000 }
network: { bandwidth_mbit: 100, latency_ms: 5, compute_ms: 10 }
)");
  auto plan = makePlan(c);
  auto r = simulate(*plan, 2);
  const auto bytes = r.peers[0].bytesSent;  // one message to the one neighbour
  REQUIRE(bytes > 4000);                    // 1000 floats + envelope
  const double expected = 0.010 + 0.005 + static_cast<double>(bytes) * 8.0 / 100e6;
  CHECK(r.clock[0] == Approx(expected).epsilon(1e-12));
  CHECK(r.clock[1] == Approx(expected).epsilon(1e-12));
  CHECK(r.simulatedSeconds == Approx(expected).epsilon(1e-12));
  CHECK(r.summary["simulated_seconds"].get<double>() == Approx(expected).epsilon(1e-12));

  // Five rounds take five times as long; compute_scale 3 triples the compute part.
  auto c5 = c;
  c5.run.rounds = 5;
  c5.network.computeScale = 3.0;
  auto r5 = simulate(*makePlan(c5), 1);
  const double perRound =
      0.030 + 0.005 + static_cast<double>(r5.peers[0].bytesSent / 5) * 8.0 / 100e6;
  CHECK(r5.peers[0].bytesSent == 5 * bytes);
  CHECK(r5.simulatedSeconds == Approx(5 * perRound).epsilon(1e-12));
}

TEST_CASE("per-peer and per-edge network overrides set each link's time") {
  // A path 0 - 1 - 2; peer 2 is slow (10 Mbit/s, 40 ms, half-speed compute); the 0-1 link is
  // overridden.
  const auto c = loadYaml(R"(
run: { seed: 3, rounds: 1 }
peers: { count: 3 }
topology: { kind: edges, edges: [[0, 1], [1, 2]] }
algorithm: { name: choco, consensus_step: 0.3 }
compression: { method: none }
optimizer: { lr: 0.0, momentum: 0.0, nesterov: false }
workload: { name: consensus, dim: 1000 }
network:
  bandwidth_mbit: 100
  latency_ms: 5
  compute_ms: 10
  peers: [{rank: 2, bandwidth_mbit: 10, latency_ms: 40, compute_scale: 2}]
  edges: [{between: [1, 0], latency_ms: 1}]
)");
  // The resolved links: the slow end wins on 1-2 (both directions), the edge override on 0-1.
  const auto l12 = c.network.link(1, 2), l21 = c.network.link(2, 1), l01 = c.network.link(0, 1);
  CHECK(l12.bandwidthMbit == 10);
  CHECK(l12.latencyMs == 40);
  CHECK(l21.latencyMs == 40);
  CHECK(l01.bandwidthMbit == 100);
  CHECK(l01.latencyMs == 1);
  CHECK(c.network.computeScaleOf(2) == 2);
  CHECK(c.network.computeScaleOf(0) == 1);

  auto r = simulate(*makePlan(c), 2);
  const double b =
      static_cast<double>(r.peers[0].bytesSent);  // one message, same size on every link
  // Peer 0 waits for 1 over the fast link; peer 1 for the slow peer 2 (its compute is 20 ms); peer
  // 2 for 1.
  CHECK(r.clock[0] == Approx(0.010 + 0.001 + b * 8 / 100e6).epsilon(1e-12));
  CHECK(r.clock[1] == Approx(0.020 + 0.040 + b * 8 / 10e6).epsilon(1e-12));
  CHECK(r.clock[2] == Approx(std::max(0.020, 0.010 + 0.040 + b * 8 / 10e6)).epsilon(1e-12));
}

TEST_CASE("shareInterface: max-min fair sharing of one interface, event by event") {
  // Unlimited interface: each transfer at its own pace.
  auto free = sim::shareInterface(0.0, {{1.0, 100.0, 50.0}, {2.0, 10.0, 0.0}});
  CHECK(free[0] == Approx(3.0));
  CHECK(free[1] == 2.0);
  // Two equal transfers from t = 0 through 100 bit/s: 50 each, both done at 2 s (not 1 s).
  auto two = sim::shareInterface(100.0, {{0.0, 100.0, 0.0}, {0.0, 100.0, 0.0}});
  CHECK(two[0] == Approx(2.0));
  CHECK(two[1] == Approx(2.0));
  // One held to 20 bit/s by its own path leaves 80 to the other: 100/80 and 40/20 s.
  auto capped = sim::shareInterface(100.0, {{0.0, 100.0, 0.0}, {0.0, 40.0, 20.0}});
  CHECK(capped[0] == Approx(1.25));
  CHECK(capped[1] == Approx(2.0));
  // Staggered: the first runs alone for 1 s (100 bits), then both at 50: the first's remaining
  // 100 bits take 2 s (done at 3), then the second has 100 left, alone: done at 4.
  auto staggered = sim::shareInterface(100.0, {{0.0, 200.0, 0.0}, {1.0, 200.0, 0.0}});
  CHECK(staggered[0] == Approx(3.0));
  CHECK(staggered[1] == Approx(4.0));
  // A gap with nothing in progress, and an empty transfer.
  auto gap = sim::shareInterface(100.0, {{0.0, 100.0, 0.0}, {5.0, 100.0, 0.0}, {2.0, 0.0, 0.0}});
  CHECK(gap[0] == Approx(1.0));
  CHECK(gap[1] == Approx(6.0));
  CHECK(gap[2] == 2.0);
  // Never faster than the interface: n transfers of b bits finish no sooner than n * b / C.
  std::vector<sim::Transfer> many;
  for (int k = 0; k < 7; ++k) many.push_back({0.001 * k, 1000.0 + 10.0 * k, 0.0});
  double total = 0, last = 0;
  for (const auto& t : many) total += t.bits;
  for (double d : sim::shareInterface(1000.0, many)) last = std::max(last, d);
  CHECK(last == Approx(total / 1000.0));
}

TEST_CASE("node cap: a ring peer's two messages share its interface, twice the round time") {
  // A ring of 4 with dense messages: each peer sends one message to each of its two neighbours
  // and receives two. Links 100 Mbit/s each; with a 100 Mbit/s interface per peer the two
  // messages share it, so the bandwidth part of a round doubles.
  const std::string yaml = R"(
run: { seed: 3, rounds: 3 }
peers: { count: 4 }
topology: { kind: ring }
algorithm: { name: dsgd }
compression: { method: none }
optimizer: { lr: 0.0, momentum: 0.0, nesterov: false }
workload: { name: consensus, dim: 100000 }
network: { bandwidth_mbit: 100, latency_ms: 5, compute_ms: 10 }
)";
  const auto linksOnly = loadYaml(yaml);
  auto capped = linksOnly;
  capped.network.nodeBandwidthMbit = 100;
  auto a = simulate(*makePlan(linksOnly), 2);
  auto b = simulate(*makePlan(capped), 2);
  const double msg = static_cast<double>(a.peers[0].bytesSent) / (3 * 2);  // per message
  REQUIRE(msg > 400000);  // bandwidth-bound: 32 ms per message at 100 Mbit/s, vs 15 ms fixed
  const double bw = msg * 8.0 / 100e6;
  CHECK(a.simulatedSeconds == Approx(3 * (0.010 + 0.005 + bw)).epsilon(1e-9));
  CHECK(b.simulatedSeconds == Approx(3 * (0.010 + 0.005 + 2 * bw)).epsilon(1e-9));
  // The bandwidth-bound part doubles.
  CHECK((b.simulatedSeconds / 3 - 0.015) / (a.simulatedSeconds / 3 - 0.015) == Approx(2.0));
  // Same bytes, same models: only time changes.
  CHECK(b.peers[0].bytesSent == a.peers[0].bytesSent);
  CHECK(sameBits(a.peers[1].model, b.peers[1].model));

  // An interface twice the links' rate takes the two messages at the links' own pace.
  auto wide = linksOnly;
  wide.network.nodeBandwidthMbit = 200;
  CHECK(simulate(*makePlan(wide), 1).simulatedSeconds == Approx(a.simulatedSeconds).epsilon(1e-9));

  // Per peer: only peer 0 capped at 50. Its neighbours 1 and 3 receive from it at 25 each (its
  // egress split in two), so they finish after 4 bandwidth times; peer 2 is unaffected in round 1.
  auto one = linksOnly;
  one.run.rounds = 1;
  one.network.peers.push_back({});
  one.network.peers.back().rank = 0;
  one.network.peers.back().nodeBandwidthMbit = 50;
  auto r = simulate(*makePlan(one), 2);
  CHECK(r.clock[0] == Approx(0.015 + 4 * bw).epsilon(1e-9));  // its ingress too: 2 x msg at 50
  CHECK(r.clock[1] == Approx(0.015 + 4 * bw).epsilon(1e-9));
  CHECK(r.clock[3] == Approx(0.015 + 4 * bw).epsilon(1e-9));
  CHECK(r.clock[2] == Approx(0.015 + bw).epsilon(1e-9));

  // Deterministic: the same run twice, any thread count, the same clocks.
  auto again = simulate(*makePlan(capped), 1);
  CHECK(again.clock == b.clock);
}

TEST_CASE("a lost message costs the receiver its round timeout") {
  auto c = loadYaml(R"(
run: { seed: 3, rounds: 40 }
peers: { count: 2 }
topology: { kind: complete }
algorithm: { name: choco, consensus_step: 0.5, round_timeout: 0.5 }
compression: { method: none }
optimizer: { lr: 0.0, momentum: 0.0, nesterov: false }
workload: { name: consensus, dim: 100 }
network: { latency_ms: 1, compute_ms: 2, loss_percent: 20 }
)");
  auto r = simulate(*makePlan(c), 2);
  REQUIRE(r.messagesLost > 0);
  REQUIRE(r.messagesLost < 40);
  // Rounds are 3 ms apart when in step; a loss makes the receiver wait for its deadline (2 + 500
  // ms), and the other peer, whose message arrives at 3 ms, waits for nothing.
  CHECK(r.simulatedSeconds >= 40 * 0.003 + 0.5 - 1e-9);
  CHECK(r.simulatedSeconds <= 40 * 0.003 + static_cast<double>(r.messagesLost) * 0.5 + 1e-9);
  std::uint64_t suspect = 0;
  for (const auto& p : r.peers) suspect += p.suspectRounds;
  CHECK(suspect == r.messagesLost);
}

TEST_CASE("algorithm.adaptive_timeout: a lost message costs its sender's own deadline, not more") {
  // Issue 42: the same losses (draws of (seed, edge, round)) with a 5 s round_timeout, fixed and
  // adaptive. Adaptive, the receiver waits 2 x the 75th percentile of that neighbour's arrivals
  // (3 ms apart in step) + 0.25 s, doubled for a miss in a row: the same models, a fraction of the
  // simulated time.
  const std::string yaml = R"(
run: { seed: 3, rounds: 200 }
peers: { count: 4 }
topology: { kind: ring }
algorithm: { name: choco, consensus_step: 0.5, round_timeout: 5 }
compression: { method: top-k, ratio: 0.2 }
optimizer: { lr: 0.0, momentum: 0.0, nesterov: false }
workload: { name: consensus, dim: 100 }
network: { latency_ms: 1, compute_ms: 2, loss_percent: 3 }
)";
  auto fixedConfig = loadYaml(yaml);
  auto adaptiveConfig = loadYaml(yaml);
  adaptiveConfig.algorithm.adaptiveTimeout = true;
  const auto fixed = simulate(*makePlan(fixedConfig), 2);
  const auto adaptive = simulate(*makePlan(adaptiveConfig), 2);
  REQUIRE(fixed.messagesLost > 4);
  CHECK(adaptive.messagesLost == fixed.messagesLost);
  for (std::size_t i = 0; i < fixed.peers.size(); ++i) {
    INFO("peer " << i);
    CHECK(sameBits(adaptive.peers[i].model, fixed.peers[i].model));
    CHECK(adaptive.peers[i].suspectRounds == fixed.peers[i].suspectRounds);
  }
  WARN("200 rounds, " << fixed.messagesLost << " messages lost: " << fixed.simulatedSeconds
                      << " s with a fixed 5 s timeout, " << adaptive.simulatedSeconds
                      << " s adaptive");
  // Fixed: at least one full timeout; adaptive: each loss at most 5 s too, but on average far less.
  CHECK(fixed.simulatedSeconds >= 5.0);
  CHECK(adaptive.simulatedSeconds >= 200 * 0.003 + 0.25 - 1e-9);
  CHECK(adaptive.simulatedSeconds < 0.25 * fixed.simulatedSeconds);
  // Bit-reproducible: the deadlines follow the simulated clock.
  const auto again = simulate(*makePlan(adaptiveConfig), 1);
  CHECK(again.simulatedSeconds == adaptive.simulatedSeconds);
}

TEST_CASE(
    "algorithm.staleness: a 4x slower peer computes fewer rounds instead of pacing the rest") {
  // Issue 42. 8-peer ring, CHOCO + top-10%, fixed compute (5 ms a step), peer 3 four times slower.
  // Synchronous, every round waits for peer 3's 20 ms; with staleness 4 the others wait for it only
  // when it is more than 4 rounds behind, and peer 3 skips the local steps of the rounds whose
  // every neighbour's message reached it before it began them. Deterministic on the simulated
  // clock.
  const std::string yaml = R"(
run: { seed: 2, rounds: 120 }
peers: { count: 8 }
topology: { kind: ring }
algorithm: { name: choco, consensus_step: 0.3 }
compression: { method: top-k, ratio: 0.1 }
optimizer: { lr: 0.05 }
workload: { name: consensus, dim: 200 }
network: { latency_ms: 1, compute_ms: 5, peers: [{rank: 3, compute_scale: 4}] }
)";
  auto syncConfig = loadYaml(yaml);
  auto asyncConfig = loadYaml(yaml);
  asyncConfig.algorithm.staleness = 4;
  const auto sync = simulate(*makePlan(syncConfig), 2);
  const auto async = simulate(*makePlan(asyncConfig), 2);
  // Synchronous: every round lasts the slow peer's compute at least (its neighbours' messages are
  // there before it finishes: their latency overlaps its compute).
  CHECK(sync.simulatedSeconds >= 120 * 0.020 - 1e-9);
  // Asynchronous: the fast peers' pace (5 ms + what the skipped rounds cost), well under half.
  WARN("120 rounds: " << sync.simulatedSeconds << " simulated s synchronous, "
                      << async.simulatedSeconds << " s with staleness 4");
  CHECK(async.simulatedSeconds < 0.5 * sync.simulatedSeconds);
  for (std::size_t i = 0; i < async.peers.size(); ++i) {
    INFO("peer " << i);
    const auto& r = async.peers[i];
    CHECK(r.finished);
    CHECK(r.suspectRounds == 0);
    CHECK(r.resyncs == 0);
    CHECK(r.replicaMismatches == 0);
    // Only the slow peer skips computing; its neighbours mix its replica in the rounds it is late.
    if (i == 3) {
      CHECK(r.roundsComputeSkipped > 60);
    } else {
      CHECK(r.roundsComputeSkipped == 0);
    }
    if (i == 2 || i == 4) CHECK(r.staleMixes > 0);
    CHECK(sync.peers[i].roundsComputeSkipped == 0);
    CHECK(sync.peers[i].staleMixes == 0);
  }
  // Bit-reproducible whatever the thread count.
  const auto again = simulate(*makePlan(asyncConfig), 1);
  CHECK(again.simulatedSeconds == async.simulatedSeconds);
  for (std::size_t i = 0; i < async.peers.size(); ++i)
    CHECK(sameBits(again.peers[i].model, async.peers[i].model));
}

TEST_CASE("models are bit-identical whatever the thread count, and to the lockstep driver") {
  const std::string yaml = R"(
run: { seed: 11, rounds: 30 }
peers: { count: 12 }
topology: { kind: random-regular, degree: 3 }
algorithm: { name: choco, consensus_step: 0.3, check_every: 5 }
compression: { method: top-k, ratio: 0.1 }
optimizer: { lr: 0.05, momentum: 0.9 }
workload: { name: consensus, dim: 200 }
network: { bandwidth_mbit: 1000, latency_ms: 2, jitter_ms: 1, compute_ms: 1 }
)";
  SECTION("without losses, equal to runLockstep") {
    const auto c = loadYaml(yaml);
    auto plan = makePlan(c);
    auto r1 = simulate(*plan, 1);
    auto r2 = simulate(*plan, 2);
    auto r3 = simulate(*plan, 3);
    std::vector<std::unique_ptr<engine::PeerCore>> peers;
    for (int i = 0; i < c.peers.count; ++i) {
      auto p = engine::makePeer(*plan, i, 0);
      REQUIRE(p.isOk());
      peers.push_back(std::move(*p));
    }
    REQUIRE(engine::runLockstep(peers, 0, c.run.rounds).isOk());
    for (int i = 0; i < c.peers.count; ++i) {
      INFO("peer " << i);
      REQUIRE(sameBits(r1.peers[i].model, r2.peers[i].model));
      REQUIRE(sameBits(r1.peers[i].model, r3.peers[i].model));
      const std::vector<float> lock(peers[i]->model().begin(), peers[i]->model().end());
      REQUIRE(sameBits(r1.peers[i].model, lock));
      CHECK(r1.clock[i] ==
            r2.clock[i]);  // compute_ms fixed: the virtual clock is deterministic too
      CHECK(r1.clock[i] == r3.clock[i]);
    }
    auto strip = [](nlohmann::json s) {
      s.erase("wall_seconds");
      s.erase("sim");
      return s;
    };
    CHECK(strip(r1.summary) == strip(r2.summary));
    // The models moved and gossip is contracting them (a vacuous comparison would pass otherwise).
    CHECK(r1.summary["consensus_error"].get<double>() > 0.0);
    CHECK(r1.summary["consensus_error"].get<double>() < 1e3);
  }
  SECTION("with losses and measured compute, models still equal") {
    auto c = loadYaml(yaml);
    c.network.lossPercent = 5;
    c.network.computeMs = 0;
    auto plan = makePlan(c);
    auto r1 = simulate(*plan, 1);
    auto r2 = simulate(*plan, 2);
    REQUIRE(r1.messagesLost > 0);
    CHECK(r1.messagesLost == r2.messagesLost);
    std::uint64_t resyncs = 0, gaps = 0;
    for (int i = 0; i < c.peers.count; ++i) {
      INFO("peer " << i);
      REQUIRE(sameBits(r1.peers[i].model, r2.peers[i].model));
      resyncs += r1.peers[i].resyncs;
      gaps += r1.peers[i].droppedFrames;
    }
    // A lost CHOCO delta leaves a sequence gap; the receiver asks for a snapshot and gets it.
    CHECK(resyncs > 0);
    CHECK(r1.summary["sim"]["compute"] == "measured");
    CHECK(r1.simulatedSeconds > 0.0);
  }
}

TEST_CASE("writes summary.json, per-peer records with sim_time, models") {
  const auto dir = tempDir("files");
  auto c = loadYaml(R"(
run: { seed: 2, rounds: 20 }
peers: { count: 4 }
topology: { kind: ring }
algorithm: { name: choco, consensus_step: 0.5 }
compression: { method: qsgd, levels: 16 }
optimizer: { lr: 0.1, momentum: 0.9 }
workload: { name: consensus, dim: 16 }
output: { log_every: 5 }
network: { bandwidth_mbit: 10, latency_ms: 1, compute_ms: 3 }
)");
  auto r = simulate(*makePlan(c), 2, dir);
  std::ifstream sf(dir + "/summary.json");
  REQUIRE(sf);
  const auto s = nlohmann::json::parse(sf);
  CHECK(s["transport"] == "sim");
  CHECK(s["peers_finished"] == 4);
  CHECK(s["simulated_seconds"].get<double>() == Approx(r.simulatedSeconds));
  CHECK(s.contains("spectral_gap"));
  CHECK(s.contains("optimum_distance"));
  for (int i = 0; i < 4; ++i) {
    std::ifstream in(dir + "/peer-" + std::to_string(i) + ".jsonl");
    std::vector<nlohmann::json> lines;
    for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
    REQUIRE(lines.size() == 5);  // rounds 5, 10, 15, 20 and the final record
    double last = 0;
    for (std::size_t k = 0; k + 1 < lines.size(); ++k) {
      CHECK(lines[k]["round"] == static_cast<int>(5 * k + 4));
      CHECK(lines[k]["sim_time"].get<double>() > last);
      last = lines[k]["sim_time"].get<double>();
    }
    CHECK(lines.back()["final"] == true);
    CHECK(lines.back()["sim_time"].get<double>() == r.clock[i]);
    auto m =
        engine::readModel(dir + "/model-" + std::to_string(i) + ".bin", r.peers[i].model.size());
    REQUIRE(m.isOk());
    CHECK(sameBits(*m, r.peers[i].model));
    CHECK(std::filesystem::exists(dir + "/peer-" + std::to_string(i) + ".final.json"));
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("64 peers of the consensus workload converge in 60 rounds") {
  auto c = loadYaml(R"(
run: { seed: 5, rounds: 60 }
peers: { count: 64 }
topology: { kind: torus, dims: [8, 8] }
algorithm: { name: choco, consensus_step: 0.5 }
compression: { method: none }
optimizer: { lr: 0.0, momentum: 0.0, nesterov: false }
workload: { name: consensus, dim: 256 }
)");
  auto plan = makePlan(c);
  auto c0 = c;
  c0.run.rounds = 1;
  auto first = simulate(*makePlan(c0), 2);
  auto r = simulate(*plan, 2);
  REQUIRE(r.summary["peers_finished"] == 64);
  const double e1 = first.summary["consensus_error"].get<double>();
  const double e60 = r.summary["consensus_error"].get<double>();
  INFO("consensus error after 1 round " << e1 << ", after 60 " << e60);
  CHECK(e60 < 0.05 * e1);
  // Speed is a benchmark's business (docs/ablations.md, scale), never a test's: reported only.
  WARN("64 simulated peers, 60 rounds: " << r.roundsWallSeconds << " s wall");
}

TEST_CASE("grapevine sim CLI writes summary.json and honours --peers") {
  const std::string bin = std::string(GRAPEVINE_BINARY_DIR) + "/bin/grapevine";
  REQUIRE(std::filesystem::exists(bin));  // built before this test (add_dependencies)
  const auto dir = tempDir("cli");
  std::filesystem::create_directories(dir);
  {
    std::ofstream y(dir + "/c.yaml");
    y << "run: { seed: 1, rounds: 10 }\npeers: { count: 4 }\ntopology: { kind: ring }\n"
         "algorithm: { name: choco }\ncompression: { method: top-k, ratio: 0.5 }\n"
         "workload: { name: consensus, dim: 32 }\nnetwork: { latency_ms: 1, compute_ms: 1 }\n";
  }
  const std::string cmd = bin + " sim " + dir + "/c.yaml --peers 6 --threads 2 --quiet --out " +
                          dir + "/out > " + dir + "/log 2>&1";
  REQUIRE(std::system(cmd.c_str()) == 0);
  std::ifstream sf(dir + "/out/summary.json");
  REQUIRE(sf);
  const auto s = nlohmann::json::parse(sf);
  CHECK(s["peers"] == 6);
  CHECK(s["simulated_seconds"].get<double>() == Approx(10 * 0.002));
  CHECK(std::filesystem::exists(dir + "/out/peer-5.jsonl"));
  const std::string bad = bin + " sim " + dir + "/missing.yaml --quiet > /dev/null 2>&1";
  const int rc = std::system(bad.c_str());
  CHECK(WIFEXITED(rc));
  CHECK(WEXITSTATUS(rc) == 2);
  std::filesystem::remove_all(dir);
}
