// monitoring.prometheus_port end to end: `grapevine launch` of 4 real peer processes over tcp, each
// scraped over plain HTTP (a socket GET, as Prometheus does) while it trains. Checks the text
// format's names and types, counters that only grow, the values against the records the peers
// write, and that the endpoints are gone after the run. Slow (a few seconds of training).
#include "tests/test_util/prometheus.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "runtime/common/subprocess.h"
#include "tests/test_util/cli.h"
#include "tests/test_util/ports.h"

namespace {

using Clock = std::chrono::steady_clock;
using grapevine::test_util::connectTo;
using grapevine::test_util::httpGet;
using grapevine::test_util::parse;
using grapevine::test_util::Scrape;
constexpr int kPeers = 4;

// Scrapes `port` until its rounds counter reaches `rounds` (the peer's progress, not a time),
// failing after a generous deadline.
Scrape scrapeUntil(int port, double rounds) {
  const auto deadline = Clock::now() + std::chrono::seconds(180);
  std::string last = "(no answer)";
  while (Clock::now() < deadline) {
    if (auto body = httpGet(port)) {
      last = *body;
      Scrape s = parse(*body);
      const auto r = s.find("grapevine_rounds_total");
      if (r.size() == 1 && r.front()->value >= rounds) return s;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  INFO("port " << port << ", last answer:\n" << last);
  FAIL("the rounds counter did not reach " << rounds);
  return {};
}

std::vector<nlohmann::json> readRecords(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) out.push_back(nlohmann::json::parse(line));
  return out;
}

bool near(double a, double b) { return std::abs(a - b) <= 1e-9 * std::max(1.0, std::abs(b)); }

// Stops the launcher (and through it every peer) on every path out of the test: SIGINT, which it
// forwards (peers still running 5 s later are killed), then SIGKILL as the last resort.
struct StopLauncher {
  grapevine::Subprocess& launcher;
  ~StopLauncher() {
    if (!launcher.running()) return;
    launcher.signal(SIGINT);
    if (!launcher.waitUntil(Clock::now() + std::chrono::seconds(30)).isOk()) launcher.kill();
  }
};

}  // namespace

TEST_CASE(
    "every peer serves /metrics while it trains; the values match its records; the "
    "endpoint goes away after the run",
    "[slow]") {
  const std::string out = grapevine::test_util::freshDir("prometheus_test");
  // Peers reserve base .. base + 2n - 1 (the config check); the metrics ports follow.
  const int base = grapevine::test_util::freeBasePort(3 * kPeers);
  const int metricsPort = base + 2 * kPeers;
  const std::string config = out + "/ring4.yaml";
  {
    std::ofstream f(config);
    f << "run: { name: prom4, seed: 3, rounds: 20000 }\n"
         "peers: { count: 4, host: 127.0.0.1, base_port: "
      << base
      << " }\n"
         "topology: { kind: ring }\n"
         "transport: { backend: tcp }\n"
         "algorithm: { name: choco }\n"
         "optimizer: { lr: 0.05, batch_size: 32 }\n"
         "compression: { method: top-k, ratio: 0.1 }\n"
         "workload: { name: fashion-mnist-mlp, hidden: [16], eval_every: 10, eval_samples: 200 }\n"
         "output: { dir: "
      << out << "/run, log_every: 1 }\n"
      << "monitoring: { prometheus_port: " << metricsPort << " }\n";
  }
  const std::string runDir = out + "/run";
  grapevine::SpawnOptions spawn;
  spawn.argv = {grapevine::test_util::grapevineBin(), "launch", config, "--quiet"};
  spawn.out = grapevine::ChildStream::file(out + "/launch.log");
  spawn.err = grapevine::ChildStream::sameAsStdout();
  spawn.newProcessGroup = true;
  auto launcher = grapevine::Subprocess::spawn(spawn);
  REQUIRE(launcher.isOk());
  StopLauncher stop{*launcher};

  const std::map<std::string, std::string> kTypes = {
      {"grapevine_info", "gauge"},
      {"grapevine_rounds_total", "counter"},
      {"grapevine_phase_seconds_total", "counter"},
      {"grapevine_last_round_phase_seconds", "gauge"},
      {"grapevine_loss", "gauge"},
      {"grapevine_learning_rate", "gauge"},
      {"grapevine_test_accuracy", "gauge"},
      {"grapevine_test_loss", "gauge"},
      {"grapevine_consensus_step", "gauge"},
      {"grapevine_local_consensus_distance", "gauge"},
      {"grapevine_public_lag", "gauge"},
      {"grapevine_live_degree", "gauge"},
      {"grapevine_compression_ratio", "gauge"},
      {"grapevine_dense_equivalent_bytes_total", "counter"},
      {"grapevine_sent_bytes_total", "counter"},
      {"grapevine_received_bytes_total", "counter"},
      {"grapevine_neighbour_suspect_rounds_total", "counter"},
      {"grapevine_neighbour_deaths_total", "counter"},
      {"grapevine_neighbour_rejoins_total", "counter"},
  };
  // Counters that must never go down between two scrapes of one peer.
  const std::vector<std::string> kMonotone = {
      "grapevine_rounds_total", "grapevine_phase_seconds_total", "grapevine_sent_bytes_total",
      "grapevine_received_bytes_total", "grapevine_dense_equivalent_bytes_total"};

  std::vector<Scrape> last(kPeers);
  for (int r = 0; r < kPeers; ++r) {
    INFO("rank " << r);
    const std::string rank = std::to_string(r);
    const std::set<std::string> neighbours = {std::to_string((r + 1) % kPeers),
                                              std::to_string((r + kPeers - 1) % kPeers)};
    // Past round 20 there was an evaluation (eval_every 10) and CHOCO reported its step.
    const Scrape first = scrapeUntil(metricsPort + r, 20);
    if (r == 0) {
      // Issue 41: 100 idle connections (which never send a request) made every scrape time out;
      // the endpoint holds 8 and the newest pushes out the oldest, so a scrape is answered.
      std::vector<int> idle;
      for (int k = 0; k < 100; ++k) {
        const int fd = grapevine::test_util::connectTo(metricsPort);
        if (fd >= 0) idle.push_back(fd);
      }
      CHECK(idle.size() == 100);
      const auto answered = grapevine::test_util::httpGet(metricsPort);
      CHECK(answered.has_value());
      for (int fd : idle) close(fd);
    }
    for (const auto& [name, type] : kTypes) {
      INFO(name);
      CHECK(first.types.count(name) == 1);
      if (first.types.count(name)) CHECK(first.types.at(name) == type);
      CHECK_FALSE(first.find(name, {{"rank", rank}}).empty());
    }
    // Every grapevine_ sample is labelled with this peer's rank.
    for (const auto& s : first.samples) {
      if (s.name.rfind("grapevine_", 0) != 0) continue;
      INFO(s.name);
      REQUIRE(s.labels.count("rank") == 1);
      CHECK(s.labels.at("rank") == rank);
    }
    const auto info = first.find("grapevine_info");
    REQUIRE(info.size() == 1);
    CHECK(info.front()->value == 1);
    CHECK(info.front()->labels.at("algorithm") == "choco");
    CHECK(info.front()->labels.at("compression") == "top-k");
    // No build id unless monitoring.prometheus_build_info: the endpoint has no key.
    CHECK(info.front()->labels.count("version") == 0);
    // Per-neighbour series: exactly the ring neighbours.
    for (const char* name : {"grapevine_sent_bytes_total", "grapevine_received_bytes_total",
                             "grapevine_neighbour_deaths_total"}) {
      std::set<std::string> labelled;
      for (const auto* s : first.find(name)) labelled.insert(s->labels.at("neighbour"));
      INFO(name);
      CHECK(labelled == neighbours);
    }
    for (const char* phase : {"step", "wait", "mix", "eval"}) {
      CHECK(first.find("grapevine_phase_seconds_total", {{"phase", phase}}).size() == 1);
    }
    CHECK(first.value("grapevine_live_degree") == 2);
    CHECK(first.value("grapevine_compression_ratio") > 1.0);  // top-10% sends far less than dense
    CHECK(first.value("grapevine_neighbour_rejoins_total", {{"neighbour", *neighbours.begin()}}) ==
          0);

    // A later scrape, after more rounds: counters only grow, and rounds and bytes did grow.
    const double firstRounds = first.value("grapevine_rounds_total");
    const Scrape second = scrapeUntil(metricsPort + r, firstRounds + 10);
    for (const auto& name : kMonotone) {
      for (const auto* s : first.find(name)) {
        INFO(name);
        const double now = second.value(name, s->labels);
        CHECK(now >= s->value);
      }
    }
    CHECK(second.value("grapevine_rounds_total") >= firstRounds + 10);
    CHECK(second.sum("grapevine_sent_bytes_total") > first.sum("grapevine_sent_bytes_total"));
    CHECK(second.sum("grapevine_received_bytes_total") >
          first.sum("grapevine_received_bytes_total"));
    last[r] = second;
  }

  // Stop the run (SIGINT: every peer finishes its round, writes its records and exits).
  launcher->signal(SIGINT);
  auto status = launcher->waitUntil(Clock::now() + std::chrono::seconds(120));
  REQUIRE(status.isOk());
  REQUIRE(WIFEXITED(*status));

  for (int r = 0; r < kPeers; ++r) {
    INFO("rank " << r);
    const Scrape& s = last[r];
    const auto records = readRecords(runDir + "/peer-" + std::to_string(r) + ".jsonl");
    // A scrape shows the state right after a round: with a record every round (log_every 1) the
    // record of that round, round index rounds - 1, holds the same counters, written from the same
    // PeerCore state with nothing in between.
    const auto rounds = static_cast<long long>(s.value("grapevine_rounds_total"));
    const nlohmann::json* match = nullptr;
    const nlohmann::json* evaluated = nullptr;  // the latest evaluation up to that round
    for (const auto& rec : records) {
      if (rec.value("final", false)) continue;
      if (rec["round"].get<long long>() > rounds - 1) break;
      if (rec.contains("test_accuracy")) evaluated = &rec;
      if (rec["round"].get<long long>() == rounds - 1) match = &rec;
    }
    REQUIRE(match);
    INFO("record " << match->dump());
    CHECK(s.sum("grapevine_sent_bytes_total") == (*match)["bytes_sent"].get<double>());
    CHECK(s.sum("grapevine_received_bytes_total") == (*match)["bytes_received"].get<double>());
    CHECK(s.value("grapevine_dense_equivalent_bytes_total") ==
          (*match)["bytes_dense_equivalent"].get<double>());
    CHECK(s.value("grapevine_live_degree") == (*match)["live_degree"].get<double>());
    CHECK(near(s.value("grapevine_loss"), (*match)["loss"].get<double>()));
    CHECK(near(s.value("grapevine_learning_rate"), (*match)["lr"].get<double>()));
    CHECK(near(s.value("grapevine_consensus_step"), (*match)["consensus_step"].get<double>()));
    // CHOCO reports both every round (its step report): a record without them is a failure, not
    // a reason to check less.
    REQUIRE(match->contains("local_consensus_distance"));
    REQUIRE(match->contains("public_lag"));
    CHECK(near(s.value("grapevine_local_consensus_distance"),
               (*match)["local_consensus_distance"].get<double>()));
    CHECK(near(s.value("grapevine_public_lag"), (*match)["public_lag"].get<double>()));
    for (const auto& [phase, key] : std::map<std::string, std::string>{{"step", "step_seconds"},
                                                                       {"wait", "wait_seconds"},
                                                                       {"mix", "mix_seconds"},
                                                                       {"eval", "eval_seconds"}}) {
      INFO(phase);
      CHECK(near(s.value("grapevine_phase_seconds_total", {{"phase", phase}}),
                 (*match)[key].get<double>()));
    }
    for (const auto& [reason, n] : (*match)["dropped"].items()) {
      CHECK(s.value("grapevine_dropped_frames_total", {{"reason", reason}}) == n.get<double>());
    }
    REQUIRE(evaluated);
    CHECK(near(s.value("grapevine_test_accuracy"), (*evaluated)["test_accuracy"].get<double>()));
    CHECK(near(s.value("grapevine_test_loss"), (*evaluated)["test_loss"].get<double>()));

    // The run went on after the scrape: the final counts are at least the scraped ones.
    std::ifstream fin(runDir + "/peer-" + std::to_string(r) + ".final.json");
    REQUIRE(fin);
    const auto fj = nlohmann::json::parse(fin);
    CHECK(fj["rounds"].get<long long>() >= rounds);
    CHECK(fj["bytes_sent"].get<double>() >= s.sum("grapevine_sent_bytes_total"));
    CHECK(fj["bytes_received"].get<double>() >= s.sum("grapevine_received_bytes_total"));

    // The peer has exited: its endpoint refuses connections.
    const int fd = connectTo(metricsPort + r);
    const int err = errno;
    if (fd >= 0) close(fd);
    CHECK(fd < 0);
    CHECK(err == ECONNREFUSED);
  }
}
