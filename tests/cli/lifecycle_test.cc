// Process lifecycle through the CLI (issue 15): peers die with a SIGKILLed `grapevine launch` and
// free their ports; SIGINT ends a peer whose bootstrap waits on a neighbour that never comes; a
// neighbour that stays silent while our send is pending is declared dead after transport.io_timeout
// (the training thread does not rewrite a buffer a transport may still read). Real processes over
// tcp; every wait is on progress (a file, a bound port, an exit) with a generous deadline, and the
// times measured are printed, not asserted.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "runtime/common/subprocess.h"
#include "runtime/engine/checkpoint.h"
#include "tests/test_util/cli.h"
#include "tests/test_util/ports.h"
#include "tests/test_util/prometheus.h"
#include "tests/test_util/skip.h"

namespace {

using Clock = std::chrono::steady_clock;
using grapevine::test_util::freeBasePort;
using grapevine::test_util::freshDir;
using grapevine::test_util::portsFree;
const std::string kBin = grapevine::test_util::grapevineBin();

using grapevine::test_util::readFile;
using grapevine::test_util::readSummary;

// Waits until `done()` or the deadline; true when done.
template <typename F>
bool waitFor(F done, std::chrono::seconds deadline) {
  const auto end = Clock::now() + deadline;
  while (!done()) {
    if (Clock::now() >= end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

double secondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Children of `parent` now (from /proc/<pid>/stat: the field after the state is the parent pid).
std::vector<pid_t> childrenOf(pid_t parent) {
  std::vector<pid_t> out;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    const std::string stat = readFile(entry.path().string() + "/stat");
    const auto close = stat.rfind(')');
    if (close == std::string::npos) continue;
    char state = 0;
    int ppid = 0;
    if (std::sscanf(stat.c_str() + close + 1, " %c %d", &state, &ppid) == 2 && ppid == parent) {
      out.push_back(std::stoi(name));
    }
  }
  return out;
}

// The `grapevine peer --rank R` child of a launcher (-1 when there is none now).
pid_t peerOf(pid_t launcher, int rank) {
  for (pid_t p : childrenOf(launcher)) {
    const std::string cmdline = readFile("/proc/" + std::to_string(p) + "/cmdline");
    if (cmdline.find(std::string("\0peer\0", 6)) != std::string::npos &&
        cmdline.find("--rank" + std::string(1, '\0') + std::to_string(rank) +
                     std::string(1, '\0')) != std::string::npos)
      return p;
  }
  return -1;
}

// A process that runs (exists and is not a zombie).
bool alive(pid_t pid) {
  const std::string stat = readFile("/proc/" + std::to_string(pid) + "/stat");
  const auto close = stat.rfind(')');
  if (close == std::string::npos) return false;
  char state = 0;
  return std::sscanf(stat.c_str() + close + 1, " %c", &state) == 1 && state != 'Z' && state != 'X';
}

std::string twoPeerConfig(const std::string& dir, int port, const std::string& extra) {
  const std::string path = dir + "/two.yaml";
  std::ofstream(path) << "run: { name: lifecycle, seed: 1, rounds: 100000 }\n"
                         "peers: { count: 2, host: 127.0.0.1, base_port: "
                      << port << extra
                      << " }\n"
                         "topology: { kind: ring }\n"
                         "transport: { backend: tcp }\n"
                         "algorithm: { name: dsgd }\n"
                         "compression: { method: none }\n"
                         "workload: { name: consensus, dim: 16 }\n";
  return path;
}

}  // namespace

TEST_CASE("SIGKILL of grapevine launch: its peers exit and their ports can be bound again",
          "[lifecycle]") {
  const std::string dir = freshDir("lifecycle_launch_kill");
  const int port = freeBasePort(8);
  grapevine::SpawnOptions spawn;
  spawn.argv = {kBin,
                "launch",
                std::string(GRAPEVINE_SOURCE_DIR) + "/configs/ring8.yaml",
                "--out",
                dir + "/out",
                "--quiet",
                "--set",
                "run.rounds=100000",
                "--set",
                "transport.backend=tcp",
                "--set",
                "peers.base_port=" + std::to_string(port)};
  spawn.out = grapevine::ChildStream::file(dir + "/launch.log");
  spawn.err = grapevine::ChildStream::sameAsStdout();
  auto launcher = grapevine::Subprocess::spawn(spawn);
  REQUIRE(launcher.isOk());
  // Training runs: every peer has written its first record.
  REQUIRE(waitFor(
      [&] {
        for (int r = 0; r < 8; ++r) {
          if (readFile(dir + "/out/peer-" + std::to_string(r) + ".jsonl").empty()) return false;
        }
        return true;
      },
      std::chrono::seconds(120)));
  std::vector<pid_t> peers;
  for (pid_t p : childrenOf(launcher->pid())) {
    // argv[1] == "peer" (the launcher's guardian is a fork of it: argv[1] == "launch").
    const std::string cmdline = readFile("/proc/" + std::to_string(p) + "/cmdline");
    if (cmdline.find(std::string("\0peer\0", 6)) != std::string::npos) {
      peers.push_back(p);
    }
  }
  INFO(readFile(dir + "/launch.log"));
  REQUIRE(peers.size() == 8);

  launcher->kill();  // SIGKILL: the launcher cannot clean up itself
  const auto killedAt = Clock::now();
  const bool gone = waitFor(
      [&] {
        for (pid_t p : peers) {
          if (alive(p)) return false;
        }
        return true;
      },
      std::chrono::seconds(30));
  const double took = secondsSince(killedAt);
  WARN("peers gone " << took << " s after the launcher was killed");
  CHECK(gone);
  CHECK(waitFor([&] { return portsFree(port, 8); }, std::chrono::seconds(30)));
}

TEST_CASE("SIGINT ends a peer whose bootstrap waits on a neighbour that never comes",
          "[lifecycle]") {
  const std::string dir = freshDir("lifecycle_boot_sigint");
  const int port = freeBasePort(2);
  // The bootstrap alone would wait 600 s for peer 1 (never started).
  const std::string config = twoPeerConfig(dir, port, ", connect_timeout: 600");
  grapevine::SpawnOptions spawn;
  spawn.argv = {kBin, "peer", config, "--rank", "0", "--out", dir + "/out"};
  spawn.out = grapevine::ChildStream::file(dir + "/peer.log");
  spawn.err = grapevine::ChildStream::sameAsStdout();
  auto peer = grapevine::Subprocess::spawn(spawn);
  REQUIRE(peer.isOk());
  // In the bootstrap: its control port is bound.
  REQUIRE(waitFor([&] { return !portsFree(port, 1); }, std::chrono::seconds(60)));
  REQUIRE(kill(peer->pid(), SIGINT) == 0);
  const auto sentAt = Clock::now();
  auto status = peer->waitUntil(Clock::now() + std::chrono::seconds(60));
  const double took = secondsSince(sentAt);
  WARN("peer exited " << took << " s after SIGINT");
  REQUIRE(status.isOk());  // not still waiting for the 600 s connect timeout
  const std::string log = readFile(dir + "/peer.log");
  INFO(log);
  CHECK(WIFEXITED(*status));
  CHECK(WEXITSTATUS(*status) == 1);  // an interrupted run does not report success
  CHECK(log.find("stopped during the bootstrap") != std::string::npos);
  CHECK(portsFree(port, 1));
}

TEST_CASE("a neighbour silent while our send is pending is declared dead after io_timeout",
          "[lifecycle]") {
  // Peer 1 is stopped (SIGSTOP) mid-run with dead_after far away: peer 0's big message to it
  // cannot be delivered, the send stays pending, and only transport.io_timeout can end the wait.
  // Peer 0 must then mark peer 1 dead (closing the edge) instead of rewriting the buffer the send
  // still reads, and train alone to the end. Over tcp the transport fails such a send itself; over
  // UCX (rendezvous: the receiver fetches the data) nothing does but the driver's check.
  const std::string backend = GENERATE(as<std::string>{}, "tcp", "ucx");
  std::string why;
  if (!grapevine::test_util::transportUsable(backend, &why)) {
    GV_PART_MISSING(backend, "the " << backend << " transport is not usable in this build:\n"
                                    << why);
    return;
  }
  const std::string dir = freshDir("lifecycle_stuck_send_" + backend);
  const int port = freeBasePort(2);
  const std::string config = dir + "/stuck.yaml";
  // 4 M floats (16 MB) per message.
  std::ofstream(config) << "run: { name: stuck, seed: 1, rounds: 100 }\n"
                           "peers: { count: 2, host: 127.0.0.1, base_port: "
                        << port
                        << ", dead_after: 600, heartbeat_interval: 1 }\n"
                           "topology: { kind: ring }\n"
                           "transport: { backend: "
                        << backend
                        << ", io_timeout: 3 }\n"
                           "algorithm: { name: dsgd, round_timeout: 1 }\n"
                           "compression: { method: none }\n"
                           "workload: { name: consensus, dim: 4000000 }\n";
  std::vector<grapevine::Subprocess> peers;
  for (int r = 0; r < 2; ++r) {
    grapevine::SpawnOptions spawn;
    spawn.argv = {kBin, "peer", config, "--rank", std::to_string(r), "--out", dir + "/out"};
    spawn.out = grapevine::ChildStream::file(dir + "/peer-" + std::to_string(r) + ".log");
    spawn.err = grapevine::ChildStream::sameAsStdout();
    auto p = grapevine::Subprocess::spawn(spawn);
    REQUIRE(p.isOk());
    peers.push_back(std::move(*p));
  }
  REQUIRE(waitFor([&] { return !readFile(dir + "/out/peer-1.jsonl").empty(); },
                  std::chrono::seconds(120)));
  REQUIRE(kill(peers[1].pid(), SIGSTOP) == 0);
  const auto stoppedAt = Clock::now();
  auto status = peers[0].waitUntil(Clock::now() + std::chrono::seconds(300));
  WARN(backend << ": peer 0 finished " << secondsSince(stoppedAt) << " s after peer 1 stopped");
  kill(peers[1].pid(), SIGKILL);
  peers[1].wait();
  const std::string log = readFile(dir + "/peer-0.log");
  INFO(log);
  REQUIRE(status.isOk());  // not waiting for dead_after (600 s)
  CHECK(WIFEXITED(*status));
  CHECK(WEXITSTATUS(*status) == 0);
  CHECK(log.find("neighbour 1 is dead") != std::string::npos);
  std::ifstream in(dir + "/out/peer-0.final.json");
  REQUIRE(in);
  const auto j = nlohmann::json::parse(in);
  CHECK(j["finished"] == true);
  CHECK(j["dead_neighbours"] == 1);
}

namespace {

std::string resumeConfig(const std::string& dir, int port) {
  const std::string path = dir + "/resume.yaml";
  std::ofstream(path) << "run: { name: resume, seed: 4, rounds: 400 }\n"
                         "peers: { count: 4, host: 127.0.0.1, dead_after: 60, base_port: "
                      << port
                      << " }\n"
                         "topology: { kind: ring }\n"
                         "transport: { backend: tcp }\n"
                         // No round can go suspect on a loaded machine (the default 5 s can, beside
                         // 16-process tests): every message is mixed in its round, so a resumed run
                         // must end with the uninterrupted run's models, bit for bit.
                         "algorithm: { name: choco, consensus_step: auto, overlap: true, "
                         "round_timeout: 120 }\n"
                         "optimizer: { lr: 0.05, momentum: 0.9, nesterov: true, batch_size: 32 }\n"
                         "compression: { method: top-k, ratio: 0.05 }\n"
                         "workload: { name: fashion-mnist-mlp, hidden: [32], eval_every: 0, "
                         "eval_samples: 500 }\n"
                         "output: { log_every: 10 }\n"
                         "checkpoint: { every: 50, keep: 3 }\n";
  return path;
}

// Whether every one of `peers` peers has its checkpoint of `round` in OUT/checkpoints.
bool checkpointed(const std::string& out, int peers, std::int64_t round) {
  for (int r = 0; r < peers; ++r) {
    const auto rounds =
        grapevine::engine::checkpointRounds(out + "/checkpoints/rank-" + std::to_string(r));
    if (std::find(rounds.begin(), rounds.end(), round) == rounds.end()) return false;
  }
  return true;
}

grapevine::Result<grapevine::Subprocess> startLaunch(const std::string& config,
                                                     const std::string& out, bool resume) {
  grapevine::SpawnOptions spawn;
  spawn.argv = {kBin, "launch", config, "--out", out, "--quiet"};
  if (resume) spawn.argv.push_back("--resume");
  spawn.out = grapevine::ChildStream::file(out + (resume ? ".resume.log" : ".log"));
  spawn.err = grapevine::ChildStream::sameAsStdout();
  return grapevine::Subprocess::spawn(spawn);
}

int finishLaunch(grapevine::Subprocess& launcher) {
  auto status = launcher.waitUntil(Clock::now() + std::chrono::seconds(300));
  REQUIRE(status.isOk());
  return WIFEXITED(*status) ? WEXITSTATUS(*status) : 128 + WTERMSIG(*status);
}

// The rounds of a records file, in file order (the final line left out).
std::vector<std::int64_t> recordRounds(const std::string& path) {
  std::vector<std::int64_t> rounds;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_object() && !j.value("final", false)) rounds.push_back(j.value("round", -1));
  }
  return rounds;
}

}  // namespace

