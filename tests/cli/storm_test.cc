// A connection storm against training peers (issue 16, docs/security.md "Bounds"): two peer
// processes over tcp, each limited to 256 descriptors (RLIMIT_NOFILE, set in the child), train
// while this test opens 2000 connections to every port they listen on (half-open ones that never
// send, ones that send garbage, ones that send a valid tcp data hello claiming a rank). Both must
// finish with the same models, byte for byte, as an undisturbed run; their open descriptors stay
// below the count before the storm + 64; and their CPU time (both processes, from the kernel's
// accounting of reaped children) stays within a generous multiple of the undisturbed run's (an
// accept loop spinning on EMFILE would burn a core). The waits are on progress (records, exits);
// the measured figures are printed.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "runtime/common/subprocess.h"
#include "tests/test_util/cli.h"
#include "tests/test_util/ports.h"
#include "tests/test_util/quadratic.h"
#include "tests/test_util/skip.h"

namespace {

using Clock = std::chrono::steady_clock;
using grapevine::test_util::readFile;
const std::string kBin = grapevine::test_util::grapevineBin();

constexpr int kStormPerPort = 2000;
constexpr rlim_t kPeerFiles = 256;

// The process's open descriptors now (-1 when it is gone).
int openFds(pid_t pid) {
  std::error_code ec;
  int n = 0;
  for (auto it = std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    ++n;
  }
  return ec ? -1 : n;
}

// The TCP ports `pid` listens on: its socket inodes (/proc/PID/fd) in the LISTEN state (0A) of
// /proc/PID/net/tcp{,6}.
std::vector<int> listeningPorts(pid_t pid) {
  const std::string proc = "/proc/" + std::to_string(pid);
  std::set<std::string> inodes;
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator(proc + "/fd", ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    const std::string target = std::filesystem::read_symlink(it->path(), ec).string();
    if (!ec && target.rfind("socket:[", 0) == 0) inodes.insert(target.substr(8, target.size() - 9));
    ec.clear();
  }
  std::set<int> ports;
  for (const char* table : {"/net/tcp", "/net/tcp6"}) {
    std::istringstream in(readFile(proc + table));
    std::string line;
    std::getline(in, line);  // header
    while (std::getline(in, line)) {
      std::istringstream f(line);
      std::string sl, local, remote, state, queues, timer, retr, uid, timeout, inode;
      f >> sl >> local >> remote >> state >> queues >> timer >> retr >> uid >> timeout >> inode;
      if (state != "0A" || !inodes.count(inode)) continue;
      ports.insert(std::stoi(local.substr(local.find(':') + 1), nullptr, 16));
    }
  }
  return {ports.begin(), ports.end()};
}

bool alive(pid_t pid) {
  const std::string stat = readFile("/proc/" + std::to_string(pid) + "/stat");
  const auto close = stat.rfind(')');
  char state = 0;
  return close != std::string::npos && std::sscanf(stat.c_str() + close + 1, " %c", &state) == 1 &&
         state != 'Z' && state != 'X';
}

double childrenCpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_CHILDREN, &u);
  return u.ru_utime.tv_sec + u.ru_utime.tv_usec * 1e-6 + u.ru_stime.tv_sec +
         u.ru_stime.tv_usec * 1e-6;
}

// One storm connection to 127.0.0.1:port, by kind: 0 half-open (sends nothing), 1 garbage, 2 a
// valid tcp data hello ("GVTD", version 1) claiming rank `i % 3`. Non-blocking; -1 if refused.
int stormConnect(int port, int kind, int i) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  if (fd < 0) return -1;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 && errno != EINPROGRESS) {
    ::close(fd);
    return -1;
  }
  // Loopback connects complete at once; a send that finds it still in progress is just lost.
  if (kind == 1) {
    std::uint8_t junk[64];
    for (std::size_t k = 0; k < sizeof junk; ++k) junk[k] = static_cast<std::uint8_t>(k * 37 + i);
    (void)!::send(fd, junk, sizeof junk, MSG_NOSIGNAL);
  } else if (kind == 2) {
    std::uint8_t hello[16] = {'G', 'V', 'T', 'D', 1, 0};
    hello[8] = static_cast<std::uint8_t>(i % 3);
    (void)!::send(fd, hello, sizeof hello, MSG_NOSIGNAL);
  }
  return fd;
}

struct Outcome {
  std::vector<std::string> models;  // model-<rank>.bin
  double cpuSeconds = 0;            // both peer processes
  std::vector<int> fdsBefore, fdsMax;
  int stormConnections = 0;
};

