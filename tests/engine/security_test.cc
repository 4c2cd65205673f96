// Sealed envelopes (security.key_file) on PeerCore, the same bytes a real run sends: a replayed
// message, a forged one with a flipped byte and a recomputed valid CRC, one with sequence 2^63,
// one sealed under another key: each is dropped and counted, never applied, and the next
// legitimate message applies. With encryption the payload on the wire is not the plaintext, and
// keyed runs compute exactly what unkeyed ones do.
#include <catch2/catch.hpp>
#include <cstring>

#include "kernels/ops.h"
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
};

// Peers whose every edge has a session key (the same per edge on both ends, as the handshake
// derives it) when `keyed`.
Run makeRun(bool keyed, bool encrypt, const security::Key& base) {
  Run run;
  run.plan = test_util::makePlan(test_util::loadYaml(kYaml, "security_test.yaml"));
  const int n = run.plan->config.peers.count;
  for (int r = 0; r < n; ++r) {
    auto p = engine::makePeer(*run.plan, r, 0);
    REQUIRE(p.isOk());
    run.peers.push_back(std::move(*p));
  }
  if (keyed) {
    for (int r = 0; r < n; ++r) {
      for (int j : run.peers[r]->neighbours()) {
        security::Key k = base;
        k[0] ^= static_cast<std::uint8_t>(std::min(r, j) * 16 + std::max(r, j));
        run.peers[r]->setEdgeKey(j, k, encrypt);
      }
    }
  }
  return run;
}

std::vector<float> model(const PeerCore& p) { return {p.model().begin(), p.model().end()}; }

// Rounds in lockstep: every message delivered once.
void rounds(Run& run, int count) {
  for (int t = 0; t < count; ++t) {
    for (auto& p : run.peers) REQUIRE(p->beginRound(t).isOk());
    for (auto& p : run.peers) {
      for (int j : p->sendTo()) run.peers[j]->onMessage(p->rank(), p->outgoing(j));
    }
    for (auto& p : run.peers) {
      REQUIRE(p->roundComplete());
      p->endRound();
    }
  }
}

std::uint64_t dropped(const PeerCore& p, const std::string& reason) {
  auto it = p.counters().dropped.find(reason);
  return it == p.counters().dropped.end() ? 0 : it->second;
}

}  // namespace