TEST_CASE("a run killed mid-way continues from its checkpoints with --resume, exactly",
          "[lifecycle][resume]") {
  const std::string dir = freshDir("lifecycle_resume");
  const int port = freeBasePort(4);
  const std::string config = resumeConfig(dir, port);

  // The reference: the same run, never interrupted.
  auto reference = startLaunch(config, dir + "/ref", false);
  REQUIRE(reference.isOk());
  INFO(readFile(dir + "/ref.log"));
  REQUIRE(finishLaunch(*reference) == 0);

  // Killed (launcher SIGKILL: every peer dies with it) after round 260, past several checkpoints,
  // once every peer's checkpoint of round 249 is on disk (they are written beside the training).
  auto first = startLaunch(config, dir + "/out", false);
  REQUIRE(first.isOk());
  REQUIRE(waitFor(
      [&] {
        const auto rounds = recordRounds(dir + "/out/peer-0.jsonl");
        return !rounds.empty() && rounds.back() >= 260 && checkpointed(dir + "/out", 4, 249);
      },
      std::chrono::seconds(300)));
  first->kill();
  REQUIRE(waitFor([&] { return portsFree(port, 4); }, std::chrono::seconds(60)));
  REQUIRE(finishLaunch(*first) != 0);
  // The peers stopped with it (the guardian's SIGTERM; their control ports, open for the whole run,
  // are free once they exited): none finished the run.
  for (int r = 0; r < 4; ++r) {
    const std::string final = dir + "/out/peer-" + std::to_string(r) + ".final.json";
    if (std::filesystem::exists(final))
      CHECK(nlohmann::json::parse(readFile(final))["finished"] == false);
  }

  auto resumed = startLaunch(config, dir + "/out", true);
  REQUIRE(resumed.isOk());
  const int code = finishLaunch(*resumed);
  INFO(readFile(dir + "/out.resume.log") + readFile(dir + "/out/peer-0.log"));
  REQUIRE(code == 0);
  const auto summary = readSummary(dir + "/out");
  CHECK(summary.value("peers_finished", 0) == 4);
  std::int64_t from = -1;
  for (int r = 0; r < 4; ++r) {
    const std::string rank = std::to_string(r);
    const auto final = nlohmann::json::parse(readFile(dir + "/out/peer-" + rank + ".final.json"));
    CHECK(final.value("finished", false));
    CHECK(final.value("rounds", 0) == 400);
    // Every peer resumed from the same checkpoint round, at or after the last one before round 260.
    const std::int64_t f = final.value("resumed_from_round", std::int64_t{-1});
    if (from < 0) from = f;
    CHECK(f == from);
    CHECK(f >= 249);
    CHECK((f + 1) % 50 == 0);
    // The records continue where the checkpoint was taken: no round twice, none missing.
    const auto rounds = recordRounds(dir + "/out/peer-" + rank + ".jsonl");
    REQUIRE(rounds.size() >= 2);
    for (std::size_t k = 1; k < rounds.size(); ++k) CHECK(rounds[k] > rounds[k - 1]);
    CHECK(rounds.back() == 399);
  }
  // No suspect round in either run (the config's round timeout rules them out), so every message
  // was applied in its round in both: the resumed peers computed exactly what the uninterrupted
  // ones did, bit for bit. A resume from the wrong state cannot pass this.
  const auto refSummary = readSummary(dir + "/ref");
  REQUIRE(summary.value("suspect_rounds_total", -1) == 0);
  REQUIRE(refSummary.value("suspect_rounds_total", -1) == 0);
  for (int r = 0; r < 4; ++r) {
    const std::string model = "/model-" + std::to_string(r) + ".bin";
    INFO("peer " << r);
    const std::string ref = readFile(dir + "/ref" + model);
    REQUIRE(!ref.empty());
    CHECK(ref == readFile(dir + "/out" + model));
  }

  // Churn under `launch --max-restarts`: peer 2, then peer 1, is SIGKILLed while the run trains;
  // each time the launcher stops the others and restarts every peer from the newest common
  // checkpoint. The run finishes, says it restarted twice, and ends with the uninterrupted run's
  // models, bit for bit.
  {
    const std::string churn = dir + "/churn";
    grapevine::SpawnOptions spawn;
    spawn.argv = {kBin,      "launch",         config, "--out",           churn,
                  "--quiet", "--max-restarts", "3",    "--restart-scope", "run"};
    spawn.out = grapevine::ChildStream::file(churn + ".log");
    spawn.err = grapevine::ChildStream::sameAsStdout();
    auto launcher = grapevine::Subprocess::spawn(spawn);
    REQUIRE(launcher.isOk());
    const auto peerPid = [&](int rank) { return peerOf(launcher->pid(), rank); };
    int restartsSeen = 0;
    for (const auto& [rank, atRound] : {std::pair{2, 120}, std::pair{1, 260}}) {
      REQUIRE(waitFor(
          [&] {
            const auto rounds = recordRounds(churn + "/peer-0.jsonl");
            return !rounds.empty() && rounds.back() >= atRound && peerPid(rank) > 0 &&
                   (atRound < 249 || checkpointed(churn, 4, 249));
          },
          std::chrono::seconds(300)));
      REQUIRE(kill(peerPid(rank), SIGKILL) == 0);
      ++restartsSeen;
      // The launcher restarted the run: its log says so.
      INFO(readFile(churn + ".log"));
      REQUIRE(waitFor(
          [&] {
            return readFile(churn + ".log")
                       .find("(restart " + std::to_string(restartsSeen) + " of 3)") !=
                   std::string::npos;
          },
          std::chrono::seconds(120)));
    }
    const int churnCode = finishLaunch(*launcher);
    INFO(readFile(churn + ".log"));
    REQUIRE(churnCode == 0);
    const auto s = readSummary(churn);
    CHECK(s.value("restarts", -1) == 2);
    CHECK(s.value("peers_finished", 0) == 4);
    for (int r = 0; r < 4; ++r) {
      const auto final =
          nlohmann::json::parse(readFile(churn + "/peer-" + std::to_string(r) + ".final.json"));
      CHECK(final.value("rounds", 0) == 400);
      CHECK(final.value("resumed_from_round", std::int64_t{-1}) >= 249);
    }
    REQUIRE(s.value("suspect_rounds_total", -1) == 0);
    for (int r = 0; r < 4; ++r) {
      const std::string model = "/model-" + std::to_string(r) + ".bin";
      INFO("peer " << r);
      CHECK(readFile(dir + "/ref" + model) == readFile(churn + model));
    }
  }

  // The newest round every peer has is missing at one of them: every peer refuses to resume,
  // saying why, instead of mixing rounds.
  std::filesystem::remove(dir + "/out/checkpoints/rank-1/round-0000000399.ckpt");
  std::filesystem::remove(dir + "/out/checkpoints/rank-0/round-0000000349.ckpt");
  auto refused = startLaunch(config, dir + "/out", true);
  REQUIRE(refused.isOk());
  CHECK(finishLaunch(*refused) != 0);
  for (int r = 0; r < 4; ++r) {
    const std::string log = readFile(dir + "/out/peer-" + std::to_string(r) + ".log");
    INFO(log);
    CHECK(log.find("the newest checkpoint every peer has is round 349") != std::string::npos);
  }
}

