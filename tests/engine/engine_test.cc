// The engine's round logic in one process (lockstep driver, the same bytes a real run sends):
// oracles for exact gossip, linear convergence of CHOCO, mass conservation, the constant-step
// limits of CHOCO and D-PSGD (with both momentum kinds, and local steps) against direct linear
// solves, consensus under unbiased compressors, determinism, and robustness against corrupted,
// duplicated and lost messages.
#include <Eigen/Dense>
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <set>

#include "compress/wire.h"
#include "kernels/ops.h"
#include "runtime/config/loader.h"
#include "runtime/engine/envelope.h"
#include "runtime/engine/lockstep.h"
#include "runtime/engine/setup.h"
#include "tests/test_util/config.h"

using namespace grapevine;
using engine::PeerCore;

namespace {

config::Config loadYaml(const std::string& yaml) {
  return test_util::loadYaml(yaml, "engine_test.yaml");
}

struct Run {
  std::shared_ptr<engine::RunPlan> plan;
  std::vector<std::unique_ptr<PeerCore>> peers;
};

Run makeRun(const config::Config& c) {
  Run run;
  auto plan = engine::makeRunPlan(c);
  INFO(plan.status().toString());
  REQUIRE(plan.isOk());
  run.plan = *plan;
  for (int r = 0; r < c.peers.count; ++r) {
    auto p = engine::makePeer(*run.plan, r, 0);
    INFO(p.status().toString());
    REQUIRE(p.isOk());
    run.peers.push_back(std::move(*p));
  }
  return run;
}

Eigen::MatrixXd models(const Run& run) {
  const auto n = run.peers.size();
  const auto d = run.peers[0]->model().size();
  Eigen::MatrixXd X(n, d);
  for (size_t i = 0; i < n; ++i) {
    for (size_t k = 0; k < d; ++k) X(i, k) = run.peers[i]->model()[k];
  }
  return X;
}

Eigen::MatrixXd mixingMatrix(const topology::Schedule& s, std::int64_t round) {
  const int n = s.peers();
  Eigen::MatrixXd W = Eigen::MatrixXd::Zero(n, n);
  for (int i = 0; i < n; ++i) {
    const auto plan = s.plan(i, round);
    W(i, i) = plan.selfWeight;
    for (const auto& [j, w] : plan.weights) W(i, j) = w;
  }
  return W;
}

double consensusDistance(const Eigen::MatrixXd& X) {
  const Eigen::RowVectorXd mean = X.colwise().mean();
  return (X.rowwise() - mean).squaredNorm() / X.rows();
}

std::string writeQuadratic(int n, int d, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> N(0, 1);
  std::string path =
      std::string(GRAPEVINE_BINARY_DIR) + "/quadratic_" + std::to_string(n) + ".json";
  std::ofstream out(path);
  out << "{\"a\": [";
  for (int i = 0; i < n; ++i) out << (i ? ", " : "") << 0.5 + 0.1 * i;
  out << "], \"b\": [";
  for (int i = 0; i < n; ++i) {
    out << (i ? ", " : "") << "[";
    for (int k = 0; k < d; ++k) out << (k ? ", " : "") << N(rng);
    out << "]";
  }
  out << "]}\n";
  return path;
}

}  // namespace

TEST_CASE("D-PSGD on the consensus workload matches the oracle X <- W X") {
  const auto c = loadYaml(R"(
peers: { count: 8 }
topology: { kind: random-regular, degree: 3 }
algorithm: { name: dsgd }
optimizer: { lr: 0.0, momentum: 0.0, nesterov: false }
workload: { name: consensus, dim: 64 }
)");
  Run run = makeRun(c);
  Eigen::MatrixXd X = models(run);
  const Eigen::MatrixXd W = mixingMatrix(*run.plan->schedule, 0);
  REQUIRE(engine::runLockstep(run.peers, 0, 30).isOk());
  for (int t = 0; t < 30; ++t) X = W * X;
  const Eigen::MatrixXd Y = models(run);
  CHECK((Y - X).cwiseAbs().maxCoeff() < 1e-6);
}

TEST_CASE("D-PSGD on one-peer exponential averages exactly in log2(n) rounds") {
  const auto c = loadYaml(R"(
peers: { count: 16 }
topology: { kind: one-peer-exponential }
algorithm: { name: dsgd }
optimizer: { lr: 0.0, momentum: 0.0, nesterov: false }
workload: { name: consensus, dim: 32 }
)");
  Run run = makeRun(c);
  const Eigen::RowVectorXd mean = models(run).colwise().mean();
  REQUIRE(engine::runLockstep(run.peers, 0, 4).isOk());
  const Eigen::MatrixXd Y = models(run);
  CHECK((Y.rowwise() - mean).cwiseAbs().maxCoeff() < 1e-5);
}

