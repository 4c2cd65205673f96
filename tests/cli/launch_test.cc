// End-to-end runs through the CLI, as a user starts them: `grapevine launch` on real processes over
// UCX, and a peer killed mid-run and a SIGINT (over tcp, always built). Slow (tens of seconds
// each); labelled `slow`, still run by tools/test. Without a usable UCX only the UCX case skips
// (GV_SKIP).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "runtime/common/subprocess.h"
#include "tests/test_util/cli.h"
#include "tests/test_util/skip.h"

namespace {

using grapevine::test_util::readSummary;
using grapevine::test_util::runQuiet;
const std::string kBin = grapevine::test_util::grapevineBin();
const std::string kConfig = std::string(GRAPEVINE_SOURCE_DIR) + "/configs/ring8.yaml";

std::string scratch(const std::string& name) {
  const std::string dir = std::string(GRAPEVINE_BINARY_DIR) + "/launch_test_" + name;
  std::filesystem::remove_all(dir);
  return dir;
}

}  // namespace

TEST_CASE("ring8 over UCX: CHOCO top-1% reaches 84% and stays within 1.5 points of D-PSGD",
          "[slow]") {
  // UCX is optional (GRAPEVINE_UCX=OFF, or not usable here): then this case is reported as skipped.
  std::string text;
  if (!grapevine::test_util::transportUsable("ucx", &text)) {
    GV_SKIP_MISSING("ucx", "the ucx transport is not usable in this build:\n" << text);
  }
  const std::string common = " --set run.rounds=1000 --set peers.base_port=31100 --quiet";
  const std::string choco = scratch("choco");
  const std::string dsgd = scratch("dsgd");
  REQUIRE(runQuiet(kBin + " launch " + kConfig + " --out " + choco + common) == 0);
  REQUIRE(runQuiet(kBin + " launch " + kConfig + " --out " + dsgd + common +
                   " --set algorithm.name=dsgd --set compression.method=none") == 0);
  const auto c = readSummary(choco);
  const auto d = readSummary(dsgd);
  INFO("choco " << c.dump() << "\ndsgd " << d.dump());
  CHECK(c["transport"] == "ucx");
  CHECK(c["rounds"] == 1000);
  CHECK(c["peers_finished"] == 8);
  const double accC = c["test_accuracy_mean"].get<double>();
  const double accD = d["test_accuracy_mean"].get<double>();
  CHECK(accC >= 0.84);
  CHECK(accD - accC <= 0.015);
  CHECK(c["averaged_model_accuracy"].get<double>() >= 0.84);
  // The accuracy bars alone pass without gossip (each peer trained alone on its shard reaches
  // 85%); what mixing does is keep the models together. `grapevine sim` of this config, seeds 1-3:
  // consensus distance 2.51e-5-2.53e-5 with gossip (D-PSGD 5.3e-13); with consensus_step 0 (no
  // mixing) 4.5e-2-4.7e-2. The bound sits 40x above the first and 45x below the second.
  CHECK(c["consensus_distance_final"].get<double>() < 1e-3);
  CHECK(d["consensus_distance_final"].get<double>() < 1e-3);
  // top-1% sends a small fraction of what dense fp32 would: index + value per kept element.
  CHECK(c["bytes_sent_total"].get<double>() < 0.03 * c["bytes_dense_equivalent"].get<double>());
  CHECK(d["bytes_sent_total"].get<double>() >= d["bytes_dense_equivalent"].get<double>());
  for (const char* key : {"wall_seconds", "test_accuracy_min", "test_accuracy_max"}) {
    CHECK(c.contains(key));
  }
}

