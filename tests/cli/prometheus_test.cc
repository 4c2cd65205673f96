// monitoring.prometheus_port end to end: `grapevine launch` of 4 real peer processes over tcp, each
// scraped over plain HTTP (a socket GET, as Prometheus does) while it trains. Checks the text
// format's names and types, counters that only grow, the values against the records the peers
// write, and that the endpoints are gone after the run. Slow (a few seconds of training).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "runtime/common/subprocess.h"
#include "tests/test_util/cli.h"
#include "tests/test_util/ports.h"

namespace {

using Clock = std::chrono::steady_clock;
constexpr int kPeers = 4;

// One sample line: name{labels} value.
struct Sample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0.0;
};

// One parsed /metrics answer.
struct Scrape {
  std::map<std::string, std::string> types;  // # TYPE name type
  std::vector<Sample> samples;

  // The samples of `name` whose labels include `match`.
  std::vector<const Sample*> find(const std::string& name,
                                  const std::map<std::string, std::string>& match = {}) const {
    std::vector<const Sample*> out;
    for (const auto& s : samples) {
      if (s.name != name) continue;
      bool all = true;
      for (const auto& [k, v] : match) {
        auto it = s.labels.find(k);
        if (it == s.labels.end() || it->second != v) all = false;
      }
      if (all) out.push_back(&s);
    }
    return out;
  }
  // The one sample of `name` matching `match` (fails the test when there is not exactly one).
  double value(const std::string& name,
               const std::map<std::string, std::string>& match = {}) const {
    const auto found = find(name, match);
    INFO(name);
    REQUIRE(found.size() == 1);
    return found.front()->value;
  }
  double sum(const std::string& name) const {
    double total = 0;
    for (const auto* s : find(name)) total += s->value;
    return total;
  }
};

// Parses the Prometheus text format (version 0.0.4) as prometheus-cpp writes it: no timestamps,
// label values without escapes beyond \" \\ \n.
Scrape parse(const std::string& body) {
  Scrape out;
  std::istringstream in(body);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    if (line.rfind("# TYPE ", 0) == 0) {
      std::istringstream t(line.substr(7));
      std::string name, type;
      t >> name >> type;
      out.types[name] = type;
      continue;
    }
    if (line[0] == '#') continue;
    Sample s;
    std::size_t i = line.find_first_of("{ ");
    REQUIRE(i != std::string::npos);
    s.name = line.substr(0, i);
    if (line[i] == '{') {
      ++i;
      while (line[i] != '}') {
        const std::size_t eq = line.find('=', i);
        REQUIRE(eq != std::string::npos);
        REQUIRE(line[eq + 1] == '"');
        const std::string key = line.substr(i, eq - i);
        std::string value;
        std::size_t k = eq + 2;
        for (; line[k] != '"'; ++k) {
          if (line[k] == '\\') ++k;
          value += line[k];
        }
        s.labels[key] = value;
        i = k + 1;
        if (line[i] == ',') ++i;
      }
      ++i;
    }
    s.value = std::strtod(line.c_str() + i, nullptr);
    out.samples.push_back(std::move(s));
  }
  return out;
}

// Connects to 127.0.0.1:port; the socket, or -1 with errno set.
int connectTo(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  timeval tv{10, 0};  // a guard against a hung server, not a measurement
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    const int e = errno;
    close(fd);
    errno = e;
    return -1;
  }
  return fd;
}

// GET /metrics over HTTP/1.0; the body of a 200 answer, nullopt when the port does not answer.
std::optional<std::string> httpGet(int port) {
  const int fd = connectTo(port);
  if (fd < 0) return std::nullopt;
  const std::string request = "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
  if (send(fd, request.data(), request.size(), MSG_NOSIGNAL) !=
      static_cast<ssize_t>(request.size())) {
    close(fd);
    return std::nullopt;
  }
  std::string answer;
  char buf[8192];
  for (;;) {
    const ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    answer.append(buf, static_cast<std::size_t>(n));
  }
  close(fd);
  const auto end = answer.find("\r\n\r\n");
  if (answer.rfind("HTTP/1.", 0) != 0 || end == std::string::npos) return std::nullopt;
  const std::string status = answer.substr(0, answer.find("\r\n"));
  INFO(status);
  REQUIRE(status.find(" 200") != std::string::npos);
  return answer.substr(end + 4);
}

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
    for (const auto& [name, type] : kTypes) {
      INFO(name);
      CHECK(first.types.count(name) == 1);
      if (first.types.count(name)) CHECK(first.types.at(name) == type);
      CHECK_FALSE(first.find(name, {{"rank", rank}}).empty());
    }
    // Every grapevine_ sample is labelled with this peer's rank (prometheus-cpp adds its own
    // exposer_ series about the scrapes).
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
    CHECK_FALSE(info.front()->labels.at("version").empty());
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
    if (match->contains("local_consensus_distance")) {
      CHECK(near(s.value("grapevine_local_consensus_distance"),
                 (*match)["local_consensus_distance"].get<double>()));
    }
    if (match->contains("public_lag")) {
      CHECK(near(s.value("grapevine_public_lag"), (*match)["public_lag"].get<double>()));
    }
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