TEST_CASE("peers that train on after a neighbour died keep the checkpoint a restart needs",
          "[lifecycle][resume]") {
  // checkpoint.keep: 1, yet after peer 2 is SIGKILLed the others go on (without a supervisor) for
  // many more checkpoints. They learn over the control links that peer 2's newest checkpoint
  // stays behind and keep every checkpoint from it on, so `launch --resume` continues the run
  // from peer 2's newest round instead of refusing.
  const std::string dir = freshDir("lifecycle_keep");
  const int port = freeBasePort(4);
  const std::string config = dir + "/keep.yaml";
  std::ofstream(config) << "run: { name: keep, seed: 5, rounds: 200 }\n"
                           "peers: { count: 4, host: 127.0.0.1, base_port: "
                        << port
                        << " }\n"
                           "topology: { kind: ring }\n"
                           "transport: { backend: tcp }\n"
                           "algorithm: { name: choco, consensus_step: auto }\n"
                           "compression: { method: top-k, ratio: 0.05 }\n"
                           "workload: { name: fashion-mnist-mlp, hidden: [16], eval_every: 0, "
                           "eval_samples: 200 }\n"
                           "output: { log_every: 10 }\n"
                           "checkpoint: { every: 10, keep: 1 }\n";
  const std::string out = dir + "/out";
  auto launcher = startLaunch(config, out, false);
  REQUIRE(launcher.isOk());
  const std::string victimDir = out + "/checkpoints/rank-2";
  pid_t victim = -1;
  REQUIRE(waitFor(
      [&] {
        if (grapevine::engine::checkpointRounds(victimDir).empty()) return false;
        for (pid_t p : childrenOf(launcher->pid())) {
          const std::string cmdline = readFile("/proc/" + std::to_string(p) + "/cmdline");
          if (cmdline.find(std::string("--rank\0"
                                       "2\0",
                                       9)) != std::string::npos)
            victim = p;
        }
        return victim > 0;
      },
      std::chrono::seconds(300)));
  REQUIRE(kill(victim, SIGKILL) == 0);
  INFO(readFile(out + ".log"));
  CHECK(finishLaunch(*launcher) == 0);  // the others finished (a decentralized run survives)
  CHECK(readSummary(out).value("failed_peers", 0) == 1);
  const auto victimRounds = grapevine::engine::checkpointRounds(victimDir);
  REQUIRE(!victimRounds.empty());
  const std::int64_t newest = victimRounds.back();
  for (int r : {0, 1, 3}) {
    const auto rounds =
        grapevine::engine::checkpointRounds(out + "/checkpoints/rank-" + std::to_string(r));
    INFO("peer " << r << " newest " << (rounds.empty() ? -1 : rounds.back()));
    REQUIRE(!rounds.empty());
    CHECK(rounds.back() == 199);  // it trained on to the end
    CHECK(std::find(rounds.begin(), rounds.end(), newest) != rounds.end());
  }

  auto resumed = startLaunch(config, out, true);
  REQUIRE(resumed.isOk());
  const int code = finishLaunch(*resumed);
  INFO(readFile(out + ".resume.log") + readFile(out + "/peer-0.log"));
  REQUIRE(code == 0);
  for (int r = 0; r < 4; ++r) {
    const auto final =
        nlohmann::json::parse(readFile(out + "/peer-" + std::to_string(r) + ".final.json"));
    CHECK(final.value("rounds", 0) == 200);
    CHECK(final.value("resumed_from_round", std::int64_t{-1}) == newest);
  }
}

