// Bounds on what a neighbour can make PeerCore hold or send (docs/security.md, "Bounds"): the
// window of future rounds (10,000 valid-looking, sealed where the edge has a key, envelopes for
// far-future rounds are dropped and counted, hold nothing, and the run ends with the same models)
// and the rate limit on snapshot (resync) requests.
#include <catch2/catch.hpp>
#include <functional>

#include "runtime/common/byte_order.h"
#include "runtime/engine/envelope.h"
#include "runtime/engine/setup.h"
#include "runtime/security/auth.h"
#include "tests/test_util/config.h"

using namespace grapevine;
using engine::PeerCore;

namespace {

constexpr const char* kYaml = R"(
peers: { count: 3 }
topology: { kind: ring }
algorithm: { name: choco, consensus_step: 0.5, check_every: 0 }
optimizer: { lr: 0.0, momentum: 0.0, nesterov: false }
compression: { method: int8, dense_below: 0 }
workload: { name: consensus, dim: 128 }
)";

struct Run {
  std::shared_ptr<engine::RunPlan> plan;
  std::vector<std::unique_ptr<PeerCore>> peers;
  std::optional<security::Key> key;  // base of the edge keys
  bool encrypt = false;
};

security::Key edgeKey(const security::Key& base, int a, int b) {
  security::Key k = base;
  k[0] ^= static_cast<std::uint8_t>(std::min(a, b) * 16 + std::max(a, b));
  return k;
}

Run makeRun(std::optional<security::Key> key, bool encrypt) {
  Run run;
  run.plan = test_util::makePlan(test_util::loadYaml(kYaml, "bounds_test.yaml"));
  run.key = key;
  run.encrypt = encrypt;
  const int n = run.plan->config.peers.count;
  for (int r = 0; r < n; ++r) {
    auto p = engine::makePeer(*run.plan, r, 0);
    REQUIRE(p.isOk());
    run.peers.push_back(std::move(*p));
  }
  for (int r = 0; key && r < n; ++r) {
    for (int j : run.peers[r]->neighbours())
      run.peers[r]->setEdgeKey(j, edgeKey(*key, r, j), encrypt);
  }
  return run;
}

std::vector<float> model(const PeerCore& p) { return {p.model().begin(), p.model().end()}; }

std::uint64_t dropped(const PeerCore& p, const std::string& reason) {
  auto it = p.counters().dropped.find(reason);
  return it == p.counters().dropped.end() ? 0 : it->second;
}

// `from`'s message to `to` with its envelope changed by `edit`, sealed again under the edge key
// (what a neighbour holding the key, or anyone on an unkeyed edge, can send).
std::vector<std::uint8_t> reforge(const Run& run, int from, int to,
                                  std::span<const std::uint8_t> sent,
                                  const std::function<void(engine::Envelope&)>& edit) {
  std::vector<std::uint8_t> buf(sent.begin(), sent.end());
  const auto sender = static_cast<std::uint32_t>(from);
  if (run.key) {
    const auto seq = loadLe<std::uint64_t>(buf.data() + 16);
    REQUIRE(security::open(edgeKey(*run.key, from, to), run.encrypt, sender, seq,
                           engine::kEnvelopeBytes, buf));
    buf.resize(buf.size() - security::kSealTagBytes);
  }
  auto env = engine::readEnvelope(buf);
  REQUIRE(env.isOk());
  edit(*env);
  engine::writeEnvelope(*env, buf);
  if (run.key) {
    buf.resize(buf.size() + security::kSealTagBytes);
    security::seal(edgeKey(*run.key, from, to), run.encrypt, sender, env->sequence,
                   engine::kEnvelopeBytes, buf);
  }
  return buf;
}

// One lockstep round; `before` runs after every peer began it, before any message is delivered.
void round(Run& run, std::int64_t t, const std::function<void()>& before = {}) {
  for (auto& p : run.peers) REQUIRE(p->beginRound(t).isOk());
  if (before) before();
  for (auto& p : run.peers) {
    for (int j : p->sendTo()) run.peers[j]->onMessage(p->rank(), p->outgoing(j));
  }
  for (auto& p : run.peers) {
    REQUIRE(p->roundComplete());
    p->endRound();
  }
}

}  // namespace

