// What enters a replica or a model from a neighbour (issue 16, docs/security.md "Integrity"):
// - a snapshot carrying a NaN is refused (never reaches the replica), the model stays finite;
// - a message whose values change the buffer by far more than the model's scale (values near
//   3e38, finite) is refused under security.max_delta_ratio, leaving the buffer as it was;
// - a message that repeats one chunk (the right number of frames, one chunk twice) is refused;
// - a neighbour whose messages keep being refused is quarantined: its edge dropped, counted.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>

#include "compress/wire.h"
#include "kernels/ops.h"
#include "runtime/engine/envelope.h"
#include "runtime/engine/setup.h"
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

Run makeRun(const std::string& yaml = kYaml) {
  Run run;
  run.plan = test_util::makePlan(test_util::loadYaml(yaml, "integrity_test.yaml"));
  for (int r = 0; r < run.plan->config.peers.count; ++r) {
    auto p = engine::makePeer(*run.plan, r, 0);
    REQUIRE(p.isOk());
    run.peers.push_back(std::move(*p));
  }
  return run;
}

std::uint64_t dropped(const PeerCore& p, const std::string& reason) {
  auto it = p.counters().dropped.find(reason);
  return it == p.counters().dropped.end() ? 0 : it->second;
}

bool finite(std::span<const float> v) {
  for (float x : v) {
    if (!std::isfinite(x)) return false;
  }
  return true;
}

// `good` with its payload replaced by `edit(envelope, payload)`, the envelope's sizes and CRCs
// recomputed: a message that passes every checksum.
std::vector<std::uint8_t> rewrap(
    std::span<const std::uint8_t> good,
    const std::function<void(engine::Envelope&, std::vector<std::uint8_t>&)>& edit) {
  auto env = engine::readEnvelope(good);
  REQUIRE(env.isOk());
  std::vector<std::uint8_t> payload(good.begin() + engine::kEnvelopeBytes, good.end());
  edit(*env, payload);
  env->payloadCrc = engine::payloadChecksum(payload);
  std::vector<std::uint8_t> out(engine::kEnvelopeBytes + payload.size());
  engine::writeEnvelope(*env, out);
  std::memcpy(out.data() + engine::kEnvelopeBytes, payload.data(), payload.size());
  REQUIRE(engine::readEnvelope(out).isOk());
  return out;
}

// A snapshot of `dim` values (the public copy) appended to the message.
std::vector<std::uint8_t> withSnapshot(std::span<const std::uint8_t> good,
                                       const std::vector<float>& snapshot) {
  return rewrap(good, [&](engine::Envelope& e, std::vector<std::uint8_t>& p) {
    e.flags |= engine::kFlagSnapshot;
    e.snapshotBytes = static_cast<std::uint32_t>(snapshot.size() * sizeof(float));
    const std::size_t at = p.size();
    p.resize(at + e.snapshotBytes);
    std::memcpy(p.data() + at, snapshot.data(), e.snapshotBytes);
  });
}

}  // namespace

TEST_CASE("a snapshot with a NaN is refused; the model stays finite") {
  for (bool nan : {false, true}) {
    INFO((nan ? "NaN snapshot" : "finite snapshot"));
    Run run = makeRun();
    for (auto& p : run.peers) REQUIRE(p->beginRound(0).isOk());
    auto& p0 = *run.peers[0];
    std::vector<float> snapshot(128, 0.5f);
    if (nan) snapshot[17] = std::numeric_limits<float>::quiet_NaN();
    p0.onMessage(1, withSnapshot(run.peers[1]->outgoing(0), snapshot));
    CHECK(p0.counters().messagesApplied == 1);  // the message itself was fine
    CHECK(p0.counters().resyncs == (nan ? 0u : 1u));
    CHECK(dropped(p0, "non_finite_snapshot") == (nan ? 1u : 0u));
    p0.onMessage(2, run.peers[2]->outgoing(0));
    REQUIRE(p0.roundComplete());
    p0.endRound();
    CHECK(finite(p0.model()));
    // The next rounds mix the replica: still finite.
    for (int t = 1; t < 4; ++t) {
      for (auto& p : run.peers) REQUIRE(p->beginRound(t).isOk());
      for (auto& p : run.peers) {
        for (int j : p->sendTo()) run.peers[j]->onMessage(p->rank(), p->outgoing(j));
      }
      for (auto& p : run.peers) p->endRound();
    }
    CHECK(finite(p0.model()));
  }
}

