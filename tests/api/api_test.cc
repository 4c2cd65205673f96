// grapevine::Peer through the shared library only (no internal headers): each peer runs on its own
// thread over tcp on 127.0.0.1, exactly as separate processes would drive it.
#include <barrier>
#include <catch2/catch.hpp>
#include <cerrno>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <grapevine/grapevine.hpp>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "tests/test_util/ports.h"
#include "tests/test_util/prometheus.h"

namespace {

std::string freshDir(const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() / ("grapevine-api-" + name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

std::string ringConfig(int peers, int rounds, int port, const std::string& algorithm,
                       const std::string& extra = "") {
  return "peers:\n  count: " + std::to_string(peers) + "\n  base_port: " + std::to_string(port) +
         "\ntopology:\n  kind: ring\nworkload:\n  name: external\nalgorithm:\n  name: " +
         algorithm + "\nrun:\n  rounds: " + std::to_string(rounds) +
         "\n  log_level: warn\ntransport:\n  backend: tcp\n" + extra;
}

// Runs body(rank) for every rank on its own thread; rethrows the first failure.
void runPeers(int peers, const std::function<void(int)>& body) {
  std::vector<std::thread> threads;
  std::vector<std::exception_ptr> errors(peers);
  for (int r = 0; r < peers; ++r) {
    threads.emplace_back([&, r] {
      try {
        body(r);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

// Peer r minimises 1/2 |x - c_r|^2 over two tensors; c_r differs per peer.
float target(int rank, std::size_t k) { return static_cast<float>(rank) + 0.1f * k; }

}  // namespace

TEST_CASE("step() trains and finalize(average) leaves every peer with the same average model") {
  const int peers = 4;
  const std::string out = freshDir("step");
  const std::string cfg =
      ringConfig(peers, 60, 32100, "dsgd",
                 "optimizer:\n  lr: 0.1\n  momentum: 0\n  weight_decay: 0\n  schedule: constant\n");
  std::vector<std::vector<float>> finals(peers), starts(peers);
  std::vector<grapevine::Stats> stats(peers);
  runPeers(peers, [&](int r) {
    grapevine::Options o;
    o.configText = cfg;
    o.rank = r;
    o.outDir = out;
    grapevine::Peer peer(o);
    std::vector<float> a(3), b(5), ga(3), gb(5);
    // Different initial values: start() makes every peer adopt rank 0's.
    for (std::size_t k = 0; k < a.size(); ++k) a[k] = static_cast<float>(r * 10 + k);
    for (std::size_t k = 0; k < b.size(); ++k) b[k] = -static_cast<float>(r);
    peer.addTensor("a", a.data(), a.size());
    peer.addTensor("b", b.data(), b.size());
    peer.start();
    starts[r] = {a[1], b[0]};
    for (std::int64_t t = 0; t < peer.plannedRounds(); ++t) {
      double loss = 0;
      for (std::size_t k = 0; k < a.size(); ++k) {
        ga[k] = a[k] - target(r, k);
        loss += 0.5 * ga[k] * ga[k];
      }
      for (std::size_t k = 0; k < b.size(); ++k) {
        gb[k] = b[k] - target(r, k + 3);
        loss += 0.5 * gb[k] * gb[k];
      }
      peer.step({ga.data(), gb.data()}, loss);
    }
    peer.report({{"test_accuracy", 0.5 + 0.1 * r}});
    stats[r] = peer.stats();
    peer.finalize(true);
    finals[r] = a;
    finals[r].insert(finals[r].end(), b.begin(), b.end());
  });
  // (Catch2 assertions only on this thread: it is not thread-safe.) Every peer started from rank
  // 0's values.
  for (int r = 0; r < peers; ++r) {
    CHECK(starts[r] == std::vector<float>{1.0f, 0.0f});
    CHECK(stats[r].rounds == 60);
    CHECK(stats[r].bytesSent > 0);
    CHECK(stats[r].liveNeighbours == 2);
  }
  // Identical everywhere, and (the average of the c_r being the optimum of the sum) near it.
  for (int r = 1; r < peers; ++r) CHECK(finals[r] == finals[0]);
  for (std::size_t k = 0; k < finals[0].size(); ++k) {
    double mean = 0;
    for (int r = 0; r < peers; ++r) mean += target(r, k);
    CHECK(std::abs(finals[0][k] - mean / peers) < 0.05);
  }
  for (int r = 0; r < peers; ++r) {
    const auto dir = std::filesystem::path(out);
    REQUIRE(std::filesystem::exists(dir / ("peer-" + std::to_string(r) + ".jsonl")));
    std::ifstream f(dir / ("peer-" + std::to_string(r) + ".final.json"));
    const auto j = nlohmann::json::parse(f);
    CHECK(j["rounds"] == 60);
    CHECK(j["averaged"] == true);
    CHECK(j["test_accuracy"].get<double>() == Approx(0.5 + 0.1 * r));
  }
}

TEST_CASE("finalize averaging is the exact average of the peers' models") {
  const int peers = 5;
  const std::string out = freshDir("average");
  // One round on equal values (the start-up sync made them so), then each peer changes its values
  // (bind: in place) and finalize averages them.
  const std::string cfg = ringConfig(peers, 1, 32200, "choco", "compression:\n  method: sign\n");
  std::vector<std::vector<float>> finals(peers);
  runPeers(peers, [&](int r) {
    grapevine::Options o;
    o.configText = cfg;
    o.rank = r;
    o.outDir = out;
    grapevine::Peer peer(o);
    std::vector<float> x(1000);
    peer.addTensor("x", x.data(), x.size());
    peer.start();
    peer.mix();  // the run's one round (the values are all equal: it leaves them so)
    float* v = peer.bind("x");
    for (std::size_t k = 0; k < x.size(); ++k) v[k] = static_cast<float>(r * 1000 + k);
    peer.finalize(true);
    finals[r].assign(v, v + x.size());
  });
  for (int r = 1; r < peers; ++r) CHECK(finals[r] == finals[0]);
  for (std::size_t k = 0; k < 1000; k += 97) {
    const double mean = 2000.0 + k;  // (0 + 1000 + ... + 4000) / 5 + k
    CHECK(std::abs(finals[0][k] - mean) <= 1e-6 * mean);
  }
}

TEST_CASE("mix() with the caller's optimizer matches step() with plain SGD") {
  const int peers = 3;
  const std::string cfg = ringConfig(
      peers, 20, 32300, "dsgd",
      "optimizer:\n  lr: 0.05\n  momentum: 0\n  weight_decay: 0\n  schedule: constant\n");
  std::vector<std::vector<float>> viaStep(peers), viaMix(peers);
  for (const bool own : {true, false}) {
    const std::string out = freshDir(own ? "mix-step" : "mix-mix");
    runPeers(peers, [&](int r) {
      grapevine::Options o;
      o.configText = cfg;
      o.rank = r;
      o.outDir = out;
      o.overrides = {"peers.base_port=" + std::to_string(own ? 32300 : 32350)};
      grapevine::Peer peer(o);
      std::vector<float> x(4, 1.0f), g(4);
      peer.addTensor("x", x.data(), x.size());
      peer.start();
      for (int t = 0; t < 20; ++t) {
        for (std::size_t k = 0; k < x.size(); ++k) g[k] = x[k] - target(r, k);
        if (own) {
          peer.step({g.data()});
        } else {
          for (std::size_t k = 0; k < x.size(); ++k) x[k] -= 0.05f * g[k];
          peer.mix();
        }
      }
      peer.finalize(false);
      (own ? viaStep : viaMix)[r] = x;
    });
  }
  for (int r = 0; r < peers; ++r) CHECK(viaStep[r] == viaMix[r]);
}

TEST_CASE("bad input is refused with clear errors") {
  using Code = grapevine::Error::Code;
  grapevine::Options o;
  o.configText = ringConfig(2, 5, 32400, "dsgd");
  o.rank = 2;
  try {
    grapevine::Peer p(o);
    FAIL("rank out of range accepted");
  } catch (const grapevine::Error& e) {
    CHECK(e.code() == Code::kInvalidArgument);
    CHECK(std::string(e.what()).find("out of range") != std::string::npos);
  }
  o.rank = 0;
  o.configText = "peers:\n  count: 2\nworkload:\n  name: fashion-mnist-mlp\n";
  try {
    grapevine::Peer p(o);
    FAIL("a built-in workload accepted");
  } catch (const grapevine::Error& e) {
    CHECK(std::string(e.what()).find("workload.name: external") != std::string::npos);
  }
  o.configText = "peers:\n  count: 2\nworkload:\n  name: external\nalgorithm:\n  nme: dsgd\n";
  try {
    grapevine::Peer p(o);
    FAIL("an unknown key accepted");
  } catch (const grapevine::Error& e) {
    CHECK(e.code() == Code::kInvalidArgument);
    CHECK(std::string(e.what()).find("nme") != std::string::npos);
  }
  o.configText = ringConfig(2, 5, 32400, "dsgd");
  grapevine::Peer p(o);
  std::vector<float> x(3);
  p.addTensor("x", x.data(), x.size());
  CHECK_THROWS_AS(p.addTensor("x", x.data(), x.size()), grapevine::Error);
  CHECK_THROWS_AS(p.step({x.data()}), grapevine::Error);  // before start()
  CHECK_THROWS_AS(p.wait(), grapevine::Error);
}

TEST_CASE("state() and loadState() round-trip Grapevine's buffers") {
  const int peers = 3;
  const std::string out = freshDir("state");
  const std::string cfg = ringConfig(peers, 5, 32500, "choco",
                                     "optimizer:\n  momentum: 0.9\ncompression:\n  method: sign\n");
  using State = std::vector<std::pair<std::string, std::vector<float>>>;
  std::vector<State> states(peers), reloaded(peers);
  std::vector<int> refused(peers, 0);
  std::barrier sync(peers);  // every peer is still live while the others read their state
  runPeers(peers, [&](int r) {
    grapevine::Options o;
    o.configText = cfg;
    o.rank = r;
    o.outDir = out;
    grapevine::Peer peer(o);
    std::vector<float> x(10, 1.0f), g(10);
    peer.addTensor("x", x.data(), x.size());
    peer.start();
    for (int t = 0; t < 5; ++t) {
      for (std::size_t k = 0; k < x.size(); ++k) g[k] = x[k] - target(r, k);
      peer.step({g.data()});
    }
    states[r] = peer.state();
    peer.loadState(states[r]);
    reloaded[r] = peer.state();
    auto bad = states[r];
    if (bad.size() > 1) {
      bad[1].second.pop_back();
      try {
        peer.loadState(bad);
      } catch (const grapevine::Error&) {
        ++refused[r];
      }
      bad = states[r];
      bad[1].first = "public copy";
      try {
        peer.loadState(bad);
      } catch (const grapevine::Error&) {
        ++refused[r];
      }
    }
    sync.arrive_and_wait();
    peer.finalize(false);
  });
  for (int r = 0; r < peers; ++r) {
    const State& s = states[r];
    REQUIRE(s.size() == 4);  // momentum, public_copy, replica/<j> for the 2 neighbours
    CHECK(s[0].first == "momentum");
    CHECK(s[1].first == "public_copy");
    CHECK(s[2].first == "replica/" + std::to_string((r + 1) % peers < (r + 2) % peers
                                                        ? (r + 1) % peers
                                                        : (r + 2) % peers));
    CHECK(s[0].second.size() == 10);
    double m = 0;  // a nonzero momentum buffer after 5 steps away from the target
    for (float v : s[0].second) m += std::abs(v);
    CHECK(m > 0);
    CHECK(reloaded[r] == s);
    CHECK(refused[r] == 2);
  }
}

TEST_CASE(
    "monitoring.prometheus_port: API peers serve /metrics while they run, not after "
    "finalize()") {
  const int peers = 2;
  const int base = grapevine::test_util::freeBasePort(3 * peers);
  const int metricsPort = base + 2 * peers;  // past the 2 x peers ports the peers reserve
  const std::string out = freshDir("metrics");
  const std::string cfg = ringConfig(peers, 20, base, "dsgd",
                                     "output:\n  log_every: 1\nmonitoring:\n  prometheus_port: " +
                                         std::to_string(metricsPort) + "\n");
  // The peers stop twice for this thread, which scrapes them: after 10 rounds, and after
  // finalize() (with the Peer objects, and so the process's other state, still alive). Each stop
  // is two barrier phases: all arrived, then this thread is done with them.
  std::barrier sync(peers + 1);
  auto hold = [&sync] {
    sync.arrive_and_wait();
    sync.arrive_and_wait();
  };
  std::vector<std::thread> threads;
  std::vector<std::exception_ptr> errors(peers);
  for (int r = 0; r < peers; ++r) {
    threads.emplace_back([&, r] {
      int held = 0;  // stops this thread has passed
      try {
        grapevine::Options o;
        o.configText = cfg;
        o.rank = r;
        o.outDir = out;
        grapevine::Peer peer(o);
        std::vector<float> a(3, 0.0f), ga(3);
        peer.addTensor("a", a.data(), a.size());
        peer.start();
        for (std::int64_t t = 0; t < peer.plannedRounds(); ++t) {
          for (std::size_t k = 0; k < a.size(); ++k) ga[k] = a[k] - target(r, k);
          if (t == 9) peer.report({{"test_accuracy", 0.5 + 0.1 * r}});
          peer.step({ga.data()}, 1.0 + r);
          if (t == 9) {
            hold();  // scraped now: 10 rounds done
            ++held;
          }
        }
        peer.finalize(false);
        hold();  // connected to now: finalized
        ++held;
      } catch (...) {
        errors[r] = std::current_exception();
      }
      // A failed peer still lets the scraping thread through the phases it did not reach.
      for (; held < 2; ++held) hold();
    });
  }
  // No assertions while the peers wait at the barrier (a failure would leave them waiting):
  // collect, check after the join.
  std::vector<std::optional<std::string>> during(peers);
  std::vector<int> afterFd(peers, -1), afterErrno(peers, 0);
  sync.arrive_and_wait();  // every peer has run 10 rounds
  for (int r = 0; r < peers; ++r) {
    try {
      during[r] = grapevine::test_util::httpGet(metricsPort + r);
    } catch (...) {  // a failed REQUIRE inside: already reported
    }
  }
  sync.arrive_and_wait();  // let them go on
  sync.arrive_and_wait();  // every peer has finalized
  for (int r = 0; r < peers; ++r) {
    afterFd[r] = grapevine::test_util::connectTo(metricsPort + r);
    afterErrno[r] = errno;
    if (afterFd[r] >= 0) close(afterFd[r]);
  }
  sync.arrive_and_wait();
  for (auto& t : threads) t.join();
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
  for (int r = 0; r < peers; ++r) {
    INFO("rank " << r);
    REQUIRE(during[r]);
    const auto s = grapevine::test_util::parse(*during[r]);
    // step() returns after the round's update: exactly 10 rounds, and the caller's metrics.
    CHECK(s.value("grapevine_rounds_total", {{"rank", std::to_string(r)}}) == 10);
    CHECK(s.value("grapevine_loss") == Approx(1.0 + r));
    CHECK(s.value("grapevine_test_accuracy") == Approx(0.5 + 0.1 * r));
    CHECK(s.value("grapevine_sent_bytes_total", {{"neighbour", std::to_string(1 - r)}}) > 0);
    CHECK(s.types.at("grapevine_info") == "gauge");
    CHECK(s.find("grapevine_info", {{"algorithm", "dsgd"}}).size() == 1);
    // finalize() took the endpoint down.
    CHECK(afterFd[r] < 0);
    CHECK(afterErrno[r] == ECONNREFUSED);
  }
}