TEST_CASE("a peer started late, without a checkpoint, joins the running training",
          "[lifecycle][rejoin]") {
  // Peers 0, 1 and 3 of a CHOCO ring start; peer 2 does not come within peers.connect_timeout, so
  // they start training without it (it counts as dead). Once they are well into the run, peer 2
  // starts (no --resume, no checkpoint): it learns from the hellos that the run goes on, takes its
  // model from the first neighbour snapshot (state transfer), skips to their round, and all four
  // finish together. Progress-based: peer 2 starts once peer 0 recorded round 300 of 3000.
  const std::string dir = freshDir("lifecycle_late_join");
  const int port = freeBasePort(4);
  const std::string config = dir + "/late.yaml";
  std::ofstream(config)
      << "run: { name: late, seed: 6, rounds: 3000 }\n"
         "peers: { count: 4, host: 127.0.0.1, base_port: "
      << port
      << ", connect_timeout: 2 }\n"
         "topology: { kind: ring }\n"
         "transport: { backend: tcp }\n"
         "algorithm: { name: choco, consensus_step: 0.3 }\n"
         "optimizer: { lr: 0.02, momentum: 0.9, nesterov: true, batch_size: 64 }\n"
         "compression: { method: top-k, ratio: 0.1 }\n"
         "workload: { name: fashion-mnist-mlp, hidden: [128], eval_every: 0, "
         "eval_samples: 1000 }\n"
         "output: { log_every: 10 }\n";
  const std::string out = dir + "/out";
  auto start = [&](int rank) {
    grapevine::SpawnOptions spawn;
    spawn.argv = {kBin, "peer", config, "--rank", std::to_string(rank), "--out", out};
    spawn.out = grapevine::ChildStream::file(dir + "/peer-" + std::to_string(rank) + ".out");
    spawn.err = grapevine::ChildStream::sameAsStdout();
    auto p = grapevine::Subprocess::spawn(spawn);
    REQUIRE(p.isOk());
    return std::move(*p);
  };
  std::vector<grapevine::Subprocess> peers;
  for (int r : {0, 1, 3}) peers.push_back(start(r));
  REQUIRE(waitFor(
      [&] {
        const auto rounds = recordRounds(out + "/peer-0.jsonl");
        return !rounds.empty() && rounds.back() >= 300;
      },
      std::chrono::seconds(300)));
  peers.push_back(start(2));
  for (auto& p : peers) {
    auto st = p.waitUntil(Clock::now() + std::chrono::seconds(300));
    REQUIRE(st.isOk());
    CHECK(WIFEXITED(*st));
    CHECK(WEXITSTATUS(*st) == 0);
  }
  std::string logs;
  for (int r = 0; r < 4; ++r) logs += readFile(dir + "/peer-" + std::to_string(r) + ".out");
  INFO(logs);
  for (int r : {1, 3}) {
    INFO("peer " << r);
    CHECK(readFile(dir + "/peer-" + std::to_string(r) + ".out")
              .find("starting without neighbour 2") != std::string::npos);
    const auto final =
        nlohmann::json::parse(readFile(out + "/peer-" + std::to_string(r) + ".final.json"));
    CHECK(final.value("finished", false));
    CHECK(final.value("rejoined_neighbours", 0) == 1);
    CHECK(final.value("replica_mismatches", -1) == 0);
  }
  const auto late = nlohmann::json::parse(readFile(out + "/peer-2.final.json"));
  CHECK(late.value("finished", false));
  CHECK(late.value("rounds", 0) == 3000);
  CHECK(late.value("rounds_skipped", 0) > 0);
  CHECK(late.value("replica_mismatches", -1) == 0);
  const int from = late.value("state_from_neighbour", -1);
  CHECK((from == 1 || from == 3));
}