TEST_CASE(
    "CHOCO with top-1% on a ring of 16 converges linearly to the exact average, conserving mass") {
  const auto c = loadYaml(R"(
peers: { count: 16 }
topology: { kind: ring }
algorithm: { name: choco, consensus_step: 0.05 }
optimizer: { lr: 0.0, momentum: 0.0, nesterov: false }
compression: { method: top-k, ratio: 0.01, selector: exact, dense_below: 0 }
workload: { name: consensus, dim: 1000 }
)");
  Run run = makeRun(c);
  const Eigen::MatrixXd X0 = models(run);
  const Eigen::RowVectorXd mean0 = X0.colwise().mean();
  const double d0 = consensusDistance(X0);
  std::vector<double> dist, drift;
  engine::LockstepHooks hooks;
  hooks.afterRound = [&](std::int64_t t) {
    if ((t + 1) % 1000 == 0) {
      const Eigen::MatrixXd X = models(run);
      dist.push_back(consensusDistance(X));
      drift.push_back((X.colwise().mean() - mean0).norm() / std::sqrt(double(X.cols())));
    }
  };
  REQUIRE(engine::runLockstep(run.peers, 0, 6000, hooks).isOk());
  const Eigen::MatrixXd X = models(run);
  // Mass: the mean of the models never moves (W symmetric, learning rate 0) beyond fp32 rounding:
  // RMS over coordinates below 1e-6, every coordinate below 1e-5, after 6000 rounds.
  std::string driftTrace;
  for (double v : drift) driftTrace += " " + std::to_string(v);
  INFO("RMS mean drift per 1000 rounds:" << driftTrace);
  CHECK(drift.back() < 1e-6);
  CHECK((X.colwise().mean() - mean0).cwiseAbs().maxCoeff() < 1e-5);
  // Linear convergence: each block of 1000 rounds shrinks the distance by a steady factor.
  std::string trace;
  for (double v : dist) trace += " " + std::to_string(v);
  INFO("d0 " << d0 << " then" << trace);
  CHECK(dist[5] < 1e-6 * d0);
  // (until fp32 rounding is reached, around 1e-9 of the start)
  for (size_t k = 1; k < dist.size() && dist[k - 1] > 1e-9 * d0; ++k)
    CHECK(dist[k] < 0.5 * dist[k - 1]);
}

namespace {
// Solves the constant-step fixed point of the quadratic problem for one coordinate block.
// F_i(x) = 1/2 |a_i x - b_i|^2, so grad = A^2 X - A B with A = diag(a). `localSteps` H plain steps
// of step size eta per round (algorithm.local_steps).
Eigen::MatrixXd quadraticLimit(const std::string& algorithm, const Eigen::MatrixXd& W,
                               const Eigen::VectorXd& a, const Eigen::MatrixXd& B, double eta,
                               double gamma, int localSteps = 1) {
  const int n = static_cast<int>(a.size());
  const Eigen::MatrixXd I = Eigen::MatrixXd::Identity(n, n);
  const Eigen::MatrixXd A = a.asDiagonal();
  const Eigen::MatrixXd A2 = A * A;
  if (localSteps > 1) {
    // X = M Phi(X): M = W (dsgd) or I + gamma (W - I) (choco), and Phi = H steps
    // X <- P X + eta A B with P = I - eta A^2, an affine map: Phi(X) = P^H X + S eta A B with
    // S = sum_{k<H} P^k.  ->  (I - M P^H) X = M S eta A B.
    const Eigen::MatrixXd M = algorithm == "dsgd" ? W : Eigen::MatrixXd(I + gamma * (W - I));
    const Eigen::MatrixXd P = I - eta * A2;
    Eigen::MatrixXd PH = I, S = Eigen::MatrixXd::Zero(n, n);
    for (int k = 0; k < localSteps; ++k) {
      S += PH;
      PH = P * PH;
    }
    return (I - M * PH).lu().solve(M * S * eta * A * B);
  }
  if (algorithm == "dsgd") {
    // X = W (X - eta (A^2 X - A B))  ->  (I - W + eta W A^2) X = eta W A B
    return (I - W + eta * W * A2).lu().solve(eta * W * A * B);
  }
  // eta G = gamma (W - I)(X - eta G), G = A^2 X - A B
  // -> [eta A^2 - gamma (W - I)(I - eta A^2)] X = eta A B + gamma (W - I) eta A B
  const Eigen::MatrixXd M = eta * A2 - gamma * (W - I) * (I - eta * A2);
  return M.lu().solve(eta * A * B + gamma * (W - I) * eta * A * B);
}
}  // namespace

