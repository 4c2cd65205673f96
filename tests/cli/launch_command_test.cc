// `grapevine launch CONFIG ... -- COMMAND [ARGS...]` (issue 14) on real processes: a wrapper
// around `grapevine peer` trains exactly what plain `launch` trains; a command gets its rank, the
// world size, the output folder, the resolved config and PYTHONPATH in its environment; a command
// that fails is reported with its exit status; and `workload.name: external` is refused (exit 2) by
// every command that would train a built-in workload.
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "runtime/common/subprocess.h"
#include "tests/test_util/cli.h"
#include "tests/test_util/ports.h"

namespace {

namespace fs = std::filesystem;
using grapevine::test_util::freeBasePort;
using grapevine::test_util::freshDir;
using grapevine::test_util::grapevineBin;
using grapevine::test_util::readSummary;

using grapevine::test_util::readFile;

// Runs `cmd` through the shell, stdout and stderr into `output`; the exit status (-1: no exit).
int runCapture(const std::string& cmd, std::string* output) {
  const std::string file = std::string(GRAPEVINE_BINARY_DIR) + "/launch_command_test.output";
  const int st = std::system((cmd + " > " + file + " 2>&1").c_str());
  *output = readFile(file);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

// An external config (the model lives in the user's program): nothing to train for the CLI.
std::string externalConfig(const std::string& dir) {
  const std::string path = dir + "/external.yaml";
  std::ofstream(path) << "run: { seed: 3, rounds: 50 }\n"
                         "peers: { count: 2, base_port: 24150 }\n"
                         "topology: { kind: ring }\n"
                         "transport: { backend: tcp }\n"
                         "workload: { name: external }\n";
  return path;
}

// KEY=value lines, as `env` prints them.
std::map<std::string, std::string> parseEnv(const std::string& text) {
  std::map<std::string, std::string> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    const auto eq = line.find('=');
    if (eq != std::string::npos) out[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return out;
}

}  // namespace

TEST_CASE("launch -- a wrapper around grapevine peer trains exactly what plain launch trains",
          "[slow]") {
  // A short softmax run over tcp; nothing in it depends on timing (no round misses its timeout),
  // so both runs compute the same models.
  const std::string dir = freshDir("launch_command_test_wrapper");
  const std::string config = std::string(GRAPEVINE_SOURCE_DIR) + "/configs/ring8.yaml";
  const std::string common =
      " --set peers.count=4 --set run.rounds=60 --set workload.name=fashion-mnist-softmax"
      " --set workload.eval_every=30 --set transport.backend=tcp --set algorithm.round_timeout=120"
      " --set compression.ratio=0.1 --set algorithm.consensus_step=0.4 --quiet";
  const std::string plain = dir + "/plain";
  const std::string wrapped = dir + "/wrapped";
  std::string output;
  REQUIRE(runCapture(grapevineBin() + " launch " + config + " --out " + plain + common +
                         " --set peers.base_port=" + std::to_string(freeBasePort(4)),
                     &output) == 0);
  INFO(output);
  const int rc = runCapture(grapevineBin() + " launch " + config + " --out " + wrapped + common +
                                " --set peers.base_port=" + std::to_string(freeBasePort(4)) +
                                " -- sh -c 'exec " + grapevineBin() +
                                " peer \"$GRAPEVINE_CONFIG\" --out \"$GRAPEVINE_OUT\"'",
                            &output);
  INFO(output);
  REQUIRE(rc == 0);
  const auto p = readSummary(plain);
  const auto w = readSummary(wrapped);
  INFO("plain " << p.dump() << "\nwrapped " << w.dump());
  CHECK(w["peers_finished"] == 4);
  CHECK(w["failed_peers"] == 0);
  CHECK(w["launched_peers"] == 4);
  CHECK(w["rounds"] == 60);
  REQUIRE(w["test_accuracy_mean"].is_number());
  CHECK(w["test_accuracy_mean"].get<double>() > 0.5);  // it trained
  // ... and mixed: `grapevine sim` of this config, seeds 1-3, ends at consensus distance 3.5e-5 to
  // 4.1e-5; with consensus_step 0 (no mixing) at 1.8e-2 to 2.1e-2, which the accuracy bar passes.
  REQUIRE(w["consensus_distance_final"].is_number());
  CHECK(w["consensus_distance_final"].get<double>() < 1e-3);
  for (const char* key : {"test_accuracy_mean", "test_accuracy_min", "test_accuracy_max",
                          "averaged_model_accuracy", "consensus_distance_final"}) {
    INFO(key);
    CHECK(w[key] == p[key]);
  }
  for (int r = 0; r < 4; ++r) {
    INFO("rank " << r);
    const std::string model = "/model-" + std::to_string(r) + ".bin";
    REQUIRE(fs::exists(wrapped + model));
    CHECK(readFile(wrapped + model) == readFile(plain + model));
  }
  // The progress and the table came from the wrapped peers' records.
  CHECK(output.find("peers finished") != std::string::npos);
}

// 4 peers of a program that trains through the API (tests/cli/launch_api_child.cc).
std::string apiConfig(const std::string& dir, int port) {
  const std::string path = dir + "/api.yaml";
  std::ofstream(path)
      << "run: { seed: 5, rounds: 200, log_level: warn }\n"
         "peers: { count: 4, base_port: "
      << port
      << " }\n"
         "topology: { kind: ring }\n"
         "transport: { backend: tcp }\n"
         "algorithm: { name: dsgd }\n"
         "compression: { method: none }\n"
         "optimizer: { lr: 0.1, momentum: 0, weight_decay: 0, schedule: constant }\n"
         "workload: { name: external }\n";
  return path;
}

const std::string kApiChild = std::string(GRAPEVINE_BINARY_DIR) + "/tests/launch_api_child";

TEST_CASE("launch -- a program using the API: records, summary and model as for built-in peers",
          "[api]") {
  const std::string dir = freshDir("launch_command_test_api");
  const std::string out = dir + "/out";
  std::string output;
  const int rc = runCapture(grapevineBin() + " launch " + apiConfig(dir, freeBasePort(4)) +
                                " --out " + out + " -- " + kApiChild,
                            &output);
  INFO(output);
  REQUIRE(rc == 0);
  const auto s = readSummary(out);
  INFO(s.dump());
  CHECK(s["peers_finished"] == 4);
  CHECK(s["failed_peers"] == 0);
  CHECK(s["rounds"] == 200);
  // The metrics the program report()ed, per peer 0.5 + 0.1 rank.
  CHECK(s["test_accuracy_mean"].get<double>() == Approx(0.65).margin(1e-12));
  CHECK(s["test_accuracy_min"].get<double>() == Approx(0.5).margin(1e-12));
  CHECK(s["test_accuracy_max"].get<double>() == Approx(0.8).margin(1e-12));
  CHECK(s["consensus_distance_final"].get<double>() == 0.0);  // finalize(average): all identical
  CHECK(s["bytes_sent_total"].get<double>() > 0);
  // Every peer holds the average of the peers' optima, c_r = r + 0.01 k: 1.5 + 0.01 k.
  const std::string model0 = readFile(out + "/model-0.bin");
  for (int r = 0; r < 4; ++r) {
    INFO("rank " << r);
    CHECK(readFile(out + "/model-" + std::to_string(r) + ".bin") == model0);
    std::ifstream records(out + "/peer-" + std::to_string(r) + ".jsonl");
    std::string line, last;
    while (std::getline(records, line)) last = line;
    REQUIRE_FALSE(last.empty());
    CHECK(nlohmann::json::parse(last).value("round", -1LL) >= 0);
  }
  std::ifstream in(out + "/model-0.bin", std::ios::binary);
  in.seekg(16);  // the header (runtime/engine/summary.h)
  std::vector<float> model(32);
  in.read(reinterpret_cast<char*>(model.data()), sizeof(float) * model.size());
  REQUIRE(in);
  for (std::size_t k = 0; k < model.size(); ++k) {
    INFO("k " << k);
    CHECK(model[k] == Approx(1.5 + 0.01 * k).margin(1e-4));
  }
  // `grapevine summarize` (what an srun/mpirun run of the program uses) makes the same summary.
  fs::remove(out + "/summary.json");
  REQUIRE(runCapture(grapevineBin() + " summarize " + out + "/config.resolved.yaml " + out,
                     &output) == 0);
  const auto again = readSummary(out);
  for (const char* key : {"peers_finished", "test_accuracy_mean", "test_accuracy_min",
                          "consensus_distance_final", "bytes_sent_total"}) {
    INFO(key);
    CHECK(again[key] == s[key]);
  }
}

TEST_CASE("launch -- a program that crashes mid-run: reported with its status, the others finish",
          "[api]") {
  const std::string dir = freshDir("launch_command_test_api_crash");
  const std::string out = dir + "/out";
  std::string output;
  const int rc = runCapture(grapevineBin() + " launch " + apiConfig(dir, freeBasePort(4)) +
                                " --out " + out + " -- " + kApiChild + " 1 50",
                            &output);
  INFO(output);
  CHECK(rc == 1);  // a command's own error status is passed on
  CHECK(output.find("peer 1 exited with status 7") != std::string::npos);
  CHECK(output.find("rank 1 gives up at round 50") != std::string::npos);
  const auto s = readSummary(out);
  INFO(s.dump());
  CHECK(s["peers_finished"] == 3);
  CHECK(s["failed_peers"] == 1);
}

TEST_CASE("launch -- COMMAND: every rank gets its variables and a config that loads", "[cli]") {
  const std::string dir = freshDir("launch_command_test_env");
  const std::string config = externalConfig(dir);
  const std::string out = dir + "/out";
  // An installed layout (<prefix>/bin/grapevine, <prefix>/GRAPEVINE_INSTALL_PYTHONDIR) and a build
  // tree layout (build/bin/grapevine, build/python): the binary finds the module folder next to
  // itself.
  const std::string installed = dir + "/prefix";
  const std::string installedModule = installed + "/" GRAPEVINE_INSTALL_PYTHONDIR;
  fs::create_directories(installed + "/bin");
  fs::create_directories(installedModule);
  std::error_code ec;
  fs::create_hard_link(grapevineBin(), installed + "/bin/grapevine", ec);
  if (ec) fs::copy_file(grapevineBin(), installed + "/bin/grapevine");
  const std::string command =
      " -- sh -c 'env | grep ^GRAPEVINE_ > \"$GRAPEVINE_OUT/env-$GRAPEVINE_RANK\";"
      " echo \"$PYTHONPATH\" > \"$GRAPEVINE_OUT/pythonpath-$GRAPEVINE_RANK\"'";
  std::string output;
  // --set right before `--`: the command's own flags (`-c`) stay the command's.
  // Without the test harness's own GRAPEVINE_TEST_REQUIRE and GRAPEVINE_SKIP_LOG (tools/test
  // sets them; a launched command inherits the environment): only what launch sets is counted.
  const int rc = runCapture(
      "env -u GRAPEVINE_TEST_REQUIRE -u GRAPEVINE_SKIP_LOG "
      "PYTHONPATH=/earlier/path " +
          installed + "/bin/grapevine launch " + config + " --out " + out + " --set peers.count=3" +
          command,
      &output);
  INFO(output);
  REQUIRE(rc == 0);  // every command exited 0
  const std::string outAbs = fs::absolute(out).string();
  const std::string resolved = outAbs + "/config.resolved.yaml";
  for (int r = 0; r < 3; ++r) {
    INFO("rank " << r);
    const auto env = parseEnv(readFile(out + "/env-" + std::to_string(r)));
    CHECK(env.size() == 5);
    CHECK(env.count("GRAPEVINE_RANK"));
    CHECK(env.count("GRAPEVINE_WORLD_SIZE"));
    CHECK(env.count("GRAPEVINE_OUT"));
    CHECK(env.count("GRAPEVINE_CONFIG"));
    CHECK(env.count("GRAPEVINE_RESUME"));
    if (env.size() != 5) continue;
    CHECK(env.at("GRAPEVINE_RESUME") == "0");  // no --resume
    CHECK(env.at("GRAPEVINE_RANK") == std::to_string(r));
    CHECK(env.at("GRAPEVINE_WORLD_SIZE") == "3");
    CHECK(env.at("GRAPEVINE_OUT") == outAbs);
    CHECK(env.at("GRAPEVINE_CONFIG") == resolved);
    CHECK(readFile(out + "/pythonpath-" + std::to_string(r)) ==
          fs::weakly_canonical(installedModule).string() + ":/earlier/path\n");
  }
  // The resolved config loads, and it is the config with the overrides and the output folder.
  std::string fromFile, expected;
  REQUIRE(runCapture(grapevineBin() + " validate " + resolved, &output) == 0);
  REQUIRE(runCapture(grapevineBin() + " config " + resolved, &fromFile) == 0);
  REQUIRE(runCapture(grapevineBin() + " config " + config + " --set peers.count=3" +
                         " --set output.dir=" + outAbs,
                     &expected) == 0);
  CHECK(fromFile == expected);
  CHECK(fromFile.find("count: 3") != std::string::npos);
  CHECK(fromFile.find("name: external") != std::string::npos);
  // The launcher still writes a summary (no command used the API here: nothing finished).
  const auto s = readSummary(out);
  CHECK(s["launched_peers"] == 3);
  CHECK(s["peers_finished"] == 0);

  // A build tree: build/python next to build/bin.
  const std::string tree = dir + "/build";
  fs::create_directories(tree + "/bin");
  fs::create_directories(tree + "/python");
  fs::create_hard_link(grapevineBin(), tree + "/bin/grapevine", ec);
  if (ec) fs::copy_file(grapevineBin(), tree + "/bin/grapevine");
  const std::string out2 = dir + "/out2";
  REQUIRE(runCapture("env -u PYTHONPATH " + tree + "/bin/grapevine launch " + config + " --out " +
                         out2 + command,
                     &output) == 0);
  for (int r = 0; r < 2; ++r) {
    CHECK(readFile(out2 + "/pythonpath-" + std::to_string(r)) ==
          fs::weakly_canonical(tree + "/python").string() + "\n");
  }
}

TEST_CASE("launch -- COMMAND: a command that fails is reported with its status", "[cli]") {
  const std::string dir = freshDir("launch_command_test_fail");
  const std::string config = externalConfig(dir);
  std::string output;
  const int rc =
      runCapture(grapevineBin() + " launch " + config + " --set peers.count=3 --out " + dir +
                     "/out -- sh -c 'echo \"rank $GRAPEVINE_RANK says goodbye\";"
                     " if [ \"$GRAPEVINE_RANK\" = 1 ]; then exit 7; fi'",
                 &output);
  INFO(output);
  CHECK(rc == 1);
  CHECK(output.find("peer 1 exited with status 7") != std::string::npos);
  CHECK(output.find("rank 1 says goodbye") != std::string::npos);  // its last log lines
  CHECK(output.find("peer 0 exited") == std::string::npos);
  CHECK(output.find("peer 2 exited") == std::string::npos);
  const auto s = readSummary(dir + "/out");
  CHECK(s["failed_peers"] == 1);

  // A command that cannot be started at all: the shell's 127, reported the same way.
  const int missing = runCapture(
      grapevineBin() + " launch " + config + " --out " + dir + "/out2 -- /nonexistent/program",
      &output);
  CHECK(missing == 1);
  CHECK(output.find("exited with status 127") != std::string::npos);
}

TEST_CASE("launch -- COMMAND: SIGINT reaches every command; launch exits 1 with a summary",
          "[cli]") {
  const std::string dir = freshDir("launch_command_test_sigint");
  const std::string config = externalConfig(dir);
  const std::string out = dir + "/out";
  grapevine::SpawnOptions spawn;
  spawn.argv = {grapevineBin(),
                "launch",
                config,
                "--out",
                out,
                "--quiet",
                "--",
                "sh",
                "-c",
                "echo $$ > \"$GRAPEVINE_OUT/pid-$GRAPEVINE_RANK\"; exec sleep 100000"};
  spawn.out = grapevine::ChildStream::file(dir + "/launch.log");
  spawn.err = grapevine::ChildStream::sameAsStdout();
  spawn.newProcessGroup = true;
  auto launcher = grapevine::Subprocess::spawn(spawn);
  REQUIRE(launcher.isOk());
  // Both commands have started (and written their pids) before the signal.
  auto pidOf = [&](int rank) {
    std::ifstream in(out + "/pid-" + std::to_string(rank));
    long pid = -1;
    in >> pid;
    return pid;
  };
  const auto start = std::chrono::steady_clock::now();
  while ((pidOf(0) <= 0 || pidOf(1) <= 0) &&
         std::chrono::steady_clock::now() - start < std::chrono::seconds(60)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  REQUIRE(pidOf(0) > 0);
  REQUIRE(pidOf(1) > 0);
  REQUIRE(kill(launcher->pid(), SIGINT) == 0);
  const int status = launcher->wait();
  INFO(readFile(dir + "/launch.log"));
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 1);  // an interrupted run is not a success
  CHECK(readFile(dir + "/launch.log").find("stopping 2 peers") != std::string::npos);
  for (int r = 0; r < 2; ++r) {
    INFO("rank " << r);
    errno = 0;
    CHECK(kill(static_cast<pid_t>(pidOf(r)), 0) == -1);  // reaped: no such process
    CHECK(errno == ESRCH);
  }
  CHECK(readSummary(out)["launched_peers"] == 2);
}

TEST_CASE("workload external: launch without a command, peer and sim refuse it; validate takes it",
          "[cli]") {
  const std::string dir = freshDir("launch_command_test_refuse");
  const std::string config = externalConfig(dir);
  std::string output;
  for (const std::string& cmd : {" launch " + config + " --out " + dir + "/out",
                                 " peer " + config + " --rank 0 --out " + dir + "/out",
                                 " sim " + config + " --out " + dir + "/out"}) {
    INFO(cmd);
    const int rc = runCapture(grapevineBin() + cmd, &output);
    INFO(output);
    CHECK(rc == 2);
    CHECK(output.find("workload.name is 'external'") != std::string::npos);
    CHECK(output.find("grapevine launch " + config + " -- COMMAND") != std::string::npos);
    CHECK(output.find("docs/api.md") != std::string::npos);
  }
  CHECK_FALSE(fs::exists(dir + "/out/summary.json"));
  // `--` with nothing after it is bad input too.
  CHECK(runCapture(grapevineBin() + " launch " + config + " --out " + dir + "/out --", &output) ==
        2);
  CHECK(output.find("nothing after `--`") != std::string::npos);
  const int rc = runCapture(grapevineBin() + " validate " + config, &output);
  INFO(output);
  CHECK(rc == 0);
  CHECK(output.find("external") != std::string::npos);
}

TEST_CASE("grapevine peer takes its rank from GRAPEVINE_RANK", "[cli]") {
  const std::string dir = freshDir("launch_command_test_rank");
  const std::string config = dir + "/four.yaml";
  std::ofstream(config) << "peers: { count: 4 }\nworkload: { name: consensus }\n";
  std::string output;
  // Rank 9 of 4 is refused before anything starts, naming the rank it was given.
  CHECK(runCapture("env -u SLURM_PROCID -u OMPI_COMM_WORLD_RANK -u PMIX_RANK GRAPEVINE_RANK=9 " +
                       grapevineBin() + " peer " + config,
                   &output) == 2);
  CHECK(output.find("rank 9 is out of range") != std::string::npos);
  // GRAPEVINE_RANK comes before SLURM_PROCID.
  CHECK(runCapture("GRAPEVINE_RANK=7 SLURM_PROCID=1 " + grapevineBin() + " peer " + config,
                   &output) == 2);
  CHECK(output.find("rank 7 is out of range") != std::string::npos);
  CHECK(runCapture("env -u GRAPEVINE_RANK -u SLURM_PROCID -u OMPI_COMM_WORLD_RANK -u PMIX_RANK " +
                       grapevineBin() + " peer " + config,
                   &output) == 2);
  CHECK(output.find("GRAPEVINE_RANK") != std::string::npos);  // the "no rank" message names it
  // A malformed rank is refused naming the variable, not skipped for the next one.
  CHECK(runCapture("env -u GRAPEVINE_RANK -u OMPI_COMM_WORLD_RANK -u PMIX_RANK SLURM_PROCID=x2 " +
                       grapevineBin() + " peer " + config,
                   &output) == 2);
  CHECK(output.find("SLURM_PROCID='x2' is not a rank") != std::string::npos);
}

TEST_CASE("grapevine summarize refuses a folder where no peer finished", "[cli]") {
  const std::string dir = freshDir("launch_command_test_summarize");
  const std::string config = dir + "/four.yaml";
  std::ofstream(config) << "peers: { count: 4 }\nworkload: { name: consensus }\n";
  std::string output;
  CHECK(runCapture(grapevineBin() + " summarize " + config + " " + dir, &output) == 1);
  CHECK(output.find("no peer of " + config + " finished in " + dir) != std::string::npos);
  CHECK_FALSE(fs::exists(dir + "/summary.json"));
}

TEST_CASE("launch starts every peer of a host: auto config locally, through the rendezvous",
          "[cli]") {
  const std::string dir = freshDir("launch_command_test_rendezvous");
  const std::string config = std::string(GRAPEVINE_SOURCE_DIR) + "/examples/slurm/ring8.yaml";
  std::string output;
  const int rc = runCapture(grapevineBin() + " launch " + config + " --out " + dir +
                                "/out --quiet --set peers.count=2 --set run.rounds=20" +
                                " --set peers.base_port=" + std::to_string(freeBasePort(2)) +
                                " --set peers.rendezvous=" + dir + "/out/rendezvous",
                            &output);
  INFO(output);
  REQUIRE(rc == 0);
  CHECK(readSummary(dir + "/out")["peers_finished"] == 2);
  CHECK(fs::exists(dir + "/out/rendezvous/rank-0"));
  CHECK(fs::exists(dir + "/out/rendezvous/rank-1"));
}

TEST_CASE("launch stops the run when a peer fails before its first round", "[cli]") {
  const std::string dir = freshDir("launch_command_test_startup");
  const int base = freeBasePort(4);
  // Rank 2's control port is taken: that peer exits with an error at start.
  const int blocker = socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(blocker >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(base + 2));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(bind(blocker, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  REQUIRE(listen(blocker, 4) == 0);
  const std::string config = dir + "/config.yaml";
  std::ofstream(config) << "run: { seed: 3, rounds: 1000000 }\n"
                        << "peers: { count: 4, host: 127.0.0.1, base_port: " << base << " }\n"
                        << "topology: { kind: ring }\n"
                        << "transport: { backend: tcp }\n"
                        << "workload: { name: consensus, dim: 1000 }\n";
  std::string output;
  const int code =
      runCapture(grapevineBin() + " launch " + config + " --out " + dir + "/out", &output);
  close(blocker);
  INFO(output);
  CHECK(code == 1);
  CHECK(output.find("peer 2 failed before its first round: stopping the other 3 peers") !=
        std::string::npos);
  CHECK(output.find("NOT STARTED") != std::string::npos);
  const nlohmann::json summary = readSummary(dir + "/out");
  CHECK(summary["failed_at_startup"] == nlohmann::json::array({2}));
  CHECK(summary["stopped_peers"] == 3);
  CHECK(summary["peers_finished"] == 0);
}