TEST_CASE("a message of values near 3e38 is refused by security.max_delta_ratio") {
  const auto c = test_util::loadYaml(R"(
peers: { count: 2 }
compression: { method: none, dense_below: 0, chunk_elements: 1024 }
workload: { name: consensus, dim: 4096 }
)",
                                     "integrity_test.yaml");
  const std::vector<train::TensorInfo> layout = {{"x", {4096}, 0, 4096}};
  auto sender = engine::makeMessageCodec(c, layout, 1);
  REQUIRE(sender.isOk());
  auto receiver = engine::makeMessageCodec(c, layout, 0);
  REQUIRE(receiver.isOk());
  const auto encode = [&](const std::vector<float>& v) {
    std::vector<float> self(v.size());
    std::vector<std::uint8_t> msg((*sender)->maxMessageBytes());
    auto n = (*sender)->encode(v, 0, msg, self);
    REQUIRE(n.isOk());
    msg.resize(*n);
    return msg;
  };
  std::mt19937 rng(9);
  std::normal_distribution<float> N(0.0f, 1.0f);
  std::vector<float> normal(4096), huge(4096);
  for (auto& x : normal) x = N(rng);
  for (std::size_t k = 0; k < huge.size(); ++k) huge[k] = (k % 2 ? 3.0e38f : -2.9e38f);
  const float limit = 1.0e6f;  // what PeerCore sets for a model of scale 1 with the default ratio

  // A model-sized message passes; the bound adds exactly what the unbounded codec adds.
  std::vector<float> a(4096, 0.25f), b(4096, 0.25f);
  REQUIRE((*receiver)->decodeAccumulate(encode(normal), 0, 1, 1.0f, a, limit).isOk());
  REQUIRE((*receiver)->decodeAccumulate(encode(normal), 0, 1, 1.0f, b, 0.0f).isOk());
  CHECK(a == b);

  // Values near 3e38 (finite: the frame's own checks pass them): refused, nothing changed.
  const auto hugeMsg = encode(huge);
  std::vector<float> acc(4096, 0.25f);
  const Status s = (*receiver)->decodeAccumulate(hugeMsg, 0, 1, 1.0f, acc, limit);
  INFO(s.toString());
  CHECK_FALSE(s.isOk());
  CHECK(s.message().find("magnitude") != std::string::npos);
  for (float x : acc) REQUIRE(x == 0.25f);
  // Without the bound the same message goes in (what the bound is for).
  std::vector<float> acc2(4096, 0.25f);
  CHECK((*receiver)->decodeAccumulate(hugeMsg, 0, 1, 1.0f, acc2, 0.0f).isOk());
  CHECK(acc2[1] > 1e38f);
}