TEST_CASE("constant-step limits on the quadratic match the linear solves") {
  const int n = 8, d = 6;
  const std::string data = writeQuadratic(n, d, 5);
  struct Case {
    std::string algorithm, compression, momentumKind;
    double momentum;
    bool nesterov;
    int rounds;
    int localSteps = 1;
    double lr = 0.1;
  };
  const std::vector<Case> cases = {
      {"dsgd", "none", "local", 0.0, false, 3000},
      {"dsgd", "none", "local", 0.5, false, 3000},
      {"dsgd", "none", "quasi-global", 0.5, true, 3000},
      {"choco", "none", "local", 0.0, false, 3000},
      {"choco", "top-k", "local", 0.0, false, 20000},
      {"choco", "top-k", "local", 0.5, true, 20000},
      {"choco", "top-k", "quasi-global", 0.5, false, 20000},
      // Quasi-global momentum with H local steps per round: afterMixing must divide the round's
      // change by lr * H. By lr alone the buffer's gain 0.9 (1 + 0.1 H) > 1 and, at a small lr
      // (where the gradient's pull does not damp the buffer), these diverge.
      {"dsgd", "none", "quasi-global", 0.9, false, 3000, 2, 0.02},
      {"dsgd", "none", "quasi-global", 0.9, true, 3000, 4, 0.02},
      {"choco", "none", "quasi-global", 0.9, false, 3000, 4, 0.02},
      {"choco", "top-k", "quasi-global", 0.9, true, 20000, 2, 0.02},
  };
  for (const auto& cs : cases) {
    DYNAMIC_SECTION(cs.algorithm << " + " << cs.compression << ", " << cs.momentumKind
                                 << " momentum " << cs.momentum << (cs.nesterov ? " nesterov" : "")
                                 << ", " << cs.localSteps << " local steps") {
      const double eta = cs.lr, gamma = 0.5;
      const auto c = loadYaml(
          "peers: { count: 8 }\ntopology: { kind: random-regular, degree: 3 }\n"
          "algorithm: { name: " +
          cs.algorithm + ", consensus_step: 0.5, local_steps: " + std::to_string(cs.localSteps) +
          " }\n"
          "optimizer: { lr: " +
          std::to_string(cs.lr) + ", momentum: " + std::to_string(cs.momentum) + ", nesterov: " +
          (cs.nesterov ? "true" : "false") + ", momentum_kind: " + cs.momentumKind +
          ", schedule: constant }\n"
          "compression: { method: " +
          cs.compression +
          ", ratio: 0.5, selector: exact, dense_below: 0 }\n"
          "workload: { name: quadratic, data: \"" +
          data + "\" }\n");
      Run run = makeRun(c);
      REQUIRE(engine::runLockstep(run.peers, 0, cs.rounds).isOk());
      const Eigen::MatrixXd W = mixingMatrix(*run.plan->schedule, 0);
      Eigen::VectorXd a(n);
      Eigen::MatrixXd B(n, d);
      std::ifstream in(data);
      auto j = nlohmann::json::parse(in);
      for (int i = 0; i < n; ++i) {
        a(i) = j["a"][i].get<double>();
        for (int k = 0; k < d; ++k) B(i, k) = j["b"][i][k].get<double>();
      }
      // Local momentum's limit is plain SGD's at eta / (1 - beta). Quasi-global momentum vanishes
      // at a fixed point (d = 0): u = g, or u = g + beta * g in its Nesterov form (u = g +
      // beta(beta mhat + g)).
      const double effEta = cs.momentumKind == "local"
                                ? eta / (1.0 - cs.momentum)
                                : eta * (cs.nesterov ? 1.0 + cs.momentum : 1.0);
      const Eigen::MatrixXd expect =
          quadraticLimit(cs.algorithm, W, a, B, effEta, gamma, cs.localSteps);
      const Eigen::MatrixXd got = models(run);
      const double rel = (got - expect).norm() / expect.norm();
      INFO("relative error " << rel);
      CHECK(got.allFinite());
      CHECK(rel < 1e-6);
    }
  }
}

TEST_CASE("same seed, same result: lockstep runs are bit-reproducible") {
  const std::string yaml = R"(
run: { seed: 11 }
peers: { count: 6 }
topology: { kind: ring }
algorithm: { name: choco, consensus_step: 0.3 }
optimizer: { lr: 0.05, momentum: 0.9, nesterov: true, batch_size: 16 }
compression: { method: qsgd, levels: 4, dense_below: 0 }
workload: { name: fashion-mnist-softmax }
)";
  Run a = makeRun(loadYaml(yaml));
  Run b = makeRun(loadYaml(yaml));
  // Whatever the outcome (a divergence stops a run too), it is the same for the same seed.
  const Status sa = engine::runLockstep(a.peers, 0, 20);
  const Status sb = engine::runLockstep(b.peers, 0, 20);
  INFO(sa.toString());
  REQUIRE((sa.isOk() || sa.code() == ErrorCode::kAborted));
  CHECK(sa.code() == sb.code());
  CHECK(sa.message() == sb.message());
  for (size_t i = 0; i < a.peers.size(); ++i) {
    const auto x = a.peers[i]->model();
    const auto y = b.peers[i]->model();
    REQUIRE(x.size() == y.size());
    CHECK(std::memcmp(x.data(), y.data(), x.size_bytes()) == 0);
  }
}

// CHOCO + int8 on a ring of 4, no local steps, replica checks every 5 rounds (the bad-message
// and revival cases).
constexpr const char* kChocoInt8Ring4 = R"(
peers: { count: 4 }
topology: { kind: ring }
algorithm: { name: choco, consensus_step: 0.5, check_every: 5 }
optimizer: { lr: 0.0, momentum: 0.0, nesterov: false }
compression: { method: int8, dense_below: 0 }
workload: { name: consensus, dim: 256 }
)";