TEST_CASE("10,000 envelopes for far-future rounds: dropped and counted, nothing held") {
  const int mode = GENERATE(0, 1, 2);  // unkeyed, MAC-only, encrypted
  INFO("mode " << mode);
  const std::optional<security::Key> key =
      mode == 0 ? std::nullopt : std::optional(security::randomKey());
  Run clean = makeRun(key, mode == 2);
  Run flooded = makeRun(key, mode == 2);
  constexpr int kRounds = 6;
  constexpr int kFlood = 10000;
  for (int t = 0; t < kRounds; ++t) round(clean, t);
  auto& p0 = *flooded.peers[0];
  std::size_t heldBefore = 0, heldDuring = 0;
  for (int t = 0; t < kRounds; ++t) {
    round(flooded, t, [&] {
      if (t != 2) return;
      heldBefore = p0.heldMessages();
      const auto sent = flooded.peers[1]->outgoing(0);
      const auto seq = loadLe<std::uint64_t>(sent.data() + 16);
      for (int k = 0; k < kFlood; ++k) {
        // Consecutive sequence numbers from the next expected one: valid-looking in every way
        // but the round, which is past the window.
        p0.onMessage(1, reforge(flooded, 1, 0, sent, [&](engine::Envelope& e) {
                       e.sequence = seq + static_cast<std::uint64_t>(k);
                       e.round = static_cast<std::uint64_t>(t + PeerCore::kRoundWindow + 1 + k);
                     }));
        heldDuring = std::max(heldDuring, p0.heldMessages());
      }
    });
  }
  CHECK(heldBefore == 0);
  CHECK(heldDuring == 0);
  CHECK(dropped(p0, "round_window") == kFlood);
  CHECK(dropped(p0, "gap") == 0);
  CHECK(dropped(p0, "duplicate") == 0);
  // The same run: every legitimate message applied, the same models everywhere.
  CHECK(p0.counters().messagesApplied == clean.peers[0]->counters().messagesApplied);
  for (std::size_t r = 0; r < clean.peers.size(); ++r) {
    CHECK(model(*flooded.peers[r]) == model(*clean.peers[r]));
  }
  // The run did something.
  Run start = makeRun(key, mode == 2);
  CHECK(model(*clean.peers[0]) != model(*start.peers[0]));
}

TEST_CASE("future rounds inside the window: held up to the bound, the excess dropped") {
  Run run = makeRun(security::randomKey(), false);
  round(run, 0);
  auto& p0 = *run.peers[0];
  REQUIRE(run.peers[0]->beginRound(1).isOk());
  REQUIRE(run.peers[1]->beginRound(1).isOk());
  const auto sent = run.peers[1]->outgoing(0);
  const auto seq = loadLe<std::uint64_t>(sent.data() + 16);
  // The window's last round is accepted and held; one round further is not.
  p0.onMessage(1, reforge(run, 1, 0, sent, [&](engine::Envelope& e) {
                 e.sequence = seq;
                 e.round = 1 + PeerCore::kRoundWindow + 1;
               }));
  CHECK(dropped(p0, "round_window") == 1);
  CHECK(p0.heldMessages() == 0);
  p0.onMessage(1, reforge(run, 1, 0, sent, [&](engine::Envelope& e) {
                 e.sequence = seq;
                 e.round = 1 + PeerCore::kRoundWindow;
               }));
  CHECK(dropped(p0, "round_window") == 1);
  CHECK(p0.heldMessages() == 1);
  // A neighbour holding the key repeats rounds inside the window: at most kRoundWindow held.
  constexpr int kFlood = 10000;
  for (int k = 1; k <= kFlood; ++k) {
    p0.onMessage(1, reforge(run, 1, 0, sent, [&](engine::Envelope& e) {
                   e.sequence = seq + static_cast<std::uint64_t>(k);
                   e.round = 2 + static_cast<std::uint64_t>(k % PeerCore::kRoundWindow);
                 }));
  }
  CHECK(p0.heldMessages() == static_cast<std::size_t>(PeerCore::kRoundWindow));
  CHECK(dropped(p0, "round_window") == 1 + kFlood - (PeerCore::kRoundWindow - 1));
}

TEST_CASE("snapshot requests: at most one snapshot per kSnapshotMinRounds rounds per edge") {
  // Replica checks on (choco keeps replicas); the neighbour asks for a snapshot every round.
  Run run = makeRun(std::nullopt, false);
  constexpr int kRounds = 40;
  int snapshots = 0;
  for (int t = 0; t < kRounds; ++t) {
    round(run, t, [&] {
      // p0's message to p1 this round carries a snapshot when p1's earlier request was served.
      const auto out = run.peers[0]->outgoing(1);
      if (loadLe<std::uint16_t>(out.data() + 6) & engine::kFlagSnapshot) ++snapshots;
      // p1 -> p0 with a resync request, delivered ahead of (and instead of) the real message.
      const auto forged = reforge(run, 1, 0, run.peers[1]->outgoing(0), [](engine::Envelope& e) {
        e.flags |= engine::kFlagResyncRequest;
      });
      run.peers[0]->onMessage(1, forged);
    });
  }
  const auto& p0 = *run.peers[0];
  // Requests in rounds 0..kRounds-1; snapshots go out from round 1 on, one per 8 rounds.
  const int allowed = (kRounds - 2) / static_cast<int>(PeerCore::kSnapshotMinRounds) + 1;
  INFO("snapshots " << snapshots);
  CHECK(snapshots == allowed);
  // Every request but the first found a snapshot pending or sent within the limit.
  CHECK(dropped(p0, "resync_rate") == static_cast<std::uint64_t>(kRounds - 1));
  CHECK(run.peers[1]->counters().resyncs == static_cast<std::uint64_t>(allowed));
}