Outcome runPeers(const std::string& dir, const std::string& name, bool storm) {
  Outcome o;
  const std::string out = dir + "/" + name;
  const int port = grapevine::test_util::freeBasePort(2);
  const double cpuStart = childrenCpuSeconds();
  std::vector<grapevine::Subprocess> peers;
  for (int r = 0; r < 2; ++r) {
    grapevine::SpawnOptions spawn;
    spawn.argv = {kBin,
                  "peer",
                  dir + "/config.yaml",
                  "--rank",
                  std::to_string(r),
                  "--out",
                  out,
                  "--set",
                  "peers.base_port=" + std::to_string(port)};
    spawn.out = grapevine::ChildStream::file(dir + "/" + name + "-" + std::to_string(r) + ".log");
    spawn.err = grapevine::ChildStream::sameAsStdout();
    spawn.beforeExec = [] {
      const rlimit files{kPeerFiles, kPeerFiles};
      ::setrlimit(RLIMIT_NOFILE, &files);
    };
    auto p = grapevine::Subprocess::spawn(spawn);
    REQUIRE(p.isOk());
    peers.push_back(std::move(*p));
  }
  // Training has started at both (their first records are written).
  const auto deadline = Clock::now() + std::chrono::seconds(120);
  for (int r = 0; r < 2; ++r) {
    const std::string records = out + "/peer-" + std::to_string(r) + ".jsonl";
    while (readFile(records).empty() && Clock::now() < deadline && alive(peers[r].pid())) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    INFO(readFile(dir + "/" + name + "-" + std::to_string(r) + ".log"));
    REQUIRE(!readFile(records).empty());
  }
  for (auto& p : peers) {
    o.fdsBefore.push_back(openFds(p.pid()));
    o.fdsMax.push_back(o.fdsBefore.back());
  }
  if (storm) {
    std::vector<int> ports;
    for (auto& p : peers) {
      for (int q : listeningPorts(p.pid())) ports.push_back(q);
    }
    REQUIRE(!ports.empty());
    std::vector<int> held;  // kept open until the storm ends: half-open connections stay so
    for (int i = 0; i < kStormPerPort; ++i) {
      for (int q : ports) {
        const int fd = stormConnect(q, i % 3, i);
        if (fd >= 0) held.push_back(fd);
      }
      if (i % 50 == 0) {
        for (std::size_t r = 0; r < peers.size(); ++r) {
          o.fdsMax[r] = std::max(o.fdsMax[r], openFds(peers[r].pid()));
        }
      }
    }
    o.stormConnections = static_cast<int>(held.size());
    for (std::size_t r = 0; r < peers.size(); ++r) {
      o.fdsMax[r] = std::max(o.fdsMax[r], openFds(peers[r].pid()));
    }
    // The storm hit peers that were training: both were still running when it ended.
    const bool overlapped = alive(peers[0].pid()) && alive(peers[1].pid());
    for (int fd : held) ::close(fd);
    REQUIRE(overlapped);  // else raise run.rounds: the storm came after the run
  }
  for (int r = 0; r < 2; ++r) {
    auto st = peers[r].waitUntil(Clock::now() + std::chrono::seconds(300));
    INFO(readFile(dir + "/" + name + "-" + std::to_string(r) + ".log"));
    REQUIRE(st.isOk());
    CHECK(WIFEXITED(*st));
    CHECK(WEXITSTATUS(*st) == 0);
    o.models.push_back(readFile(out + "/model-" + std::to_string(r) + ".bin"));
    REQUIRE(!o.models.back().empty());
  }
  o.cpuSeconds = childrenCpuSeconds() - cpuStart;
  return o;
}

}  // namespace

TEST_CASE("a connection storm while 2 peers train: same models, bounded descriptors, idle loop",
          "[security][slow]") {
  // The storm needs far more descriptors than the default soft limit of this process.
  rlimit files{};
  REQUIRE(getrlimit(RLIMIT_NOFILE, &files) == 0);
  files.rlim_cur = files.rlim_max;
  REQUIRE(setrlimit(RLIMIT_NOFILE, &files) == 0);
  if (files.rlim_cur < 3 * kStormPerPort + 256) {
    GV_SKIP("RLIMIT_NOFILE " << files.rlim_cur << " is too low for the storm");
  }
  const std::string dir = grapevine::test_util::freshDir("storm_test");
  grapevine::test_util::writeQuadraticData(dir + "/quad2.json", 2, 20);
  std::ofstream(dir + "/config.yaml")
      << "run: { seed: 5, rounds: 20000 }\n"
         "peers: { count: 2, host: 127.0.0.1 }\n"
         "topology: { kind: ring }\n"
         "transport: { backend: tcp }\n"
         "workload: { name: quadratic, data: quad2.json }\n"
         "algorithm: { name: choco, consensus_step: 0.5, round_timeout: 120, check_every: 0 }\n"
         "compression: { method: int8 }\n"
         "optimizer: { lr: 0.01, momentum: 0.9, nesterov: false, schedule: constant }\n"
         "output: { log_every: 1 }\n";
  const Outcome calm = runPeers(dir, "calm", false);
  const Outcome storm = runPeers(dir, "storm", true);
  WARN("storm: " << storm.stormConnections << " connections; descriptors before/max: peer 0 "
                 << storm.fdsBefore[0] << "/" << storm.fdsMax[0] << ", peer 1 "
                 << storm.fdsBefore[1] << "/" << storm.fdsMax[1] << " (undisturbed max "
                 << calm.fdsMax[0] << ", " << calm.fdsMax[1] << "); CPU " << storm.cpuSeconds
                 << " s against " << calm.cpuSeconds << " s undisturbed");
  CHECK(storm.stormConnections >= kStormPerPort);
  for (int r = 0; r < 2; ++r) {
    CHECK(storm.models[r] == calm.models[r]);
    CHECK(storm.fdsMax[r] < storm.fdsBefore[r] + 64);
  }
  CHECK(storm.cpuSeconds < 3.0 * calm.cpuSeconds + 2.0);
}