TEST_CASE("the bound on a sparse message is exact: the change measured where it adds, undone") {
  // top-k (and rand-k) frames record what they touch (compress::SparseJournal) instead of
  // copying and comparing their whole range; a small tensor goes dense (dense_below), so one
  // message mixes both kinds. The bounded sum equals the unbounded one bit for bit; a message
  // whose change at one element is above the limit is refused with acc bit-identical to before,
  // the dense tensor's range included; the limit is the change itself, not the sent value.
  for (const std::string method : {"top-k", "rand-k"}) {
    INFO(method);
    const auto c =
        test_util::loadYaml("peers: { count: 2 }\ncompression: { method: " + method +
                                ", ratio: 0.05, dense_below: 100, chunk_elements: 1024 }\n"
                                "workload: { name: consensus, dim: 4160 }\n",
                            "integrity_sparse_test.yaml");
    const std::vector<train::TensorInfo> layout = {{"w", {4096}, 0, 4096}, {"b", {64}, 4096, 64}};
    auto sender = engine::makeMessageCodec(c, layout, 1);
    auto receiver = engine::makeMessageCodec(c, layout, 0);
    REQUIRE(sender.isOk());
    REQUIRE(receiver.isOk());
    std::mt19937 rng(11);
    std::normal_distribution<float> N(0.0f, 1.0f);
    std::vector<float> v(4160), acc0(4160);
    for (auto& x : v) x = N(rng);
    for (auto& x : acc0) x = N(rng);
    // One value far above the rest (top-k takes it; rand-k takes it if its stratum draws it, so
    // every value of the sparse tensor is large for rand-k).
    v[100] = 500.0f;
    if (method == "rand-k") {
      for (std::size_t k = 0; k < 4096; ++k) v[k] = 500.0f + static_cast<float>(k % 7);
    }
    std::vector<float> self(v.size());
    std::vector<std::uint8_t> msg((*sender)->maxMessageBytes());
    auto n = (*sender)->encode(v, 0, msg, self);
    REQUIRE(n.isOk());
    msg.resize(*n);
    float largest = 0;  // the largest change the message makes to acc0 (weight 0.5)
    {
      auto probe = acc0;
      REQUIRE((*receiver)->decodeAccumulate(msg, 0, 1, 0.5f, probe, 0.0f).isOk());
      for (std::size_t k = 0; k < probe.size(); ++k)
        largest = std::max(largest, std::fabs(probe[k] - acc0[k]));
    }
    REQUIRE(largest > 200.0f);
    auto bounded = acc0, unbounded = acc0;
    REQUIRE((*receiver)->decodeAccumulate(msg, 0, 1, 0.5f, bounded, largest).isOk());
    REQUIRE((*receiver)->decodeAccumulate(msg, 0, 1, 0.5f, unbounded, 0.0f).isOk());
    CHECK(std::memcmp(bounded.data(), unbounded.data(), bounded.size() * 4) == 0);
    auto refused = acc0;
    const float below = std::nextafter(largest, 0.0f);
    const Status s = (*receiver)->decodeAccumulate(msg, 0, 1, 0.5f, refused, below);
    CHECK(s.message().find("magnitude") != std::string::npos);
    CHECK(std::memcmp(refused.data(), acc0.data(), acc0.size() * 4) == 0);
  }
}

TEST_CASE("PeerCore bounds a neighbour's delta by the model's scale") {
  // CHOCO int8 peers; p1's message is rewritten so that its first block decodes
  // to values near 1e38 (the block scale raised, the frame's CRC recomputed).
  for (double ratio : {0.0, 1e6}) {
    INFO("max_delta_ratio " << ratio);
    Run run = makeRun(std::string(kYaml) + "security: { max_delta_ratio: " + std::to_string(ratio) +
                      " }\n");
    for (auto& p : run.peers) REQUIRE(p->beginRound(0).isOk());
    auto& p0 = *run.peers[0];
    const auto bad =
        rewrap(run.peers[1]->outgoing(0), [](engine::Envelope& e, std::vector<std::uint8_t>& p) {
          // One frame (dim 128): u32 length, then the frame; int8's payload starts with the
          // block scales after a u32.
          std::uint8_t* f = p.data() + 4;
          const float scale = 2.0e36f;
          std::memcpy(f + compress::kHeaderBytes + 4, &scale, 4);
          const auto& ops = kernels::cpuOps();
          const std::size_t flen = e.messageBytes - 4;
          const std::uint32_t crc =
              ops.crc32c(ops.crc32c(0, f, compress::kCrcOffset), f + compress::kHeaderBytes,
                         flen - compress::kHeaderBytes);
          std::memcpy(f + compress::kCrcOffset, &crc, 4);
        });
    p0.onMessage(1, bad);
    if (ratio > 0) {
      CHECK(dropped(p0, "decode") == 1);
      CHECK(p0.counters().messagesApplied == 0);
    } else {
      CHECK(p0.counters().messagesApplied == 1);  // the unbounded run takes it in
    }
    p0.onMessage(2, run.peers[2]->outgoing(0));
    p0.endRound();
    if (ratio > 0) {
      CHECK(finite(p0.model()));
      CHECK(kernels::cpuOps().maxAbs(p0.model().data(), p0.model().size()) < 1e6f);
    }
  }
}