TEST_CASE("a peer resumed after its neighbours finished trains on alone from its checkpoint",
          "[lifecycle][rejoin]") {
  // A 3-peer CHOCO ring runs to its end, with checkpoints. Then peer 1 is started again with
  // --resume, as `launch --max-restarts` does when it crashed just as the others finished: nobody
  // will connect. Told so by SIGUSR1 (launch's tellAlone; sent until it exits, as launch does),
  // it does not wait out peers.connect_timeout (120 s): it restores its own newest checkpoint and
  // trains the remaining rounds alone, instead of failing the bootstrap. Without the signal it
  // would do the same after connect_timeout (BootstrapOptions::completeAlone).
  const std::string dir = freshDir("lifecycle_alone");
  const int port = freeBasePort(3);
  const std::string config = dir + "/alone.yaml";
  std::ofstream(config)
      << "run: { name: alone, seed: 2, rounds: 400 }\n"
         "peers: { count: 3, host: 127.0.0.1, base_port: "
      << port
      << ", connect_timeout: 120 }\n"
         "topology: { kind: ring }\n"
         "transport: { backend: tcp }\n"
         "algorithm: { name: choco, consensus_step: 0.3 }\n"
         "optimizer: { lr: 0.05, batch_size: 16 }\n"
         "compression: { method: top-k, ratio: 0.1 }\n"
         "workload: { name: fashion-mnist-mlp, hidden: [16], eval_every: 0, eval_samples: 500 }\n"
         "checkpoint: { every: 50, keep: 3 }\n"
         "output: { log_every: 10 }\n";
  const std::string out = dir + "/out";
  {
    grapevine::SpawnOptions spawn;
    spawn.argv = {kBin, "launch", config, "--out", out, "--quiet"};
    spawn.out = grapevine::ChildStream::file(dir + "/launch.out");
    spawn.err = grapevine::ChildStream::sameAsStdout();
    auto launch = grapevine::Subprocess::spawn(spawn);
    REQUIRE(launch.isOk());
    const auto st = launch->waitUntil(Clock::now() + std::chrono::seconds(300));
    INFO(readFile(dir + "/launch.out"));
    REQUIRE(st.isOk());
    REQUIRE(WIFEXITED(*st));
    REQUIRE(WEXITSTATUS(*st) == 0);
  }
  // Its checkpoint of round 299 stands for one taken just before a crash near the end.
  const std::string folder = out + "/checkpoints/rank-1";
  std::filesystem::remove(grapevine::engine::checkpointPath(folder, 349));
  std::filesystem::remove(grapevine::engine::checkpointPath(folder, 399));
  REQUIRE(std::filesystem::exists(grapevine::engine::checkpointPath(folder, 299)));

  grapevine::SpawnOptions spawn;
  spawn.argv = {kBin, "peer", config, "--rank", "1", "--resume", "--out", out};
  spawn.out = grapevine::ChildStream::file(dir + "/peer-1.out");
  spawn.err = grapevine::ChildStream::sameAsStdout();
  // Ignored from the fork on (as launch does): a signal before its handler is installed is lost,
  // not fatal.
  ::signal(SIGUSR1, SIG_IGN);
  auto p = grapevine::Subprocess::spawn(spawn);
  REQUIRE(p.isOk());
  const auto started = Clock::now();
  std::optional<int> status;
  REQUIRE(waitFor(
      [&] {
        p->signal(SIGUSR1);
        auto st = p->waitUntil(Clock::now() + std::chrono::milliseconds(200));
        if (st.isOk()) status = *st;
        return status.has_value();
      },
      std::chrono::seconds(300)));
  WARN("the resumed peer finished alone " << secondsSince(started) << " s after its start");
  const std::string log = readFile(dir + "/peer-1.out");
  INFO(log);
  CHECK(WIFEXITED(*status));
  CHECK(WEXITSTATUS(*status) == 0);
  CHECK(log.find("not waited for (told that it will not come)") != std::string::npos);
  CHECK(log.find("training on alone from this peer's own checkpoint") != std::string::npos);
  const auto final = nlohmann::json::parse(readFile(out + "/peer-1.final.json"));
  CHECK(final.value("finished", false));
  CHECK(final.value("rounds", 0) == 400);
  CHECK(final.value("resumed_from_round", -1) == 299);
}

namespace {

// 4 peers over tcp on a ring, the Fashion-MNIST MLP, CHOCO + top-10%: a few seconds for 3000
// rounds here. `extra` is appended (faults:, checkpoint:).
std::string supervisedConfig(const std::string& dir, int port, const std::string& extra) {
  const std::string path = dir + "/supervised.yaml";
  std::ofstream(path) << "run: { name: supervised, seed: 3, rounds: 3000 }\n"
                         "peers: { count: 4, host: 127.0.0.1, base_port: "
                      << port
                      << " }\n"
                         "topology: { kind: ring }\n"
                         "transport: { backend: tcp }\n"
                         "algorithm: { name: choco, consensus_step: 0.3 }\n"
                         "compression: { method: top-k, ratio: 0.1 }\n"
                         "optimizer: { lr: 0.05, batch_size: 32 }\n"
                         "workload: { name: fashion-mnist-mlp, hidden: [16], eval_every: 0, "
                         "eval_samples: 500 }\n"
                         "output: { log_every: 10 }\n"
                      << extra;
  return path;
}

// OUT/peer-<rank>.final.json.
nlohmann::json peerFinal(const std::string& out, int rank) {
  return nlohmann::json::parse(readFile(out + "/peer-" + std::to_string(rank) + ".final.json"));
}

// The lists a peer's records hold under `key` (dead, rejoined, ...), in order, flattened.
std::vector<int> recordedRanks(const std::string& path, const std::string& key) {
  std::vector<int> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_object() && j.contains(key))
      for (int r : j[key]) out.push_back(r);
  }
  return out;
}

// `argv` started with its stdout and stderr into `log`.
grapevine::Result<grapevine::Subprocess> spawnLogged(std::vector<std::string> argv,
                                                     const std::string& log) {
  grapevine::SpawnOptions spawn;
  spawn.argv = std::move(argv);
  spawn.out = grapevine::ChildStream::file(log);
  spawn.err = grapevine::ChildStream::sameAsStdout();
  return grapevine::Subprocess::spawn(spawn);
}

}  // namespace

TEST_CASE("launch --max-restarts, default scope: only the killed peer restarts, and rejoins",
          "[supervision]") {
  // The default --restart-scope peer: the launcher starts the SIGKILLed peer again with --resume,
  // the three others train on in the same processes, the neighbours drop it and take it back
  // (dead, then rejoined) and the run ends with 4 of 4 finished and the models mixed together.
  // Broken restarts (none, or the whole run) or a rejoin that never completes fail it.
  const std::string dir = freshDir("lifecycle_restart_peer");
  const int port = freeBasePort(4);
  const std::string config = supervisedConfig(dir, port, "checkpoint: { every: 50, keep: 3 }\n");
  const std::string out = dir + "/out";
  auto launcher =
      spawnLogged({kBin, "launch", config, "--out", out, "--quiet", "--max-restarts", "2"},
                  dir + "/launch.log");
  REQUIRE(launcher.isOk());
  const auto peerPid = [&](int rank) { return peerOf(launcher->pid(), rank); };
  // Past round 300 with every peer's checkpoint of round 249 on disk.
  REQUIRE(waitFor(
      [&] {
        const auto rounds = recordRounds(out + "/peer-0.jsonl");
        return !rounds.empty() && rounds.back() >= 300 && checkpointed(out, 4, 249) &&
               peerPid(2) > 0;
      },
      std::chrono::seconds(300)));
  std::map<int, pid_t> others;
  for (int r : {0, 1, 3}) others[r] = peerPid(r);
  const pid_t victim = peerPid(2);
  REQUIRE(kill(victim, SIGKILL) == 0);
  const int code = finishLaunch(*launcher);
  const std::string log = readFile(dir + "/launch.log");
  INFO(log);
  REQUIRE(code == 0);
  CHECK(log.find("peer 2 was killed by signal") != std::string::npos);
  CHECK(log.find("restarting it with --resume (restart 1 of 2)") != std::string::npos);
  const auto s = readSummary(out);
  INFO(s.dump());
  CHECK(s.value("restarts", -1) == 1);
  CHECK(s.value("peers_finished", 0) == 4);
  CHECK(s.value("failed_peers", -1) == 0);
  // Mixed together after the rejoin: a peer left out would stay ~1e-2 away (consensus_step 0).
  CHECK(s.value("consensus_distance_final", 1.0) < 1e-3);
  for (int r = 0; r < 4; ++r) {
    INFO("peer " << r);
    const auto final = peerFinal(out, r);
    CHECK(final.value("finished", false));
    CHECK(final.value("rounds", 0) == 3000);
    if (r == 2) {
      CHECK(final.value("resumed_from_round", std::int64_t{-1}) >= 249);
    } else {
      CHECK_FALSE(final.contains("resumed_from_round"));  // never restarted: its own process
      CHECK(others[r] > 0);
    }
  }
  // The neighbours dropped it and took it back; peer 0 (not a neighbour) neither.
  for (int r : {1, 3}) {
    INFO("neighbour " << r);
    const std::string records = out + "/peer-" + std::to_string(r) + ".jsonl";
    CHECK(recordedRanks(records, "dead") == std::vector<int>{2});
    CHECK(recordedRanks(records, "rejoined") == std::vector<int>{2});
  }
  CHECK(recordedRanks(out + "/peer-0.jsonl", "dead").empty());
}