TEST_CASE("sealed envelopes: replay, forgery with a valid CRC, sequence 2^63, another key") {
  const bool encrypt = GENERATE(false, true);
  INFO("encrypt " << encrypt);
  const security::Key key = security::randomKey();
  Run run = makeRun(true, encrypt, key);
  rounds(run, 2);
  auto& p0 = *run.peers[0];
  auto& p1 = *run.peers[1];
  for (auto& p : run.peers) REQUIRE(p->beginRound(2).isOk());
  const auto out = p1.outgoing(0);
  const std::vector<std::uint8_t> good(out.begin(), out.end());
  REQUIRE((loadLe<std::uint16_t>(good.data() + 6) & engine::kFlagSealed) != 0);
  const std::uint64_t appliedBefore = p0.counters().messagesApplied;
  const auto before = model(p0);

  // 1. Replay of round 1's message from p1, captured earlier: rebuild it from a twin run.
  Run twin = makeRun(true, encrypt, key);
  for (auto& p : twin.peers) REQUIRE(p->beginRound(0).isOk());
  const auto old = twin.peers[1]->outgoing(0);
  const std::vector<std::uint8_t> captured(old.begin(), old.end());
  p0.onMessage(1, captured);  // sequence 0 again: already seen
  CHECK(dropped(p0, "duplicate") == 1);

  // 2. A flipped payload byte with both CRCs recomputed (what an attacker without the key can do).
  auto forged = good;
  const std::size_t body = forged.size() - security::kSealTagBytes;
  forged[engine::kEnvelopeBytes + 10] ^= 0x40;
  storeLe<std::uint32_t>(forged.data() + 52,
                         engine::payloadChecksum(std::span<const std::uint8_t>(forged).subspan(
                             engine::kEnvelopeBytes, body - engine::kEnvelopeBytes)));
  storeLe<std::uint32_t>(forged.data() + 60, kernels::cpuOps().crc32c(0, forged.data(), 60));
  p0.onMessage(1, forged);
  CHECK(dropped(p0, "auth") == 1);

  // 3. Sequence 2^63 with a valid header CRC: the tag binds the sequence number.
  auto far = good;
  storeLe<std::uint64_t>(far.data() + 16, std::uint64_t{1} << 63);
  storeLe<std::uint32_t>(far.data() + 60, kernels::cpuOps().crc32c(0, far.data(), 60));
  p0.onMessage(1, far);
  CHECK(dropped(p0, "auth") == 2);

  // 4. Sealed under another key (an endpoint that did not authenticate as p1), and no seal at all.
  Run stranger = makeRun(true, encrypt, security::randomKey());
  rounds(stranger, 2);
  for (auto& p : stranger.peers) REQUIRE(p->beginRound(2).isOk());
  p0.onMessage(1, stranger.peers[1]->outgoing(0));
  CHECK(dropped(p0, "auth") == 3);
  Run plain = makeRun(false, false, key);
  rounds(plain, 2);
  for (auto& p : plain.peers) REQUIRE(p->beginRound(2).isOk());
  p0.onMessage(1, plain.peers[1]->outgoing(0));
  CHECK(dropped(p0, "auth") == 4);

  CHECK(p0.counters().messagesApplied == appliedBefore);
  CHECK(model(p0) == before);
  // The legitimate message still applies: nothing above consumed its sequence number.
  p0.onMessage(1, good);
  CHECK(p0.counters().messagesApplied == appliedBefore + 1);
  CHECK(dropped(p0, "gap") == 0);
  if (encrypt) {
    // The payload on the wire is not the plaintext the unkeyed run sends.
    const auto p = plain.peers[1]->outgoing(0);
    CHECK(!std::equal(p.begin() + engine::kEnvelopeBytes, p.end(),
                      good.begin() + engine::kEnvelopeBytes));
  }
}

TEST_CASE("unsealed envelopes: a sequence number far ahead is dropped, not adopted") {
  Run run = makeRun(false, false, security::Key{});
  auto& p0 = *run.peers[0];
  auto& p1 = *run.peers[1];
  for (auto& p : run.peers) REQUIRE(p->beginRound(0).isOk());
  const auto out = p1.outgoing(0);
  std::vector<std::uint8_t> good(out.begin(), out.end());
  auto far = good;
  storeLe<std::uint64_t>(far.data() + 16, std::uint64_t{1} << 63);
  storeLe<std::uint32_t>(far.data() + 60, kernels::cpuOps().crc32c(0, far.data(), 60));
  p0.onMessage(1, far);
  CHECK(dropped(p0, "sequence_window") == 1);
  CHECK(p0.counters().messagesApplied == 0);
  p0.onMessage(1, good);  // without the window every later message would be a "duplicate"
  CHECK(p0.counters().messagesApplied == 1);
}

TEST_CASE("sealing changes nothing in the math: keyed runs end with the same models") {
  const security::Key key = security::randomKey();
  Run plain = makeRun(false, false, key);
  Run mac = makeRun(true, false, key);
  Run aead = makeRun(true, true, key);
  rounds(plain, 20);
  rounds(mac, 20);
  rounds(aead, 20);
  for (std::size_t r = 0; r < plain.peers.size(); ++r) {
    CHECK(model(*mac.peers[r]) == model(*plain.peers[r]));
    CHECK(model(*aead.peers[r]) == model(*plain.peers[r]));
    CHECK(mac.peers[r]->counters().dropped.empty());
  }
  // The runs did something: the models moved from where they started.
  Run start = makeRun(false, false, key);
  CHECK(model(*plain.peers[0]) != model(*start.peers[0]));
}