TEST_CASE("bad messages are dropped, counted and never applied") {
  const auto c = loadYaml(kChocoInt8Ring4);
  Run run = makeRun(c);
  auto& p0 = *run.peers[0];
  auto& p1 = *run.peers[1];
  for (auto& p : run.peers) REQUIRE(p->beginRound(0).isOk());
  const auto good = p1.outgoing(0);
  std::vector<std::uint8_t> bytes(good.begin(), good.end());
  const auto before = std::vector<float>(p0.model().begin(), p0.model().end());
  auto model = [](const PeerCore& p) {
    return std::vector<float>(p.model().begin(), p.model().end());
  };
  // A message acts on the model at endRound() (mixing), so "never applied" is checked there: p0's
  // round must end exactly as in an identical run (same config, same seed) in which p0 received
  // only `deliveredGood` copies of the good message (0 or 1). An applied bad message changes the
  // mix (its sender no longer counts as missing, or its payload enters the public copies).
  auto expectedAfterRound = [&](bool deliveredGood) {
    Run twin = makeRun(c);
    for (auto& p : twin.peers) REQUIRE(p->beginRound(0).isOk());
    auto& t0 = *twin.peers[0];
    REQUIRE(model(t0) == before);  // the twin starts where p0 started
    if (deliveredGood) {
      const auto t1 = twin.peers[1]->outgoing(0);
      REQUIRE(std::equal(t1.begin(), t1.end(), bytes.begin(), bytes.end()));
      t0.onMessage(1, t1);
      REQUIRE(t0.counters().messagesApplied == 1);
    }
    t0.endRound();
    return model(t0);
  };
  const auto withoutMessage = expectedAfterRound(false);
  // The check can fail: one applied message moves the model.
  REQUIRE(expectedAfterRound(true) != withoutMessage);

  SECTION("every single-byte corruption is rejected") {
    std::mt19937 rng(3);
    for (size_t pos = 0; pos < bytes.size(); pos += 1 + rng() % 7) {
      auto bad = bytes;
      bad[pos] ^= static_cast<std::uint8_t>(1 + rng() % 255);
      p0.onMessage(1, bad);
    }
    std::uint64_t dropped = 0;
    for (const auto& [reason, n] : p0.counters().dropped) dropped += n;
    CHECK(dropped > 0);
    CHECK(p0.counters().messagesApplied == 0);
    CHECK(model(p0) == before);
    // The corrupted copies did not consume the edge's sequence number: the good one still applies.
    p0.onMessage(1, bytes);
    CHECK(p0.counters().messagesApplied == 1);
    // ... and the round ends as if only the good one had come.
    p0.endRound();
    CHECK(model(p0) == expectedAfterRound(true));
  }
  SECTION("truncated and oversized messages") {
    p0.onMessage(1, std::span<const std::uint8_t>(bytes.data(), 10));
    p0.onMessage(1, std::span<const std::uint8_t>(bytes.data(), bytes.size() - 1));
    CHECK(p0.counters().dropped.at("truncated") == 2);
    CHECK(p0.counters().messagesApplied == 0);
    p0.endRound();
    CHECK(model(p0) == withoutMessage);
  }
  SECTION("a duplicate is applied once") {
    p0.onMessage(1, bytes);
    p0.onMessage(1, bytes);
    CHECK(p0.counters().messagesApplied == 1);
    CHECK(p0.counters().dropped.at("duplicate") == 1);
    p0.endRound();
    CHECK(model(p0) == expectedAfterRound(true));
  }
  SECTION("a message from a peer that is not a neighbour") {
    p0.onMessage(2, bytes);
    CHECK(p0.counters().dropped.at("unknown_sender") == 1);
    CHECK(p0.counters().messagesApplied == 0);
    p0.endRound();
    CHECK(model(p0) == withoutMessage);
  }
  SECTION("a bad magic and another version are counted by their reasons") {
    auto magic = bytes;
    magic[0] ^= 1;
    p0.onMessage(1, magic);
    auto version = bytes;
    version[4] = 2;
    p0.onMessage(1, version);
    CHECK(p0.counters().dropped.at("bad_magic") == 1);
    CHECK(p0.counters().dropped.at("version") == 1);
    CHECK(p0.counters().messagesApplied == 0);
  }
}

TEST_CASE("envelope: every rejection has its reason and code") {
  using namespace engine;
  const std::vector<std::uint8_t> payload = {1, 2, 3, 4, 5};
  Envelope e;
  e.flags = kFlagHasHash;
  e.sender = 7;
  e.incarnation = 3;
  e.sequence = 11;
  e.round = 12;
  e.liveDegree = 2;
  e.publicHash = 0x1122334455667788ull;
  e.messageBytes = static_cast<std::uint32_t>(payload.size());
  e.payloadCrc = payloadChecksum(payload);
  std::vector<std::uint8_t> good(kEnvelopeBytes);
  writeEnvelope(e, good);
  good.insert(good.end(), payload.begin(), payload.end());

  auto ok = readEnvelope(good);
  REQUIRE(ok.isOk());
  CHECK(ok->sender == 7);
  CHECK(ok->sequence == 11);
  CHECK(ok->publicHash == 0x1122334455667788ull);
  CHECK(envelopeErrorReason(ok.status()).empty());

  auto expect = [](std::vector<std::uint8_t> bytes, ErrorCode code, std::string_view reason) {
    auto r = readEnvelope(bytes);
    REQUIRE_FALSE(r.isOk());
    INFO(r.status().toString());
    CHECK(r.status().code() == code);
    CHECK(envelopeErrorReason(r.status()) == reason);
  };
  expect({good.begin(), good.begin() + 10}, ErrorCode::kDataLoss, "truncated");
  auto longer = good;
  longer.push_back(0);
  expect(longer, ErrorCode::kDataLoss, "truncated");
  for (std::size_t i = 0; i < 4; ++i) {
    auto bad = good;
    bad[i] ^= 0x10;
    expect(bad, ErrorCode::kDataLoss, "bad_magic");
  }
  auto version = good;
  version[4] = 2;
  expect(version, ErrorCode::kFailedPrecondition, "version");
  auto header = good;
  header[20] ^= 1;
  expect(header, ErrorCode::kDataLoss, "crc");
  auto body = good;
  body.back() ^= 1;
  expect(body, ErrorCode::kDataLoss, "crc");
}

TEST_CASE(
    "a lost message desynchronises a replica; the hash check detects it and a resync repairs it") {
  const auto c = loadYaml(R"(
peers: { count: 4 }
topology: { kind: ring }
algorithm: { name: choco, consensus_step: 0.5, check_every: 4 }
optimizer: { lr: 0.0, momentum: 0.0, nesterov: false }
compression: { method: top-k, ratio: 0.1, dense_below: 0 }
workload: { name: consensus, dim: 200 }
)");
  Run run = makeRun(c);
  engine::LockstepHooks hooks;
  hooks.deliver = [](int from, int to, std::int64_t round) {
    return !(from == 1 && to == 0 && round == 2);
  };
  REQUIRE(engine::runLockstep(run.peers, 0, 40, hooks).isOk());
  const auto& cnt = run.peers[0]->counters();
  CHECK(cnt.dropped.at("gap") == 1);
  CHECK(cnt.replicaMismatches + cnt.resyncs >= 1);
  CHECK(cnt.resyncs >= 1);
  // After the resync the replicas agree again: later checks pass.
  const auto mismatchesAfter = cnt.replicaMismatches;
  REQUIRE(engine::runLockstep(run.peers, 40, 40).isOk());
  CHECK(run.peers[0]->counters().replicaMismatches == mismatchesAfter);
  CHECK(run.peers[0]->counters().replicaChecks > 10);
}