TEST_CASE("a fault schedule's kill under launch: the peer is gone for good, the others finish",
          "[supervision]") {
  // faults: kind kill at 1 s: the launcher SIGKILLs peer 2 (no restart: not a crash), its
  // neighbours declare it dead, the other three finish and mix without it. A schedule that is
  // not executed, or a kill that is restarted, fails it.
  const std::string dir = freshDir("lifecycle_fault_kill");
  const int port = freeBasePort(4);
  const std::string config =
      supervisedConfig(dir, port, "faults: [{ kind: kill, peer: 2, at_seconds: 1 }]\n");
  const std::string out = dir + "/out";
  auto launcher = spawnLogged({kBin, "launch", config, "--out", out, "--max-restarts", "2"},
                              dir + "/launch.log");
  REQUIRE(launcher.isOk());
  const int code = finishLaunch(*launcher);
  const std::string log = readFile(dir + "/launch.log");
  INFO(log);
  CHECK(code == 0);
  CHECK(log.find("fault (kill peer 2 at 1 s): peer 2 SIGKILLed") != std::string::npos);
  CHECK(log.find("restarting") == std::string::npos);
  const auto s = readSummary(out);
  INFO(s.dump());
  REQUIRE(s["faults"].size() == 1);
  CHECK(s["faults"][0]["kind"] == "kill");
  CHECK(s["faults"][0]["peer"] == 2);
  CHECK(s["faults"][0]["executed_at"].get<double>() >= 1.0);
  CHECK(s.value("peers_finished", 0) == 3);
  CHECK(s.value("failed_peers", -1) == 1);
  CHECK(s.value("restarts", 0) == 0);
  CHECK(s.value("consensus_distance_final", 1.0) < 1e-3);  // the three still mixed
  // It stopped mid-run and left no results; its neighbours declared it dead, once.
  const auto rounds = recordRounds(out + "/peer-2.jsonl");
  CHECK((rounds.empty() || rounds.back() < 2999));
  CHECK_FALSE(std::filesystem::exists(out + "/peer-2.final.json"));
  CHECK_FALSE(std::filesystem::exists(out + "/model-2.bin"));
  for (int r : {1, 3}) {
    INFO("neighbour " << r);
    CHECK(recordedRanks(out + "/peer-" + std::to_string(r) + ".jsonl", "dead") ==
          std::vector<int>{2});
  }
}

TEST_CASE("a fault schedule's corrupt under launch: the neighbours quarantine the peer",
          "[supervision]") {
  // faults: kind corrupt at 1 s: peer 2 damages every message it sends after its checksum (the
  // peer executes it by its own clock). Peers 1 and 3 refuse them (crc) and after 16 rounds in a
  // row quarantine it through the driver: the edge closed for good, a log line, `quarantined` in
  // final.json, a death in the records; the run goes on. A bypassed quarantine, or a driver that
  // does not close the edge, fails it. round_timeout 0.1 s: a round without a usable message from
  // peer 2 does not wait 5 s.
  const std::string dir = freshDir("lifecycle_fault_corrupt");
  const int port = freeBasePort(4);
  std::string config = supervisedConfig(
      dir, port, "faults: [{ kind: corrupt, peer: 2, at_seconds: 1, seconds: 60 }]\n");
  {
    std::string text = readFile(config);
    const std::string from = "consensus_step: 0.3 }";
    REQUIRE(text.find(from) != std::string::npos);
    text.replace(text.find(from), from.size(), "consensus_step: 0.3, round_timeout: 0.1 }");
    std::ofstream(config) << text;
  }
  const std::string out = dir + "/out";
  auto launcher = spawnLogged({kBin, "launch", config, "--out", out}, dir + "/launch.log");
  REQUIRE(launcher.isOk());
  const int code = finishLaunch(*launcher);
  const std::string log = readFile(dir + "/launch.log");
  INFO(log);
  CHECK(code == 0);
  CHECK(log.find("fault (corrupt peer 2 at 1 s for 60 s): peer 2 corrupts its outgoing messages") !=
        std::string::npos);
  CHECK(readFile(out + "/peer-2.log").find("this peer's outgoing messages are corrupted") !=
        std::string::npos);
  const auto s = readSummary(out);
  INFO(s.dump());
  REQUIRE(s["faults"].size() == 1);
  CHECK(s["faults"][0]["kind"] == "corrupt");
  CHECK(s.value("peers_finished", 0) == 4);
  for (int r : {1, 3}) {
    INFO("neighbour " << r);
    const std::string rank = std::to_string(r);
    const auto final = peerFinal(out, r);
    CHECK(final.value("quarantined", 0) == 1);
    CHECK(readFile(out + "/peer-" + rank + ".log")
              .find("neighbour 2 quarantined: its messages were refused in 16 rounds in a row "
                    "(the last: crc)") != std::string::npos);
    CHECK(recordedRanks(out + "/peer-" + rank + ".jsonl", "dead") == std::vector<int>{2});
  }
  for (int r : {0, 2}) {
    INFO("peer " << r);
    const auto final = peerFinal(out, r);
    CHECK_FALSE(final.contains("quarantined"));
  }
  // Peer 2 was cut off by both neighbours (they closed the edges): it trained on alone.
  const auto last = recordRounds(out + "/peer-2.jsonl");
  CHECK((!last.empty() && last.back() == 2999));
  // It loses both neighbours. (It is not told why: it redials, each neighbour refuses it again,
  // and it records each loss; 328 in one run. Reported, not asserted.)
  const auto lost = recordedRanks(out + "/peer-2.jsonl", "dead");
  CHECK(std::set<int>(lost.begin(), lost.end()) == std::set<int>{1, 3});
  WARN("peer 2 recorded " << lost.size() << " losses of its neighbours after the quarantine");
}

