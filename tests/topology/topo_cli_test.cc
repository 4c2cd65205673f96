// `grapevine topo` end to end: runs the built binary and checks its output and exit codes.
#include <sys/wait.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

namespace {

const std::string kBinary = GRAPEVINE_BINARY_DIR "/bin/grapevine";
const std::string kScratch = GRAPEVINE_BINARY_DIR "/tests/topo_cli_scratch";

struct Run {
  int rc = -1;
  std::string out;
  std::string err;
};

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

Run grapevine(const std::string& args) {
  const std::string errPath = kScratch + ".stderr";
  const std::string cmd = kBinary + " " + args + " 2>" + errPath;
  Run r;
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  char buf[4096];
  size_t got;
  while ((got = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, got);
  const int status = pclose(p);
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.err = slurp(errPath);
  return r;
}

std::string writeConfig(const std::string& name, const std::string& text) {
  const std::string path = kScratch + "_" + name + ".yaml";
  std::ofstream(path) << text;
  return path;
}

nlohmann::json jsonOf(const Run& r) {
  INFO("stdout: " << r.out << "\nstderr: " << r.err);
  REQUIRE(r.rc == 0);
  return nlohmann::json::parse(r.out);
}

void requireBadInput(const std::string& args, const std::string& expectInStderr) {
  const Run r = grapevine(args);
  INFO("args: " << args << "\nstdout: " << r.out << "\nstderr: " << r.err);
  CHECK(r.rc == 2);
  CHECK(r.err.find(expectInStderr) != std::string::npos);
}

}  // namespace

TEST_CASE("grapevine topo --json prints one object with the documented fields") {
  const Run r = grapevine("topo --kind ring --peers 8 --json");
  const auto j = jsonOf(r);
  CHECK(r.out.find('\n') == r.out.size() - 1);  // one line, one object
  CHECK(j["peers"] == 8);
  CHECK(j["edges"] == 8);
  CHECK(j["degree_min"] == 2);
  CHECK(j["degree_max"] == 2);
  CHECK(j["diameter"] == 4);
  CHECK(j["connected"] == true);
  CHECK(j["doubly_stochastic"] == true);
  const double lambda2 = (1.0 + 2.0 * std::cos(2.0 * std::acos(-1.0) / 8)) / 3.0;
  CHECK(j["lambda2"].get<double>() == Approx(lambda2).margin(1e-12));
  CHECK(j["spectral_gap"].get<double>() == Approx(1.0 - lambda2).margin(1e-12));
  CHECK(j["period"] == 1);
  CHECK_FALSE(j.contains("period_spectral_gap"));

  const auto op = jsonOf(grapevine("topo --kind one-peer-exponential --peers 16 --json"));
  CHECK(op["period"] == 4);
  CHECK(op["period_lambda2"].get<double>() == Approx(0.0).margin(1e-12));
  CHECK(op["period_spectral_gap"].get<double>() == Approx(1.0).margin(1e-12));
  CHECK(op["symmetric"] == false);
  CHECK(op["sends_per_round"] == 1);

  const auto t =
      jsonOf(grapevine("topo --kind torus --peers 8 --dims 2,4 --weights uniform --json"));
  CHECK(t["degree_max"] == 3);
  CHECK(t["weights"] == "uniform");

  const auto rr1 =
      jsonOf(grapevine("topo --kind random-regular --peers 20 --degree 3 --seed 4 --json"));
  const auto rr2 =
      jsonOf(grapevine("topo --kind random-regular --peers 20 --degree 3 --seed 4 --json"));
  CHECK(rr1 == rr2);
  CHECK(rr1["seed"] == 4);
  CHECK(rr1["degree_min"] == 3);
}

TEST_CASE("grapevine topo torus: --dims implies --peers, --peers alone gets the config's dims") {
  // --dims alone: the product is the peer count.
  const auto d = jsonOf(grapevine("topo --kind torus --dims 4,4 --json"));
  CHECK(d["peers"] == 16);
  CHECK(d["kind"] == "torus");
  CHECK(d["degree_min"] == 4);
  const auto d3 = jsonOf(grapevine("topo --kind torus --dims 2,3,4 --json"));
  CHECK(d3["peers"] == 24);
  // Both given and agreeing: the same graph as either alone.
  CHECK(jsonOf(grapevine("topo --kind torus --peers 16 --dims 4,4 --json")) == d);
  // --peers alone: the squarest factorisation, as a config without topology.dims gets it.
  CHECK(jsonOf(grapevine("topo --kind torus --peers 16 --json")) == d);
  const auto p32 = jsonOf(grapevine("topo --kind torus --peers 32 --json"));
  CHECK(p32 == jsonOf(grapevine("topo --kind torus --dims 4,8 --json")));
  CHECK(p32 != jsonOf(grapevine("topo --kind torus --dims 2,16 --json")));
  const std::string config = writeConfig("torus32", R"(
peers: { count: 32 }
topology: { kind: torus }
)");
  CHECK(jsonOf(grapevine("topo " + config + " --json")) == p32);
}

TEST_CASE("grapevine topo text and dot output") {
  const Run text = grapevine("topo --kind exponential --peers 16");
  CHECK(text.rc == 0);
  CHECK(text.out.find("16 peers") != std::string::npos);
  CHECK(text.out.find("degree 7") != std::string::npos);
  CHECK(text.out.find("spectral gap") != std::string::npos);

  const Run dot = grapevine("topo --kind ring --peers 5 --dot");
  CHECK(dot.rc == 0);
  CHECK(dot.out.rfind("graph grapevine {", 0) == 0);
  CHECK(dot.out.find("0 -- 1") != std::string::npos);
  CHECK(dot.out.find("0 -- 4") != std::string::npos);
  const Run directed = grapevine("topo --kind one-peer-exponential --peers 8 --dot --round 1");
  CHECK(directed.rc == 0);
  CHECK(directed.out.find("6 -> 0") != std::string::npos);  // round 1: hop 2
}

TEST_CASE("grapevine topo CONFIG reads peers and topology, flags override it") {
  const std::string torus = writeConfig("torus", R"(
run:
  seed: 3
peers:
  count: 16
topology:
  kind: torus
  dims: [4, 4]
)");
  const auto j = jsonOf(grapevine("topo " + torus + " --json"));
  CHECK(j["kind"] == "torus");
  CHECK(j["peers"] == 16);
  CHECK(j["edges"] == 32);
  CHECK(j["lambda2"].get<double>() == Approx(0.6).margin(1e-12));
  const auto over = jsonOf(grapevine("topo " + torus + " --kind complete --json"));
  CHECK(over["edges"] == 120);

  const std::string rr = writeConfig(
      "rr", "run: {seed: 9}\npeers: {count: 12}\ntopology: {kind: random-regular, degree: 3}\n");
  const auto fromRun = jsonOf(grapevine("topo " + rr + " --json"));
  CHECK(fromRun["seed"] == 9);  // topology.seed defaults to run.seed
  CHECK(fromRun["degree_max"] == 3);

  const std::string edges = writeConfig("edges", R"(
peers: {count: 3}
topology:
  kind: edges
  weights: explicit
  edges: [[0, 1, 0.25], [1, 2, 0.25], {a: 2, b: 0, weight: 0.25}]
)");
  const auto e = jsonOf(grapevine("topo " + edges + " --json"));
  CHECK(e["edges"] == 3);
  CHECK(e["lambda2"].get<double>() == Approx(0.25).margin(1e-12));

  requireBadInput("topo " + writeConfig("badkind", "peers: {count: 4}\ntopology: {kind: tree}\n"),
                  "topology.kind: expected one of ring, torus, random-regular, erdos-renyi, "
                  "exponential, one-peer-exponential, complete, edges, found \"tree\"");
  requireBadInput("topo " + writeConfig("nopeers", "topology: {kind: ring}\n"),
                  "peers.count: required");
  requireBadInput("topo " + writeConfig("broken", "peers: [1, 2\n"), "broken.yaml");
  requireBadInput("topo " + kScratch + "_does_not_exist.yaml", "does_not_exist");
}

TEST_CASE("grapevine topo rejects bad flags with exit code 2 and a clear message") {
  requireBadInput("topo --kind torus --peers 7", "--kind torus needs --dims");
  requireBadInput("topo --kind torus --peers 7", "7 peers have no a x b factorisation");
  requireBadInput("topo --kind torus --peers 16 --dims 4,8",
                  "torus: dims 4x8 give 32 peers but peers is 16");
  requireBadInput("topo --kind torus", "give a CONFIG file or both --kind and --peers");
  requireBadInput("topo --kind ring --peers -3", "--peers must be at least 1, got -3");
  requireBadInput("topo --kind ring --peers 0", "--peers must be at least 1, got 0");
  requireBadInput("topo --kind tree --peers 8",
                  "unknown kind 'tree'; expected one of: ring, torus, random-regular, erdos-renyi, "
                  "exponential, one-peer-exponential, complete, edges");
  requireBadInput("topo --kind ring --peers 8 --weights best", "unknown weights 'best'");
  requireBadInput("topo --kind torus --peers 8 --dims 3,3",
                  "torus: dims 3x3 give 9 peers but peers is 8");
  requireBadInput("topo --kind torus --peers 8 --dims 4,a", "--dims expects R,C or R,C,D");
  requireBadInput("topo --kind ring --peers 8 --dims 2,4", "--dims only applies to --kind torus");
  requireBadInput("topo --kind ring --peers 8 --degree 3",
                  "--degree only applies to --kind random-regular");
  requireBadInput("topo --kind random-regular --peers 8", "--kind random-regular needs --degree");
  requireBadInput("topo --kind random-regular --peers 7 --degree 3", "peers * degree must be even");
  requireBadInput("topo --kind erdos-renyi --peers 16 --probability 0.01",
                  "erdos-renyi: graph with p=0.01 on 16 peers is disconnected after 100 tries with "
                  "seed 1; raise probability");
  requireBadInput("topo --kind ring --peers 8 --weights explicit",
                  "weights 'explicit' need kind 'edges'");
  requireBadInput("topo --kind ring --peers 8 --json --dot", "excludes");
  requireBadInput("topo --kind ring", "give a CONFIG file or both --kind and --peers");
  requireBadInput("topo --kind ring --peers 8 --frobnicate", "--frobnicate");
  requireBadInput("topo --kind ring --peers eight", "--peers");
}