TEST_CASE("DeepSqueeze with int8 on a torus drives peers together and conserves the mean") {
  const auto c = loadYaml(R"(
peers: { count: 9 }
topology: { kind: torus, dims: [3, 3] }
algorithm: { name: deepsqueeze, consensus_step: 0.2 }
optimizer: { lr: 0.0, momentum: 0.0, nesterov: false }
compression: { method: int8, dense_below: 0 }
workload: { name: consensus, dim: 512 }
)");
  Run run = makeRun(c);
  const Eigen::MatrixXd X0 = models(run);
  REQUIRE(engine::runLockstep(run.peers, 0, 300).isOk());
  const Eigen::MatrixXd X = models(run);
  INFO("distance " << consensusDistance(X0) << " -> " << consensusDistance(X));
  CHECK(consensusDistance(X) < 1e-3 * consensusDistance(X0));
  // Error compensation keeps the average: sum_i (x_i - x_half_i) = gamma sum_ij w_ij (c_j - c_i) =
  // 0.
  CHECK((X.colwise().mean() - X0.colwise().mean()).cwiseAbs().maxCoeff() < 1e-4);
}

TEST_CASE("CHOCO and DeepSqueeze with unbiased compressors reach consensus: qsgd and rand-k") {
  // Unscaled, qsgd (omega = sqrt(4096) / 16 = 4 here) and rand-k scaled by n/k (omega = 9) make
  // CHOCO's error x_half - xhat (and DeepSqueeze's e) grow every round, and the run stops on
  // non-finite values whatever the consensus step. Decoded as C/(1 + omega) they are contractions
  // (delta 0.2 and 0.1): CHOCO converges linearly, DeepSqueeze down to its noise floor (~ gamma).
  struct Case {
    std::string algorithm, compression;
    double gamma;
    int rounds;
    double shrink;  // required consensus distance / initial distance
  };
  const std::vector<Case> cases = {
      {"choco", "{ method: qsgd, levels: 16, dense_below: 0 }", 0.2, 800, 1e-10},
      {"choco", "{ method: qsgd, levels: 16, dense_below: 0 }", 0.5, 800, 1e-10},
      // rand-k / (1 + omega) is rand-k unscaled, which needs a small step on a ring (at 0.2 the
      // unscaled one diverges too: a consensus-step matter, not the compressor's).
      {"choco", "{ method: rand-k, ratio: 0.1, unbiased: true, dense_below: 0 }", 0.05, 800, 1e-7},
      {"deepsqueeze", "{ method: qsgd, levels: 16, dense_below: 0 }", 0.05, 2000, 1e-2},
  };
  for (const auto& cs : cases) {
    DYNAMIC_SECTION(cs.algorithm << " + " << cs.compression << " step " << cs.gamma) {
      const auto c = loadYaml(
          "peers: { count: 8 }\ntopology: { kind: ring }\n"
          "algorithm: { name: " +
          cs.algorithm + ", consensus_step: " + std::to_string(cs.gamma) +
          " }\n"
          "optimizer: { lr: 0.0, momentum: 0.0, nesterov: false }\n"
          "compression: " +
          cs.compression + "\nworkload: { name: consensus, dim: 4096 }\n");
      Run run = makeRun(c);
      const Eigen::MatrixXd X0 = models(run);
      const auto status = engine::runLockstep(run.peers, 0, cs.rounds);
      INFO(status.toString());
      REQUIRE(status.isOk());
      const Eigen::MatrixXd X = models(run);
      REQUIRE(X.allFinite());
      INFO("distance " << consensusDistance(X0) << " -> " << consensusDistance(X));
      CHECK(consensusDistance(X) < cs.shrink * consensusDistance(X0));
      // Both conserve the mean (W symmetric, lr 0) up to fp32 rounding.
      CHECK((X.colwise().mean() - X0.colwise().mean()).cwiseAbs().maxCoeff() < 1e-4);
    }
  }
}

TEST_CASE(
    "a suspect neighbour's round is skipped and its late CHOCO delta still applied in order") {
  const auto c = loadYaml(R"(
peers: { count: 4 }
topology: { kind: ring }
algorithm: { name: choco, consensus_step: 0.5, check_every: 3 }
optimizer: { lr: 0.0, momentum: 0.0, nesterov: false }
compression: { method: top-k, ratio: 0.2, dense_below: 0 }
workload: { name: consensus, dim: 100 }
)");
  Run run = makeRun(c);
  auto& peers = run.peers;
  // Round 0 normally.
  REQUIRE(engine::runLockstep(peers, 0, 1).isOk());
  // Round 1: peer 1's message to 0 is late: 0 ends the round without it.
  for (auto& p : peers) REQUIRE(p->beginRound(1).isOk());
  std::vector<std::uint8_t> late;
  for (auto& p : peers) {
    for (int j : p->sendTo()) {
      if (p->rank() == 1 && j == 0) {
        late.assign(p->outgoing(j).begin(), p->outgoing(j).end());
        continue;
      }
      peers[j]->onMessage(p->rank(), p->outgoing(j));
    }
  }
  const auto suspects = peers[0]->endRound();
  REQUIRE(suspects == std::vector<int>{1});
  for (int r = 1; r < 4; ++r) CHECK(peers[r]->endRound().empty());
  // Round 2 starts; the late message arrives now and goes to the replica, in order.
  for (auto& p : peers) REQUIRE(p->beginRound(2).isOk());
  peers[0]->onMessage(1, late);
  CHECK(peers[0]->counters().lateApplied == 1);
  for (auto& p : peers) {
    for (int j : p->sendTo()) peers[j]->onMessage(p->rank(), p->outgoing(j));
  }
  for (auto& p : peers) CHECK(p->endRound().empty());
  // Round 3 is a check round: the replicas agree, so no mismatch and no resync.
  REQUIRE(engine::runLockstep(peers, 3, 4).isOk());
  CHECK(peers[0]->counters().replicaChecks >= 2);
  CHECK(peers[0]->counters().replicaMismatches == 0);
  CHECK(peers[0]->counters().suspectRounds == 1);
}

