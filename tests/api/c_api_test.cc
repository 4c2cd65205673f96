// The C API (include/grapevine/grapevine.h) against the real library: statuses and messages instead
// of exceptions, outputs untouched on failure, the last error per thread, and two peers (threads
// of this process, one handle each) over tcp going through every call: step, start_step + wait,
// bind + the caller's step + mix, report, poll_events, stats, finalize with averaging.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "grapevine/grapevine.h"
#include "tests/test_util/cli.h"
#include "tests/test_util/ports.h"

namespace fs = std::filesystem;

namespace {

// Two peers on one edge (mixing weight 0.25: they stay apart), D-PSGD, no compression.
std::string twoPeerConfig(int basePort, int rounds) {
  return "run: {name: c-api, seed: 1, rounds: " + std::to_string(rounds) +
         "}\n"
         "peers: {count: 2, host: 127.0.0.1, base_port: " +
         std::to_string(basePort) +
         "}\n"
         "topology: {kind: edges, edges: [[0, 1, 0.25]], weights: explicit}\n"
         "transport: {backend: tcp}\n"
         "algorithm: {name: dsgd}\n"
         "compression: {method: none}\n"
         "optimizer: {lr: 0.1, momentum: 0.0, schedule: constant}\n"
         "workload: {name: external}\n";
}

grapevine_peer* openPeer(const std::string& yaml, int rank, const std::string& outDir,
                         grapevine_status* status) {
  grapevine_options* o = nullptr;
  REQUIRE(grapevine_options_create(&o) == GRAPEVINE_OK);
  REQUIRE(grapevine_options_set_config_text(o, yaml.c_str()) == GRAPEVINE_OK);
  REQUIRE(grapevine_options_set_rank(o, rank) == GRAPEVINE_OK);
  REQUIRE(grapevine_options_set_out_dir(o, outDir.c_str()) == GRAPEVINE_OK);
  grapevine_peer* peer = nullptr;
  *status = grapevine_peer_create(o, &peer);
  grapevine_options_destroy(o);  // the peer keeps what it needs
  return peer;
}

// `text` with its first `from` replaced by `to` (which must be there).
std::string replace(std::string text, const std::string& from, const std::string& to) {
  const auto at = text.find(from);
  REQUIRE(at != std::string::npos);
  return text.replace(at, from.size(), to);
}

bool contains(const std::string& hay, const std::string& needle) {
  return hay.find(needle) != std::string::npos;
}

// What one peer thread saw; checked on the main thread (Catch2 macros are not thread-safe).
struct PeerRun {
  std::vector<std::string> failures;  // "what: status: message" of every unexpected result
  grapevine_status duplicateTensor = GRAPEVINE_OK;
  grapevine_status stepBeforeStart = GRAPEVINE_OK;
  grapevine_status wrongGradientCount = GRAPEVINE_OK;
  std::string wrongGradientMessage;
  int worldSize = 0;
  int64_t planned = 0;
  size_t parameters = 0;
  size_t events = 99;
  grapevine_stats stats{};
  std::vector<float> beforeFinalize, afterFinalize;
};

// Peer `rank`: every call of the API in the order a training loop makes them. Rounds: 2 x step,
// 2 x start_step + wait, then (tensor "b" bound) 2 x the caller's own step + mix, 1 x start_mix +
// wait: 7 in all.
void runPeer(const std::string& yaml, int rank, const std::string& outDir, PeerRun* out) {
  auto expect = [&](grapevine_status s, const char* what) {
    if (s != GRAPEVINE_OK) {
      out->failures.push_back(std::string(what) + ": " + grapevine_status_name(s) + ": " +
                              grapevine_last_error());
    }
    return s == GRAPEVINE_OK;
  };
  grapevine_status created;
  grapevine_peer* peer = openPeer(yaml, rank, outDir, &created);
  if (!expect(created, "peer_create")) return;
  expect(grapevine_peer_world_size(peer, &out->worldSize), "world_size");
  expect(grapevine_peer_planned_rounds(peer, &out->planned), "planned_rounds");

  // Different starting values per rank: start() gives both rank 0's.
  std::vector<float> a(4, 1.0f + rank), b(2, -1.0f - rank);
  expect(grapevine_peer_add_tensor(peer, "a", a.data(), a.size()), "add_tensor a");
  expect(grapevine_peer_add_tensor(peer, "b", b.data(), b.size()), "add_tensor b");
  out->duplicateTensor = grapevine_peer_add_tensor(peer, "a", a.data(), a.size());
  expect(grapevine_peer_parameter_count(peer, &out->parameters), "parameter_count");
  std::vector<float> ga(a.size()), gb(b.size());
  const float* grads[2] = {ga.data(), gb.data()};
  out->stepBeforeStart = grapevine_peer_step(peer, grads, 2, NAN);
  if (!expect(grapevine_peer_start(peer), "start")) {
    grapevine_peer_destroy(peer);
    return;
  }
  out->wrongGradientCount = grapevine_peer_step(peer, grads, 1, NAN);
  out->wrongGradientMessage = grapevine_last_error();

  // f_r(x) = 1/2 ||x - (r + 1)||^2, gradient x - (r + 1).
  const float target = static_cast<float>(rank + 1);
  auto gradients = [&](const float* bValues) {
    double loss = 0;
    for (size_t k = 0; k < a.size(); ++k) loss += 0.5 * std::pow(ga[k] = a[k] - target, 2);
    for (size_t k = 0; k < b.size(); ++k) loss += 0.5 * std::pow(gb[k] = bValues[k] - target, 2);
    return loss;
  };
  for (int t = 0; t < 2; ++t)
    expect(grapevine_peer_step(peer, grads, 2, gradients(b.data())), "step");
  for (int t = 0; t < 2; ++t) {
    expect(grapevine_peer_start_step(peer, grads, 2, gradients(b.data())), "start_step");
    expect(grapevine_peer_wait(peer), "wait");
  }
  float* bound = nullptr;
  expect(grapevine_peer_bind(peer, "b", &bound), "bind");
  if (bound == nullptr) return;
  for (int t = 0; t < 3; ++t) {
    const double loss = gradients(bound);
    for (size_t k = 0; k < a.size(); ++k) a[k] -= 0.1f * ga[k];  // the caller's own SGD
    for (size_t k = 0; k < b.size(); ++k) bound[k] -= 0.1f * gb[k];
    if (t < 2) {
      expect(grapevine_peer_mix(peer, loss), "mix");
    } else {
      expect(grapevine_peer_start_mix(peer, loss), "start_mix");
      expect(grapevine_peer_wait(peer), "wait");
    }
  }
  const char* names[1] = {"c_api_metric"};
  const double values[1] = {0.5 + rank};
  expect(grapevine_peer_report(peer, names, values, 1), "report");
  grapevine_event events[4];
  expect(grapevine_peer_poll_events(peer, events, 4, &out->events), "poll_events");
  expect(grapevine_peer_stats(peer, &out->stats), "stats");

  auto model = [&] {
    std::vector<float> m(a);
    m.insert(m.end(), bound, bound + b.size());
    return m;
  };
  out->beforeFinalize = model();
  expect(grapevine_peer_finalize(peer, 1), "finalize");
  out->afterFinalize = model();
  expect(grapevine_peer_finalize(peer, 1), "finalize again (idempotent)");
  grapevine_peer_destroy(peer);
}

}  // namespace