TEST_CASE("a message that repeats one chunk is refused, nothing added") {
  const auto c = test_util::loadYaml(R"(
peers: { count: 2 }
compression: { method: int8, dense_below: 0, chunk_elements: 1024 }
workload: { name: consensus, dim: 4096 }
)",
                                     "integrity_test.yaml");
  const std::vector<train::TensorInfo> layout = {{"x", {4096}, 0, 4096}};
  auto sender = engine::makeMessageCodec(c, layout, 1);
  auto receiver = engine::makeMessageCodec(c, layout, 0);
  REQUIRE(sender.isOk());
  REQUIRE(receiver.isOk());
  std::vector<float> v(4096, 1.0f), self(4096);
  std::vector<std::uint8_t> msg((*sender)->maxMessageBytes());
  auto n = (*sender)->encode(v, 0, msg, self);
  REQUIRE(n.isOk());
  msg.resize(*n);
  // Four length-prefixed frames; the repeat: frame 0 in place of frame 3.
  std::vector<std::pair<std::size_t, std::size_t>> frames;  // (start of the prefix, bytes)
  for (std::size_t pos = 0; pos < msg.size();) {
    std::uint32_t len = 0;
    std::memcpy(&len, msg.data() + pos, 4);
    frames.emplace_back(pos, 4 + len);
    pos += 4 + len;
  }
  REQUIRE(frames.size() == 4);
  std::vector<std::uint8_t> repeated(msg.begin(), msg.begin() + frames[3].first);
  repeated.insert(repeated.end(), msg.begin(), msg.begin() + frames[0].second);
  std::vector<float> acc(4096, 0.0f);
  const Status s = (*receiver)->decodeAccumulate(repeated, 0, 1, 1.0f, acc, 0.0f);
  INFO(s.toString());
  CHECK_FALSE(s.isOk());
  CHECK(s.message().find("repeated") != std::string::npos);
  for (float x : acc) REQUIRE(x == 0.0f);
  // The original message (every chunk once) goes in.
  CHECK((*receiver)->decodeAccumulate(msg, 0, 1, 1.0f, acc, 0.0f).isOk());
}

TEST_CASE("a neighbour that keeps sending refused messages is quarantined") {
  Run run = makeRun();
  for (auto& p : run.peers) REQUIRE(p->beginRound(0).isOk());
  auto& p0 = *run.peers[0];
  const auto goodSpan = run.peers[1]->outgoing(0);
  const std::vector<std::uint8_t> good(goodSpan.begin(), goodSpan.end());
  std::vector<std::uint8_t> corrupt = good;
  corrupt[20] ^= 0x40;  // the sequence number: the header CRC fails
  const int k = 16;     // PeerCoreOptions::quarantineAfter's default
  p0.endRound();
  std::int64_t t = 1;
  // Rounds of p0 in which p1 sends `copies` corrupt messages.
  const auto refusedRounds = [&](int rounds, int copies) {
    for (int r = 0; r < rounds; ++r) {
      REQUIRE(p0.beginRound(t++).isOk());
      for (int c = 0; c < copies; ++c) p0.onMessage(1, corrupt);
      p0.endRound();
    }
  };
  // K - 1 rounds of refusals (three each: a burst within a round counts once), then a good
  // message (late: of round 0): the count starts again.
  refusedRounds(k - 1, 3);
  CHECK(dropped(p0, "crc") == static_cast<std::uint64_t>(3 * (k - 1)));
  p0.onMessage(1, good);
  CHECK(p0.counters().lateApplied == 1);
  refusedRounds(k - 1, 1);
  CHECK(p0.takeQuarantined().empty());
  CHECK_FALSE(p0.isDead(1));
  // The K-th round in a row: the edge is dropped for good, counted, reported once.
  refusedRounds(1, 1);
  CHECK(p0.isDead(1));
  CHECK(p0.counters().quarantined == 1);
  const auto q = p0.takeQuarantined();
  REQUIRE(q.size() == 1);
  CHECK(q[0].first == 1);
  CHECK(q[0].second ==
        "quarantined: its messages were refused in 16 rounds in a row (the last: crc)");
  CHECK(p0.takeQuarantined().empty());
  p0.onMessage(1, good);
  CHECK(dropped(p0, "unknown_sender") == 1);  // nothing more from it is read
  CHECK(p0.liveDegree() == 1);
}