TEST_CASE("a multi-frame message with a bad last frame adds nothing; a good one adds every frame") {
  // 4096 elements in chunks of 1024: four frames. The message codec checks all of them before it
  // adds any (no dense scratch copy), so a payload invariant broken in the last frame (behind a
  // valid CRC) must leave acc exactly as it was.
  for (const char* method : {"int8", "top-k"}) {
    INFO(method);
    const auto c = loadYaml(std::string(R"(
peers: { count: 2 }
compression: { method: )") + method +
                            R"(, ratio: 0.05, dense_below: 0, chunk_elements: 1024 }
workload: { name: consensus, dim: 4096 }
)");
    const std::vector<train::TensorInfo> layout = {{"x", {4096}, 0, 4096}};
    auto sender = engine::makeMessageCodec(c, layout, 1);
    auto receiver = engine::makeMessageCodec(c, layout, 0);
    REQUIRE(sender.isOk());
    REQUIRE(receiver.isOk());
    std::mt19937 rng(5);
    std::normal_distribution<float> N(0.0f, 1.0f);
    std::vector<float> v(4096), self(4096);
    for (auto& x : v) x = N(rng);
    std::vector<std::uint8_t> msg((*sender)->maxMessageBytes());
    auto n = (*sender)->encode(v, 0, msg, self);
    REQUIRE(n.isOk());
    msg.resize(*n);

    // Frame boundaries: u32 length + frame, four times.
    std::vector<std::size_t> starts;
    for (std::size_t pos = 0; pos < msg.size();) {
      std::uint32_t len = 0;
      std::memcpy(&len, msg.data() + pos, 4);
      starts.push_back(pos + 4);
      pos += 4 + len;
    }
    REQUIRE(starts.size() == 4);

    // The good message adds exactly what the sender decoded for itself, weighted.
    std::vector<float> acc(4096, 0.25f);
    REQUIRE((*receiver)->decodeAccumulate(msg, 0, 1, 0.5f, acc, 0.0f).isOk());
    for (std::size_t k = 0; k < acc.size(); ++k) REQUIRE(acc[k] == 0.25f + 0.5f * self[k]);

    // The last frame's payload broken behind a recomputed CRC: rejected, nothing added.
    auto bad = msg;
    std::uint8_t* f = bad.data() + starts.back();
    const std::size_t flen = bad.size() - starts.back();
    if (std::string(method) == "int8") {
      const float inf = std::numeric_limits<float>::infinity();
      std::memcpy(f + compress::kHeaderBytes + 4, &inf, 4);  // the first block's scale
    } else {
      const std::uint32_t count = 5000;  // more indices than elements
      std::memcpy(f + compress::kHeaderBytes + 4, &count, 4);
    }
    const auto& ops = kernels::cpuOps();
    const std::uint32_t crc = ops.crc32c(ops.crc32c(0, f, compress::kCrcOffset),
                                         f + compress::kHeaderBytes, flen - compress::kHeaderBytes);
    std::memcpy(f + compress::kCrcOffset, &crc, 4);
    std::vector<float> acc2(4096, 0.25f);
    const Status s = (*receiver)->decodeAccumulate(bad, 0, 1, 0.5f, acc2, 0.0f);
    INFO(s.toString());
    REQUIRE_FALSE(s.isOk());
    for (float x : acc2) REQUIRE(x == 0.25f);
  }
}

namespace {
// 8 peers on a ring, CHOCO + top-50% on the quadratic, with the given optimizer.
config::Config chocoQuadratic(const std::string& optimizer) {
  const std::string path = writeQuadratic(8, 10, 7);
  return loadYaml(R"(
peers: { count: 8 }
topology: { kind: ring }
algorithm: { name: choco, consensus_step: 0.3 }
compression: { method: top-k, ratio: 0.5 }
optimizer: )" + optimizer +
                  R"(
workload: { name: quadratic, data: ")" +
                  path + R"(" }
)");
}
}  // namespace

TEST_CASE("a diverging run stops with kAborted, names the round and keeps finite models") {
  Run run = makeRun(chocoQuadratic("{ lr: 20.0, momentum: 0.0, nesterov: false }"));
  const Status st = engine::runLockstep(run.peers, 0, 500);
  INFO(st.toString());
  REQUIRE(st.code() == ErrorCode::kAborted);
  CHECK(st.message().rfind("diverged at round ", 0) == 0);
  CHECK(st.message().find("lower optimizer.lr or algorithm.consensus_step") != std::string::npos);
  bool someDiverged = false;
  for (const auto& p : run.peers) {
    for (float v : p->model()) REQUIRE(std::isfinite(v));
    if (p->divergence()) {
      someDiverged = true;
      CHECK(p->divergence()->origin == p->rank());
      CHECK(p->round() + 1 == p->divergence()->round);  // the diverged round was abandoned
    }
  }
  CHECK(someDiverged);
}