TEST_CASE("a peer killed mid-run is declared dead within 2 s; the others finish with a summary",
          "[slow]") {
  const std::string out = scratch("kill");
  const std::string cmd =
      kBin + " launch " + kConfig + " --out " + out +
      " --set run.rounds=1500 --set peers.base_port=31200 --set transport.backend=tcp"
      " --set algorithm.overlap=true --quiet";
  grapevine::SpawnOptions spawn;
  spawn.argv = {"/bin/sh", "-c", cmd};
  spawn.out = grapevine::ChildStream::file(out + ".log");
  spawn.err = grapevine::ChildStream::sameAsStdout();
  auto launcher = grapevine::Subprocess::spawn(spawn);
  REQUIRE(launcher.isOk());
  // Wait for peer 3 to be past round 100, then SIGKILL it.
  const std::string jsonl3 = out + "/peer-3.jsonl";
  auto lastRound = [](const std::string& path) {
    std::ifstream in(path);
    std::string line, last;
    while (std::getline(in, line)) last = line;
    if (last.empty()) return -1LL;
    try {
      return nlohmann::json::parse(last).value("round", -1LL);
    } catch (...) {
      return -1LL;
    }
  };
  const auto start = std::chrono::steady_clock::now();
  while (lastRound(jsonl3) < 100 &&
         std::chrono::steady_clock::now() - start < std::chrono::seconds(60)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  REQUIRE(lastRound(jsonl3) >= 100);
  FILE* p = popen("pgrep -f -- '--rank 3 --out .*launch_test_kill'", "r");
  REQUIRE(p);
  long pid = -1;
  REQUIRE(std::fscanf(p, "%ld", &pid) == 1);
  pclose(p);
  REQUIRE(kill(static_cast<pid_t>(pid), SIGKILL) == 0);
  const auto killedAt = std::chrono::steady_clock::now();

  // Neighbours 2 and 4 record it as dead.
  auto sawDead = [&](int rank) {
    std::ifstream in(out + "/peer-" + std::to_string(rank) + ".jsonl");
    std::string line;
    while (std::getline(in, line)) {
      try {
        auto j = nlohmann::json::parse(line);
        if (j.contains("dead")) {
          for (int d : j["dead"])
            if (d == 3) return true;
        }
      } catch (...) {
      }
    }
    return false;
  };
  while (!(sawDead(2) && sawDead(4)) &&
         std::chrono::steady_clock::now() - killedAt < std::chrono::seconds(10)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const double detect =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - killedAt).count();
  CHECK(sawDead(2));
  CHECK(sawDead(4));
  CHECK(detect < 2.0);

  const int status = launcher->wait();
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);  // 7 of 8 finished
  const auto s = readSummary(out);
  INFO(s.dump());
  CHECK(s["peers_finished"] == 7);
  CHECK(s["failed_peers"] == 1);
  CHECK(s["test_accuracy_mean"].get<double>() > 0.8);
  std::ifstream log(out + ".log");
  std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  CHECK(text.find("peer 3 was killed by signal") != std::string::npos);
}

TEST_CASE("SIGINT stops every peer within 2 s and still writes models, records and a summary",
          "[slow]") {
  const std::string out = scratch("sigint");
  const std::string cmd =
      kBin + " launch " + kConfig + " --out " + out +
      " --set run.rounds=100000 --set peers.base_port=31300 --set transport.backend=tcp --quiet";
  grapevine::SpawnOptions spawn;
  spawn.argv = {"/bin/sh", "-c", "exec " + cmd};
  spawn.out = grapevine::ChildStream::file(out + ".log");
  spawn.err = grapevine::ChildStream::sameAsStdout();
  spawn.newProcessGroup = true;
  auto launcher = grapevine::Subprocess::spawn(spawn);
  REQUIRE(launcher.isOk());
  const auto start = std::chrono::steady_clock::now();
  while (!std::filesystem::exists(out + "/peer-7.jsonl") &&
         std::chrono::steady_clock::now() - start < std::chrono::seconds(60)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  std::this_thread::sleep_for(std::chrono::seconds(2));
  REQUIRE(kill(launcher->pid(), SIGINT) == 0);
  const auto sentAt = std::chrono::steady_clock::now();
  const int status = launcher->wait();
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - sentAt).count();
  // Peers abandon their round within 2 s; the launcher then evaluates the averaged model.
  CHECK(took < 5.0);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 1);  // interrupted runs do not report success
  for (int r = 0; r < 8; ++r) {
    INFO("rank " << r);
    CHECK(std::filesystem::exists(out + "/model-" + std::to_string(r) + ".bin"));
    std::ifstream in(out + "/peer-" + std::to_string(r) + ".final.json");
    REQUIRE(in);
    const auto j = nlohmann::json::parse(in);
    CHECK(j["finished"] == false);
    CHECK(j["rounds"].get<long long>() > 0);
  }
  const auto s = readSummary(out);
  CHECK(s["peers_finished"] == 0);
}