TEST_CASE("C API: status values, names and the version") {
  CHECK(GRAPEVINE_OK == 0);
  CHECK(std::string(grapevine_status_name(GRAPEVINE_OK)) == "ok");
  CHECK(std::string(grapevine_status_name(GRAPEVINE_INVALID_ARGUMENT)) == "invalid argument");
  CHECK(std::string(grapevine_status_name(GRAPEVINE_INTERNAL)) == "internal");
  CHECK(std::string(grapevine_status_name(static_cast<grapevine_status>(42))) == "unknown");
  CHECK(grapevine_api_version() == GRAPEVINE_C_API_VERSION);
}

TEST_CASE("C API: NULL arguments and bad configs give a status and a message, nothing thrown") {
  CHECK(grapevine_options_create(nullptr) == GRAPEVINE_INVALID_ARGUMENT);
  CHECK(contains(grapevine_last_error(), "grapevine_options_create: out is NULL"));
  CHECK(grapevine_options_set_rank(nullptr, 0) == GRAPEVINE_INVALID_ARGUMENT);
  CHECK(grapevine_peer_start(nullptr) == GRAPEVINE_INVALID_ARGUMENT);
  CHECK(contains(grapevine_last_error(), "peer is NULL"));
  grapevine_options_destroy(nullptr);  // no-ops
  grapevine_peer_destroy(nullptr);

  const std::string out = grapevine::test_util::freshDir("c_api_test/bad");
  const std::string good = twoPeerConfig(grapevine::test_util::freeBasePort(2), 3);
  struct Bad {
    std::string what, yaml, message;
    int rank;
  };
  const std::vector<Bad> bad = {
      {"an unknown key", replace(good, "lr: 0.1", "lrr: 0.1"), "lrr", 0},
      {"not the external workload", replace(good, "name: external", "name: consensus"), "external",
       0},
      {"a rank out of range", good, "rank", 2},
      {"not YAML", "run: [", "", 0},
  };
  for (const Bad& b : bad) {
    INFO(b.what);
    grapevine_status status;
    grapevine_peer* peer = openPeer(b.yaml, b.rank, out, &status);
    CHECK(status == GRAPEVINE_INVALID_ARGUMENT);
    CHECK(peer == nullptr);  // untouched
    INFO(grapevine_last_error());
    CHECK(std::string(grapevine_last_error()) != "");
    CHECK(contains(grapevine_last_error(), b.message));
  }
}