TEST_CASE("a stable run never reports a divergence") {
  Run run = makeRun(chocoQuadratic("{ lr: 0.1, momentum: 0.9, nesterov: true }"));
  REQUIRE(engine::runLockstep(run.peers, 0, 500).isOk());
  for (const auto& p : run.peers) CHECK_FALSE(p->divergence());
}

namespace {

// One lockstep round of every peer: all begin round t, every message goes out except on the
// (lower, higher) edges in `cut`, all end the round. Per peer: whether its round was complete
// before it ended, and its suspects.
struct RoundOutcome {
  std::vector<bool> complete;
  std::vector<std::vector<int>> suspects;
};
RoundOutcome lockstepRound(Run& run, std::int64_t t,
                           const std::set<std::pair<int, int>>& cut = {}) {
  for (auto& p : run.peers) REQUIRE(p->beginRound(t).isOk());
  for (auto& p : run.peers) {
    for (int j : p->sendTo()) {
      if (cut.count({std::min(p->rank(), j), std::max(p->rank(), j)})) continue;
      run.peers[j]->onMessage(p->rank(), p->outgoing(j));
    }
  }
  RoundOutcome out;
  for (auto& p : run.peers) {
    out.complete.push_back(p->roundComplete());
    out.suspects.push_back(p->endRound());
  }
  return out;
}

// Rounds 0..9 of the whole ring, then a partition of edge 0-1 from round 10 until `healAt`: both
// ends drop each other (silence).
void cutEdge01(Run& run, std::int64_t healAt) {
  for (std::int64_t t = 0; t < 10; ++t) lockstepRound(run, t);
  run.peers[0]->markDead(1);
  run.peers[1]->markDead(0);
  for (std::int64_t t = 10; t < healAt; ++t) lockstepRound(run, t, {{0, 1}});
}

}  // namespace

TEST_CASE(
    "a revived CHOCO edge mixes nothing of its neighbour before the snapshot, then is exact") {
  const auto c = loadYaml(kChocoInt8Ring4);
  Run run = makeRun(c);
  auto& p0 = *run.peers[0];
  auto& p1 = *run.peers[1];
  cutEdge01(run, 20);
  CHECK_FALSE(p0.revive(2));  // live: nothing to take back
  // Peer 1 hears peer 0 first: it sends its own copy in round 20, which peer 0, still counting it
  // dead, drops.
  REQUIRE(p1.revive(0));
  CHECK_FALSE(p1.revive(0));
  lockstepRound(run, 20);
  CHECK(p0.counters().dropped.at("unknown_sender") == 1);
  // Peer 0 takes it back in round 21 and asks for peer 1's copy when peer 1's message comes
  // without one. Peer 1 sent its snapshot in round 20 and may send the next one only 8 rounds
  // later: until then peer 0 mixes nothing of peer 1 (its replica missed ten rounds of deltas),
  // but does not wait for it either.
  REQUIRE(p0.revive(1));
  for (std::int64_t t = 21; t < 20 + PeerCore::kSnapshotMinRounds; ++t) {
    INFO("round " << t);
    const auto round = lockstepRound(run, t);
    CHECK(round.complete[0]);
    CHECK(round.suspects[0] == std::vector<int>{1});
    CHECK(p0.counters().dropped.at("awaiting_snapshot") == static_cast<std::uint64_t>(t - 20));
    // Peer 0's own copy reached peer 1 with its round-21 message.
    CHECK(p1.algorithm().replicaHash(0) == p0.algorithm().publicCopyHash());
  }
  CHECK(p0.counters().dropped.at("gap") == 1);  // the message of round 20
  CHECK(p0.algorithm().replicaHash(1) != p1.algorithm().publicCopyHash());
  // Round 28: peer 1's snapshot; from then on both replicas are exact and the edge mixes again.
  for (std::int64_t t = 20 + PeerCore::kSnapshotMinRounds; t < 60; ++t) {
    INFO("round " << t);
    const auto round = lockstepRound(run, t);
    CHECK(round.complete[0]);
    CHECK(round.suspects[0].empty());
    CHECK(p0.algorithm().replicaHash(1) == p1.algorithm().publicCopyHash());
    CHECK(p1.algorithm().replicaHash(0) == p0.algorithm().publicCopyHash());
  }
  for (auto& p : run.peers) {
    CHECK(p->counters().replicaMismatches == 0);
    CHECK(p->liveDegree() == 2);
  }
  CHECK(p0.counters().revivedNeighbours == 1);
  CHECK(p0.counters().deadNeighbours == 1);
  CHECK(consensusDistance(models(run)) < 1e-6);
}