namespace {

// supervisedConfig with `extra` and `robustKeys` ("robust: clip, ...") in its algorithm line.
std::string attackConfig(const std::string& dir, int port, const std::string& extra,
                         const std::string& robustKeys) {
  const std::string path = supervisedConfig(dir, port, extra);
  std::string text = readFile(path);
  const std::string from = "consensus_step: 0.3 }";
  const auto at = text.find(from);
  REQUIRE(at != std::string::npos);
  text.replace(at, from.size(), "consensus_step: 0.3, " + robustKeys + " }");
  std::ofstream(path) << text;
  return path;
}

// The mean test accuracy of `config` without its faults (last key), in the simulator.
double cleanSimAccuracy(const std::string& config, const std::string& dir) {
  std::string clean = readFile(config);
  clean.replace(clean.find("faults:"), std::string::npos, "");
  const std::string cleanPath = dir + "/clean.yaml";
  std::ofstream(cleanPath) << clean;
  auto sim = spawnLogged({kBin, "sim", cleanPath, "--out", dir + "/clean"}, dir + "/clean.log");
  REQUIRE(sim.isOk());
  REQUIRE(sim->wait() == 0);
  return readSummary(dir + "/clean").value("test_accuracy_mean", 1.0);
}

}  // namespace

TEST_CASE(
    "an attacking peer under launch: robust mixing clips it and its neighbours quarantine "
    "it",
    "[supervision]") {
  // Issue 43, real processes over tcp: peer 2 of a 4-peer ring flips the sign of the model it
  // publishes from its first round (faults: sign-flip, executed by the peer itself); with
  // algorithm.robust: clip peers 1 and 3 clip its differences, distrust it within about 32 rounds
  // and quarantine it (log line, final.json, summary), and the honest peers train on: their mean
  // accuracy is within 2 points of the same config's clean run in the simulator. Plain mixing of
  // the same attack diverges (configs/sweeps/robust.yaml: ring/none, sign-flip).
  const std::string dir = freshDir("lifecycle_attack_clip");
  const int port = freeBasePort(12);
  const int metricsPort = port + 8;
  const std::string config = attackConfig(
      dir, port,
      "faults: [{ kind: sign-flip, peer: 2, at_seconds: 0 }]\nmonitoring: { prometheus_port: " +
          std::to_string(metricsPort) + " }\n",
      "robust: clip");
  const std::string out = dir + "/out";
  auto launcher = spawnLogged({kBin, "launch", config, "--out", out}, dir + "/launch.log");
  REQUIRE(launcher.isOk());
  // Once peer 1 quarantined it (about round 35 of 3000), its metrics say so: scraped while it runs.
  std::optional<grapevine::test_util::Scrape> metrics;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (!metrics && std::chrono::steady_clock::now() < deadline) {
    if (readFile(out + "/peer-1.log").find("neighbour 2 quarantined") != std::string::npos) {
      if (auto body = grapevine::test_util::httpGet(metricsPort + 1))
        metrics = grapevine::test_util::parse(*body);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const int code = finishLaunch(*launcher);
  const std::string log = readFile(dir + "/launch.log");
  INFO(log);
  REQUIRE(metrics);
  CHECK(metrics->value("grapevine_neighbour_suspicion", {{"neighbour", "2"}}) >= 0.5);
  CHECK(metrics->value("grapevine_neighbour_suspicion", {{"neighbour", "0"}}) < 0.1);
  CHECK(metrics->value("grapevine_neighbour_clipped_rounds_total", {{"neighbour", "2"}}) >= 30);
  CHECK(metrics->types.at("grapevine_neighbour_clipped_rounds_total") == "counter");
  CHECK(code == 0);
  CHECK(log.find("fault (sign-flip peer 2 at 0 s (scale 1) for the rest of the run): peer 2 "
                 "attacks (sign-flip)") != std::string::npos);
  CHECK(readFile(out + "/peer-2.log").find("this peer attacks from round 0") != std::string::npos);
  const auto s = readSummary(out);
  INFO(s.dump());
  CHECK(s["attackers"] == nlohmann::json::array({2}));
  CHECK(s["quarantined_by_trust"] ==
        nlohmann::json::parse(R"([{"peer": 1, "neighbour": 2}, {"peer": 3, "neighbour": 2}])"));
  CHECK(s.value("peers_finished", 0) == 4);
  for (int r : {1, 3}) {
    INFO("neighbour " << r);
    const std::string rank = std::to_string(r);
    const auto final = peerFinal(out, r);
    CHECK(final.value("quarantined", 0) == 1);
    bool seen = false;
    for (const auto& t : final["neighbour_trust"]) {
      if (t["neighbour"] != 2) continue;
      seen = true;
      CHECK(t["quarantined"] == true);
      CHECK(t["rounds_mixed"].get<int>() < 60);  // distrusted within its first rounds
    }
    CHECK(seen);
    CHECK(readFile(out + "/peer-" + rank + ".log")
              .find("neighbour 2 quarantined: its messages lay beyond the robust mixing radius") !=
          std::string::npos);
    CHECK(recordedRanks(out + "/peer-" + rank + ".jsonl", "dead") == std::vector<int>{2});
  }
  const double honest = s.value("honest_test_accuracy_mean", 0.0);
  const double clean = cleanSimAccuracy(config, dir);
  INFO("honest " << honest << ", clean " << clean);
  CHECK(honest > clean - 0.02);
}

TEST_CASE("trust survives a restart: a resumed peer quarantines the attacker again at once",
          "[supervision]") {
  // Robust mixing's trust is in the checkpoint: peer 1 quarantined the sign-flipping peer 2, is
  // SIGKILLed after a checkpoint of round 249 or later and restarted by the launcher (--resume);
  // when 2 connects again its first mixed message is weighed 0 and 2 is quarantined again in that
  // round, not after 32 more (trust lost with the process would take it back and measure it
  // afresh).
  const std::string dir = freshDir("lifecycle_attack_restart");
  const std::string config = attackConfig(dir, freeBasePort(4),
                                          "faults: [{ kind: sign-flip, peer: 2, at_seconds: 0 }]\n"
                                          "checkpoint: { every: 50, keep: 3 }\n",
                                          "robust: clip");
  const std::string out = dir + "/out";
  auto launcher =
      spawnLogged({kBin, "launch", config, "--out", out, "--quiet", "--max-restarts", "2"},
                  dir + "/launch.log");
  REQUIRE(launcher.isOk());
  REQUIRE(waitFor(
      [&] {
        const auto rounds = recordRounds(out + "/peer-1.jsonl");
        const auto saved = grapevine::engine::checkpointRounds(out + "/checkpoints/rank-1");
        return !rounds.empty() && rounds.back() >= 300 && !saved.empty() && saved.back() >= 249 &&
               peerOf(launcher->pid(), 1) > 0 &&
               readFile(out + "/peer-1.log").find("neighbour 2 quarantined") != std::string::npos;
      },
      std::chrono::seconds(300)));
  REQUIRE(kill(peerOf(launcher->pid(), 1), SIGKILL) == 0);
  const int code = finishLaunch(*launcher);
  INFO(readFile(dir + "/launch.log"));
  CHECK(code == 0);
  const std::string log = readFile(out + "/peer-1.log");
  INFO(log);
  CHECK(log.find("neighbour 2 quarantined again: this peer had quarantined it before its "
                 "restart") != std::string::npos);
  const auto final = peerFinal(out, 1);
  CHECK(final.value("resumed_from_round", std::int64_t{-1}) >= 249);
  bool seen = false;
  for (const auto& t : final["neighbour_trust"]) {
    if (t["neighbour"] != 2) continue;
    seen = true;
    CHECK(t["quarantined"] == true);
    CHECK(t["rounds_mixed"].get<int>() < 60);  // none mixed since: the counts went on
  }
  CHECK(seen);
  const auto s = readSummary(out);
  INFO(s.dump());
  CHECK(s["quarantined_by_trust"] ==
        nlohmann::json::parse(R"([{"peer": 1, "neighbour": 2}, {"peer": 3, "neighbour": 2}])"));
  CHECK(s.value("peers_finished", 0) == 4);
}

TEST_CASE("a replaying peer under launch: loss screening catches what distance misses",
          "[supervision]") {
  // Issue 43, real processes over tcp: peer 2 of a 4-peer ring publishes the initial model from
  // its first round (faults: replay). Its distance does not stand out (it drags its neighbours
  // along); with algorithm.robust_probe its model's loss on peers 1's and 3's own shards is far
  // above theirs, and they quarantine it (log line, final.json, summary); the honest peers end
  // within 2 points of the clean run.
  const std::string dir = freshDir("lifecycle_attack_replay");
  const std::string config =
      attackConfig(dir, freeBasePort(8), "faults: [{ kind: replay, peer: 2, at_seconds: 0 }]\n",
                   "robust: clip, robust_probe: 64");
  const std::string out = dir + "/out";
  auto launcher = spawnLogged({kBin, "launch", config, "--out", out}, dir + "/launch.log");
  REQUIRE(launcher.isOk());
  const int code = finishLaunch(*launcher);
  INFO(readFile(dir + "/launch.log"));
  CHECK(code == 0);
  const auto s = readSummary(out);
  INFO(s.dump());
  CHECK(s["attackers"] == nlohmann::json::array({2}));
  CHECK(s["quarantined_by_trust"] ==
        nlohmann::json::parse(R"([{"peer": 1, "neighbour": 2}, {"peer": 3, "neighbour": 2}])"));
  for (int r : {1, 3}) {
    INFO("neighbour " << r);
    for (const auto& t : peerFinal(out, r)["neighbour_trust"]) {
      if (t["neighbour"] != 2) continue;
      CHECK(t["quarantined"] == true);
      CHECK(t["rounds_loss_flagged"].get<int>() >= 16);
    }
    CHECK(readFile(out + "/peer-" + std::to_string(r) + ".log")
              .find("its model's loss on this peer's probe beyond 1.5x its own") !=
          std::string::npos);
  }
  const double honest = s.value("honest_test_accuracy_mean", 0.0);
  const double clean = cleanSimAccuracy(config, dir);
  INFO("honest " << honest << ", clean " << clean);
  CHECK(honest > clean - 0.02);
}

TEST_CASE("rejoins free what the old edge held: the survivor's memory does not grow with them",
          "[supervision]") {
  // Issue 41: every rejoin leaked about 6 copies of the model (the receive buffers of the replaced
  // connection were kept until the process ended, among others). Rank 1 of a 2-peer run is killed
  // again and again (the launcher restarts it, it rejoins): 50 rejoins, and rank 0's resident
  // memory grows by less than half a model copy over rejoins 4-27 or over rejoins 27-50. The
  // automatic consensus step: a fixed 0.2 with top-1% never reaches consensus here (public lag
  // ~0.9, consensus distance ~0.25 for 4000 undisturbed rounds), and kills every 2.5 s pushed it
  // to divergence within 2,000 rounds; with `auto` 12 such kills end at consensus 1e-15.
  const std::string dir = freshDir("lifecycle_rejoin_memory");
  const int port = freeBasePort(4);
  const std::string config = dir + "/two.yaml";
  constexpr double kModelBytes = 1'000'000 * 4.0;
  std::ofstream(config) << "run: { name: rejoins, seed: 1, rounds: 1000000 }\n"
                           "peers: { count: 2, host: 127.0.0.1, base_port: "
                        << port
                        << " }\n"
                           "topology: { kind: ring }\n"
                           "transport: { backend: tcp }\n"
                           "algorithm: { name: choco, consensus_step: auto }\n"
                           "compression: { method: top-k, ratio: 0.01 }\n"
                           "workload: { name: consensus, dim: 1000000 }\n"
                           "checkpoint: { every: 20, keep: 2 }\n"
                           "output: { log_every: 10 }\n";
  const std::string out = dir + "/out";
  auto launcher =
      spawnLogged({kBin, "launch", config, "--out", out, "--quiet", "--max-restarts", "100"},
                  dir + "/launch.log");
  REQUIRE(launcher.isOk());
  const auto peerPid = [&](int rank) { return peerOf(launcher->pid(), rank); };
  const auto rejoins = [&] { return recordedRanks(out + "/peer-0.jsonl", "rejoined").size(); };
  const auto rss = [&] {
    const std::string status = readFile("/proc/" + std::to_string(peerPid(0)) + "/status");
    const auto at = status.find("VmRSS:");
    return at == std::string::npos ? 0.0 : std::stod(status.substr(at + 6)) * 1024.0;
  };
  REQUIRE(waitFor([&] { return !recordRounds(out + "/peer-0.jsonl").empty() && peerPid(1) > 0; },
                  std::chrono::seconds(120)));
  double warm = 0, mid = 0, last = 0;
  constexpr std::size_t kRejoins = 50, kWarm = 4, kMid = (kWarm + kRejoins) / 2;
  for (std::size_t k = 1; k <= kRejoins; ++k) {
    const pid_t victim = peerPid(1);
    REQUIRE(victim > 0);
    REQUIRE(kill(victim, SIGKILL) == 0);
    INFO("rejoin " << k << "; " << readFile(dir + "/launch.log"));
    REQUIRE(waitFor([&] { return rejoins() >= k; }, std::chrono::seconds(120)));
    // A few rounds after the rejoin (its resyncs done), with the restarted peer running.
    const auto at = recordRounds(out + "/peer-0.jsonl").back();
    REQUIRE(waitFor(
        [&] {
          const auto rounds = recordRounds(out + "/peer-0.jsonl");
          return rounds.back() >= at + 30 && peerPid(1) > 0;
        },
        std::chrono::seconds(120)));
    last = rss();
    if (k == kWarm) warm = last;
    if (k == kMid) mid = last;
  }
  kill(launcher->pid(), SIGINT);
  finishLaunch(*launcher);
  WARN("rank 0 resident memory after rejoin " << kWarm << ": " << warm / 1e6 << " MB, " << kMid
                                              << ": " << mid / 1e6 << " MB, " << kRejoins << ": "
                                              << last / 1e6 << " MB");
  CHECK(warm > 0);
  // What recurs with rejoins grows both halves (rejoins 4-27 and 27-50): the smaller half's
  // growth under half a model copy bounds a leak per rejoin to 1/46 of a copy. A one-time
  // allocation (once in CI under load: one model copy between rejoins 4 and 20, 74.8 -> 78.9 MB)
  // grows one half only.
  CHECK(std::min(mid - warm, last - mid) < kModelBytes / 2);
}
