// Divergence is caught and explained (issue 13): a run whose training blows up stops on every peer
// with exit code 3 and "diverged at round R (...): lower optimizer.lr or algorithm.consensus_step",
// still writes summary.json ("diverged", "diverged_round") and every peer's last finite model; a
// sweep reports such a cell as diverged and goes on with the others.
#include <sys/wait.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "runtime/engine/summary.h"
#include "tests/test_util/cli.h"
#include "tests/test_util/quadratic.h"

namespace {

using grapevine::test_util::grapevineBin;
using grapevine::test_util::readSummary;

std::string scratch(const std::string& name) {
  return grapevine::test_util::freshDir("divergence_test_" + name);
}

// Runs `cmd`, capturing stderr into `err`; the exit status.
int runCapture(const std::string& cmd, std::string* err) {
  const std::string errFile = std::string(GRAPEVINE_BINARY_DIR) + "/divergence_test.stderr";
  const int st = std::system((cmd + " > /dev/null 2> " + errFile).c_str());
  std::ifstream in(errFile);
  err->assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

// 8 peers on a ring, the quadratic with a step far beyond 2 / a_i^2: x grows ~3x per round.
std::string divergingConfig(const std::string& dir, double lr) {
  grapevine::test_util::writeQuadraticData(dir + "/quad8.json", 8, 20);
  const std::string path = dir + "/config.yaml";
  std::ofstream(path) << "run: { seed: 1, rounds: 400 }\n"
                         "peers: { count: 8 }\n"
                         "topology: { kind: ring }\n"
                         "workload: { name: quadratic, data: \""
                      << dir
                      << "/quad8.json\" }\n"
                         "algorithm: { name: dsgd, round_timeout: 120 }\n"
                         "compression: { method: none }\n"
                         "optimizer: { lr: "
                      << lr << ", momentum: 0 }\n";
  return path;
}

void checkDivergedRun(const std::string& out, int exitCode, const std::string& err) {
  INFO(err);
  CHECK(exitCode == 3);
  CHECK(err.find("diverged at round ") != std::string::npos);
  CHECK(err.find("lower optimizer.lr or algorithm.consensus_step") != std::string::npos);
  const auto s = readSummary(out);
  INFO(s.dump());
  CHECK(s["diverged"] == true);
  REQUIRE(s.contains("diverged_round"));
  const auto round = s["diverged_round"].get<long long>();
  CHECK(round > 0);
  CHECK(round < 40);
  for (int r = 0; r < 8; ++r) {
    INFO("rank " << r);
    std::ifstream in(out + "/peer-" + std::to_string(r) + ".final.json");
    REQUIRE(in);
    const auto j = nlohmann::json::parse(in);
    CHECK(j["diverged"] == true);
    CHECK(j["finished"] == false);
    CHECK(j["rounds"].get<long long>() <= round + 8);  // stopped within the ring's diameter
    auto model = grapevine::engine::readModel(out + "/model-" + std::to_string(r) + ".bin", 20);
    REQUIRE(model.isOk());
    for (float v : *model) CHECK(std::isfinite(v));
  }
}

}  // namespace

TEST_CASE("a diverging run stops on every peer with exit code 3: sim and launch", "[slow]") {
  const std::string dir = scratch("run");
  const std::string config = divergingConfig(dir, 1.0);
  std::string err;
  SECTION("sim") {
    const int rc = runCapture(grapevineBin() + " sim " + config + " --out " + dir + "/sim", &err);
    checkDivergedRun(dir + "/sim", rc, err);
    // The simulator knows every model: its message has the exact consensus distance.
    CHECK(err.find("consensus distance") != std::string::npos);
  }
  SECTION("launch over tcp: every peer stops, nobody hangs") {
    const int rc = runCapture(grapevineBin() + " launch " + config + " --out " + dir +
                                  "/launch --set transport.backend=tcp"
                                  " --set peers.base_port=31600 --quiet",
                              &err);
    checkDivergedRun(dir + "/launch", rc, err);
  }
}

TEST_CASE("a stable run is not flagged as diverged", "[slow]") {
  const std::string dir = scratch("stable");
  const std::string config = divergingConfig(dir, 0.05);
  std::string err;
  CHECK(runCapture(grapevineBin() + " sim " + config + " --out " + dir + "/sim", &err) == 0);
  const auto s = readSummary(dir + "/sim");
  CHECK(s["diverged"] == false);
  CHECK_FALSE(s.contains("diverged_round"));
}

TEST_CASE("a sweep reports a diverged cell as such and goes on with the others", "[slow]") {
  const std::string dir = scratch("sweep");
  const std::string config = divergingConfig(dir, 0.05);
  std::ofstream(dir + "/sweep.yaml") << "name: lr\n"
                                        "base: "
                                     << config
                                     << "\n"
                                        "sweep:\n"
                                        "  optimizer.lr: [0.05, 1.0]\n";
  std::string err;
  const int rc = runCapture(
      grapevineBin() + " sweep " + dir + "/sweep.yaml --out " + dir + "/out --quiet", &err);
  INFO(err);
  CHECK(rc == 0);
  std::ifstream in(dir + "/out/cells.csv");
  REQUIRE(in);
  std::string header, line, text;
  std::getline(in, header);
  CHECK(header.find(",status,") != std::string::npos);
  // diverged_round, then the columns added after it (attacks: issue 43).
  CHECK(header.find(",diverged_round,honest_test_accuracy,quarantined_by_trust") !=
        std::string::npos);
  const auto fields = [](const std::string& row) {
    std::vector<std::string> out(1);
    for (char ch : row) {
      if (ch == ',')
        out.emplace_back();
      else
        out.back() += ch;
    }
    return out;
  };
  const auto names = fields(header);
  const auto column = static_cast<std::size_t>(
      std::find(names.begin(), names.end(), "diverged_round") - names.begin());
  int done = 0, diverged = 0;
  while (std::getline(in, line)) {
    text += line + "\n";
    const auto row = fields(line);
    REQUIRE(row.size() == names.size());
    if (line.find(",done,") != std::string::npos) {
      ++done;
      CHECK(row[column].empty());
    }
    if (line.find(",diverged,") != std::string::npos) {
      ++diverged;
      CHECK_FALSE(row[column].empty());  // the round it diverged in, in its column
    }
  }
  INFO(text);
  CHECK(done == 1);
  CHECK(diverged == 1);
}