TEST_CASE("a rejoined CHOCO edge costs one snapshot each way") {
  const auto c = loadYaml(kChocoInt8Ring4);
  Run run = makeRun(c);
  auto& p0 = *run.peers[0];
  auto& p1 = *run.peers[1];
  cutEdge01(run, 15);
  const auto before0 = p0.counters().resyncs, before1 = p1.counters().resyncs;
  // New connections at both ends (a restart, or a partition that healed): each sends its copy
  // with its first message. Once each also asked for the other's, and that request, served after
  // the snapshot rate limit, sent a second dense copy behind the first.
  REQUIRE(p0.rejoin(1, 0, std::nullopt, false, 14));
  REQUIRE(p1.rejoin(0, 0, std::nullopt, false, 14));
  for (std::int64_t t = 15; t < 15 + 4 * PeerCore::kSnapshotMinRounds; ++t) {
    INFO("round " << t);
    lockstepRound(run, t);
    CHECK(p0.algorithm().replicaHash(1) == p1.algorithm().publicCopyHash());
    CHECK(p1.algorithm().replicaHash(0) == p0.algorithm().publicCopyHash());
  }
  CHECK(p0.counters().resyncs == before0 + 1);
  CHECK(p1.counters().resyncs == before1 + 1);
  for (auto* p : {&p0, &p1}) {
    CHECK(p->counters().dropped.count("resync_rate") == 0);
    CHECK(p->counters().dropped.count("awaiting_snapshot") == 0);
    CHECK(p->counters().replicaMismatches == 0);
    CHECK(p->liveDegree() == 2);
  }
}

// 4 peers on a ring, CHOCO + int8 on pure consensus (no gradient), 500 rounds.
constexpr const char* kConsensusInt8Ring4 = R"(
peers: { count: 4 }
topology: { kind: ring }
algorithm: { name: choco, consensus_step: 0.5 }
optimizer: { lr: 0.0, momentum: 0.0, nesterov: false }
compression: { method: int8, dense_below: 0 }
workload: { name: consensus, dim: 64 }
run: { rounds: 500 }
)";

TEST_CASE("a neighbour that came back is waited for again once within catchUpLag rounds") {
  const auto c = loadYaml(kConsensusInt8Ring4);
  Run run = makeRun(c);
  for (std::int64_t t = 0; t < 5; ++t) lockstepRound(run, t);
  auto& p0 = *run.peers[0];
  auto& p1 = *run.peers[1];
  REQUIRE(p0.catchUpLag() == 32);
  p0.markDead(3);  // only neighbour 1 counts here
  p0.skipTo(100);
  // Neighbour 1 restarts, its hello saying how far it is (-1: not training yet). Only one more
  // than catchUpLag behind is not waited for; one ahead is waited for, but its messages of our
  // rounds went out before the new connection: they count as lost.
  for (const std::int64_t behind : {-1, 60, 20, -10}) {
    const std::int64_t theirRound = behind == -1 ? -1 : p0.round() - behind;
    INFO("their round " << theirRound << ", ours " << p0.round() + 1);
    REQUIRE(p0.rejoin(1, 0, std::nullopt, false, theirRound));
    REQUIRE(p0.beginRound(p0.round() + 1).isOk());
    CHECK(p0.roundComplete() == (behind == -1 || behind == 60));
    CHECK(p0.onlyLostMessagesMissing() == (behind != 20));
    CHECK(p0.neighboursRound() == theirRound);
    p0.endRound();
  }
  // A message within catchUpLag of our round ends the catching up as the hello does.
  REQUIRE(p0.rejoin(1, 0, std::nullopt, false, -1));
  REQUIRE(p1.rejoin(0, 0, std::nullopt, false, -1));
  p1.markDead(2);
  p1.skipTo(p0.round() - 5);
  REQUIRE(p1.beginRound(p0.round() - 5).isOk());
  REQUIRE(p0.beginRound(p0.round() + 1).isOk());
  CHECK(p0.roundComplete());
  p0.onMessage(1, p1.outgoing(0));
  CHECK(p0.neighboursRound() == p0.round() - 6);
  CHECK_FALSE(p0.roundComplete());
}

TEST_CASE("a peer far behind its neighbours skips to their round and resyncs its edges") {
  const auto c = loadYaml(kConsensusInt8Ring4);
  Run run = makeRun(c);
  for (std::int64_t t = 0; t < 5; ++t) lockstepRound(run, t);
  auto& p1 = *run.peers[1];
  CHECK(p1.neighboursRound() == 4);
  // Its neighbours went on to round 300 without it (it was paused: dead at both, then back).
  for (int j : {0, 2}) {
    run.peers[j]->markDead(1);
    p1.markDead(j);
  }
  for (std::int64_t t = 5; t < 300; ++t) {
    for (int r : {0, 2, 3}) REQUIRE(run.peers[r]->beginRound(t).isOk());
    for (int r : {0, 2, 3}) {
      for (int j : run.peers[r]->sendTo()) run.peers[j]->onMessage(r, run.peers[r]->outgoing(j));
    }
    for (int r : {0, 2, 3}) run.peers[r]->endRound();
  }
  for (int j : {0, 2}) {
    REQUIRE(run.peers[j]->revive(1));
    REQUIRE(p1.revive(j));
  }
  // Their round-300 messages show it how far they are (dropped: beyond kRoundWindow).
  for (int r : {0, 2, 3}) REQUIRE(run.peers[r]->beginRound(300).isOk());
  for (int j : {0, 2}) p1.onMessage(j, run.peers[j]->outgoing(1));
  CHECK(p1.counters().dropped.at("round_window") == 2);
  CHECK(p1.neighboursRound() == 300);
  for (int r : {0, 2, 3}) run.peers[r]->endRound();
  p1.skipTo(301);
  CHECK(p1.counters().roundsSkipped == 296);  // rounds 5..300
  for (std::int64_t t = 301; t < 340; ++t) lockstepRound(run, t);
  for (int j : {0, 2}) {
    CHECK(run.peers[j]->algorithm().replicaHash(1) == p1.algorithm().publicCopyHash());
    CHECK(p1.algorithm().replicaHash(j) == run.peers[j]->algorithm().publicCopyHash());
  }
  CHECK(consensusDistance(models(run)) < 1e-6);
}