TEST_CASE("C API: two peers (threads) through every call; finalize averages") {
  const std::string out = grapevine::test_util::freshDir("c_api_test/two");
  const std::string yaml = twoPeerConfig(grapevine::test_util::freeBasePort(2), 7);
  // This thread's last error, which the peers' threads must not change.
  CHECK(grapevine_peer_start(nullptr) == GRAPEVINE_INVALID_ARGUMENT);
  const std::string mine = grapevine_last_error();

  PeerRun runs[2];
  std::thread t0(runPeer, yaml, 0, out, &runs[0]), t1(runPeer, yaml, 1, out, &runs[1]);
  t0.join();
  t1.join();
  CHECK(grapevine_last_error() == mine);

  for (int r = 0; r < 2; ++r) {
    const PeerRun& run = runs[r];
    INFO("rank " << r);
    for (const auto& f : run.failures) FAIL_CHECK(f);
    CHECK(run.worldSize == 2);
    CHECK(run.planned == 7);
    CHECK(run.parameters == 6);
    CHECK(run.duplicateTensor == GRAPEVINE_INVALID_ARGUMENT);
    CHECK(run.stepBeforeStart == GRAPEVINE_FAILED_PRECONDITION);
    CHECK(run.wrongGradientCount == GRAPEVINE_INVALID_ARGUMENT);
    CHECK(run.wrongGradientMessage != "");
    CHECK(run.events == 0);  // no faults
    CHECK(run.stats.rounds == 7);
    CHECK(run.stats.bytes_sent > 0);
    CHECK(run.stats.bytes_received > 0);
    CHECK(run.stats.neighbours == 1);
    CHECK(run.stats.live_neighbours == 1);
    CHECK(fs::is_regular_file(out + "/peer-" + std::to_string(r) + ".final.json"));
  }
  REQUIRE(runs[0].beforeFinalize.size() == 6);
  REQUIRE(runs[1].beforeFinalize.size() == 6);
  REQUIRE(runs[0].afterFinalize.size() == 6);
  REQUIRE(runs[1].afterFinalize.size() == 6);
  CHECK(runs[0].beforeFinalize != runs[1].beforeFinalize);
  CHECK(runs[0].afterFinalize == runs[1].afterFinalize);
  for (size_t k = 0; k < 6; ++k) {
    INFO("parameter " << k);
    const double mean = (runs[0].beforeFinalize[k] + runs[1].beforeFinalize[k]) / 2.0;
    CHECK(runs[0].afterFinalize[k] == Approx(mean).epsilon(1e-6).margin(1e-6));
  }
}
