// `grapevine launch CONFIG [--out DIR] [-- COMMAND [ARGS...]]`: starts every peer whose host is
// local as a child process (`grapevine peer CONFIG --rank R`, or the user's COMMAND once per local
// rank), shows one live progress line, forwards SIGINT/SIGTERM, reports a peer that dies with its
// exit status and last log lines, and at the end prints a table and writes DIR/summary.json. With
// --emulate (or `network.emulate: netns`) every peer runs in its own network namespace behind the
// link emulator (runtime/netemu), listening on its namespace's address.
//
// A COMMAND is told its part through the environment (the launcher's contract with programs that
// use the API, include/grapevine/grapevine.hpp, which reads the same variables):
//   GRAPEVINE_CONFIG      DIR/config.resolved.yaml: the effective config (overrides, --out and the
//                         emulated addresses applied), written by launch before any command starts
//   GRAPEVINE_RANK        this process's rank
//   GRAPEVINE_WORLD_SIZE  peers.count
//   GRAPEVINE_OUT         DIR (absolute), where records, models and final results go
//   PYTHONPATH            the Python module's folder first (pythonModuleDir()), when it exists
// The progress line, the report of a dead peer and the summary read the files the API writes
// (peer-<rank>.jsonl, peer-<rank>.final.json, model-<rank>.bin), as for built-in peers.
#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <set>
#include <thread>

#include "runtime/common/group_guard.h"
#include "runtime/common/log.h"
#include "runtime/common/subprocess.h"
#include "runtime/config/loader.h"
#include "runtime/engine/summary.h"
#include "runtime/netemu/from_config.h"
#include "tools/grapevine/command.h"
#include "tools/grapevine/load_config.h"

namespace grapevine::cli {
namespace {

std::atomic<int> g_signal{0};
void onSignal(int sig) { g_signal = sig; }

struct LaunchArgs {
  std::string path;
  std::string out;
  std::vector<std::string> overrides;
  bool quiet = false;
  bool emulate = false;  // also on with network.emulate: netns
  int mtu = 9000;
  bool resume = false;                // every peer gets --resume
  int maxRestarts = 0;                // --max-restarts
  std::string restartScope = "peer";  // --restart-scope: peer (rejoin) | run (whole-run restart)
  // Everything after `--` (split off by main()): the program to start once per local rank
  // instead of `grapevine peer`.
  std::vector<std::string> command;
};

// The folder of the `grapevine` Python module that belongs to this binary, or "" when there is
// none: <bin>/../python in a build tree (build/bin/grapevine, build/python), or
// <prefix>/GRAPEVINE_INSTALL_PYTHONDIR (lib/grapevine/python, with the platform's lib folder) for
// an installed binary (<prefix>/bin/grapevine).
std::string pythonModuleDir(const std::filesystem::path& self) {
  const std::filesystem::path bin = self.parent_path();
  const std::filesystem::path installed = GRAPEVINE_INSTALL_PYTHONDIR;
  for (const auto& dir :
       {bin / ".." / "python", installed.is_absolute() ? installed : bin / ".." / installed}) {
    std::error_code ec;
    if (std::filesystem::is_directory(dir, ec)) {
      return std::filesystem::weakly_canonical(dir, ec).string();
    }
  }
  return "";
}

// `sh -c 'exec x'` as one line for the plan (each word shown; those with spaces quoted).
std::string commandText(const std::vector<std::string>& argv) {
  std::string out;
  for (const auto& a : argv) {
    if (!out.empty()) out += ' ';
    out += a.find_first_of(" \t'\"$") == std::string::npos ? a : "'" + a + "'";
  }
  return out;
}

std::set<std::string> localAddresses() {
  std::set<std::string> out = {"localhost", "127.0.0.1", "::1", "0.0.0.0"};
  char name[256] = {0};
  if (gethostname(name, sizeof name - 1) == 0) out.insert(name);
  ifaddrs* ifs = nullptr;
  if (getifaddrs(&ifs) == 0) {
    for (ifaddrs* i = ifs; i; i = i->ifa_next) {
      if (!i->ifa_addr) continue;
      char buf[INET6_ADDRSTRLEN] = {0};
      if (i->ifa_addr->sa_family == AF_INET) {
        inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr, buf, sizeof buf);
        out.insert(buf);
      } else if (i->ifa_addr->sa_family == AF_INET6) {
        inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(i->ifa_addr)->sin6_addr, buf,
                  sizeof buf);
        out.insert(buf);
      }
    }
    freeifaddrs(ifs);
  }
  return out;
}

bool isLocal(const std::string& host, const std::set<std::string>& local) {
  return local.count(host) || host.rfind("127.", 0) == 0;
}

struct Child {
  int rank = 0;
  pid_t pid = -1;
  bool running = false;
  int status = 0;
  std::string jsonl, log;
  std::streamoff offset = 0;
  nlohmann::json last;       // last record
  double accuracy = NAN;     // latest test accuracy seen in any record
  bool faultKilled = false;  // SIGKILLed by the fault schedule (faults.events): not a crash
  bool faultPaused = false;  // SIGSTOPped by the fault schedule, not yet continued
  // SIGKILLed by the fault schedule's restart: started again with --resume when the event ends
  // (it rejoins the running training); neither a crash nor a failure.
  bool faultRestarting = false;
  int faultRestarts = 0;      // times it was started again (a fault's restart, or a crash's)
  bool crashRestart = false;  // crashed; --restart-scope peer starts it again in watch()
  // The last SIGUSR1 of tellAlone (every other peer has exited); none yet: not told.
  std::optional<std::chrono::steady_clock::time_point> signalledAlone;
};

// One faults.events item as `launch` executes it (by wall time from the first round record).
struct FaultRun {
  config::FaultEvent event;
  bool started = false, ended = false;
  double startedAt = 0.0, endedAt = 0.0;  // seconds since the first round record
  // link-down: packets delivered on the link (both directions) when it went down and up again.
  std::uint64_t packetsAtDown = 0, packetsAtUp = 0;
};

std::string tail(const std::string& path, int lines) {
  std::ifstream in(path);
  std::vector<std::string> all;
  std::string line;
  while (std::getline(in, line)) all.push_back(line);
  std::string out;
  for (size_t i = all.size() > static_cast<size_t>(lines) ? all.size() - lines : 0; i < all.size();
       ++i) {
    out += "    " + all[i] + "\n";
  }
  return out;
}

void readNewRecords(Child& c) {
  std::ifstream in(c.jsonl);
  if (!in) return;
  in.seekg(c.offset);
  std::string line;
  while (std::getline(in, line)) {
    if (in.eof()) break;  // a partial line: read it next time
    c.offset = in.tellg();
    try {
      auto j = nlohmann::json::parse(line);
      if (j.contains("test_accuracy") && j["test_accuracy"].is_number()) {
        c.accuracy = j["test_accuracy"].get<double>();
      }
      if (j.contains("round")) c.last = std::move(j);
    } catch (const nlohmann::json::exception&) {
    }
  }
}

// Sum of the emulated links' counters, for the summary.
struct LinkTotals {
  std::uint64_t packets = 0, bytes = 0, droppedLoss = 0, droppedQueue = 0, droppedWrite = 0,
                droppedDown = 0;
  void add(const netemu::LinkStats& s) {
    droppedDown += s.droppedDown;
    packets += s.packets;
    bytes += s.bytes;
    droppedLoss += s.droppedLoss;
    droppedQueue += s.droppedQueue;
    droppedWrite += s.droppedWrite;
  }
};

// `pid` leads its process group once it has run setpgid (Subprocess, newProcessGroup); before
// that, only the process itself can be reached.
void signalGroup(pid_t pid, int sig) {
  // Never a pid that kill() reads as "every process" or "our own group" (-1, 0) or as init.
  if (pid <= 1) return;
  if (kill(-pid, sig) != 0) kill(pid, sig);
}

std::string describeStatus(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status))
    return std::string("was killed by signal ") + strsignal(WTERMSIG(status));
  return "stopped";
}

// One `grapevine launch`, step by step: plan (config, output folder, local peers), the emulated
// network if asked for, start the peers, watch them until all have exited, then the summary. Each
// step that can fail returns the command's exit code (kExitOk: go on). Single-threaded; the only
// asynchronous input is g_signal, set by the SIGINT/SIGTERM handler installed in startPeers().
class Launch {
 public:
  explicit Launch(const LaunchArgs& args) : args_(args) {}

  int plan();
  int startNetwork();  // no-op without --emulate / network.emulate: netns
  void printPlan() const;
  int startPeers();
  // Returns when every peer has exited (for good: with --max-restarts a crash restarts them all).
  int watch();
  int writeSummary();
  int exitCode() const;

 private:
  int reapExited();  // returns how many peers still run
  // --max-restarts: after a peer was killed by a signal, stops the others (SIGINT, SIGKILL after
  // 5 s) and, once none runs, starts every peer again with --resume. kExitOk or startPeers()'s
  // code.
  int restartIfDue(int running);
  // --restart-scope peer: starts the crashed peers again with --resume (they rejoin the running
  // training). kExitOk or spawnPeer()'s code.
  int restartCrashedPeers();
  void forwardSignal(int running);
  void showProgress(int running);
  // faults.events: executes what is due (SIGSTOP/SIGCONT, SIGKILL, emulated link down/up), once
  // the first round record of any peer appeared; says so on stdout.
  void runFaults();
  // A restart whose peer was killed but not reaped yet: its start waits for that.
  bool restartPending(const FaultRun& f) const {
    if (f.event.kind != config::FaultKind::kRestart) return false;
    for (const auto& c : children_) {
      if (c.rank == f.event.peer) return c.faultRestarting && c.running;
    }
    return false;
  }
  // Starts peer ch (again): its log is appended to after a restart. kExitOk or kExitFailure.
  int spawnPeer(Child& ch, const std::string& self, bool resuming);
  void tellAlone(int running);
  void faultAction(FaultRun& f, bool begin, double now);
  nlohmann::json faultsJson() const;  // before stopNetwork(): it reads the links' counters
  std::uint64_t linkPackets(int a, int b) const;
  std::string progressLine();    // reads the peers' new records
  nlohmann::json stopNetwork();  // the emulated links' totals (null without emulation)
  std::vector<engine::PeerResult> readResults() const;
  int writeResolvedConfig();  // DIR/config.resolved.yaml for a COMMAND (GRAPEVINE_CONFIG)
  std::vector<std::string> peerArgv(int rank, const std::string& self) const;
  std::vector<std::pair<std::string, std::string>> commandEnvironment(
      int rank, const std::string& self) const;
  std::string peerFile(int rank, const std::string& suffix) const {
    return out_ + "/peer-" + std::to_string(rank) + suffix;
  }

  const LaunchArgs& args_;
  config::Config config_;
  std::string out_;
  std::vector<config::PeerAddress> addrs_;
  std::vector<Child> children_;
  // The peers' process groups die with us, even when we are SIGKILLed (startPeers).
  GroupGuard guard_;
  // Emulated network: created before any peer starts, destroyed (emulator stopped, namespaces
  // deleted) by stopNetwork() or with this object, on every return, after a signal too.
  std::unique_ptr<netemu::Network> network_;
  std::vector<std::string> peerOverrides_;
  std::chrono::steady_clock::time_point start_;
  bool tty_ = false;
  std::string resolvedConfig_;  // absolute path of DIR/config.resolved.yaml (COMMAND only)
  int failed_ = 0;         // peers that exited with a status other than 0 and 3, or by a signal
  int errored_ = 0;        // of those, the ones that exited with a status (their own error)
  int diverged_ = 0;       // peers that exited with kExitDiverged
  int restarts_ = 0;       // whole-run restarts done (--max-restarts)
  std::string crash_;      // a peer's death that asks for a restart ("" when none pending)
  bool stopping_ = false;  // the others were sent SIGINT for the restart
  std::chrono::steady_clock::time_point stoppingAt_;
  bool forwarded_ = false;
  std::chrono::steady_clock::time_point forwardedAt_;
  std::chrono::steady_clock::time_point lastPrint_;
  std::vector<FaultRun> faults_;
  std::optional<std::chrono::steady_clock::time_point> trainingStart_;  // first round record
};

int Launch::plan() {
  auto loaded = loadConfig(args_.path, args_.overrides);
  if (!loaded.isOk()) return kExitBadInput;
  config_ = std::move(*loaded);
  if (args_.command.empty() && refuseExternal("launch", args_.path, config_)) return kExitBadInput;
  if (refuseInproc("launch", args_.path, config_)) return kExitBadInput;
  if (refuseFaults("launch", args_.path, config_)) return kExitBadInput;
  const bool emulating = args_.emulate || config_.network.emulate == config::Emulation::kNetns;
  for (std::size_t i = 0; i < config_.faults.events.size(); ++i) {
    const auto& e = config_.faults.events[i];
    if (e.kind == config::FaultKind::kLinkDown && !emulating) {
      std::cerr << "grapevine launch: " << args_.path << ": faults.events: item " << i << " ("
                << e.describe()
                << "): a link goes down in the emulated network only: add --emulate (or "
                   "network.emulate: netns)\n";
      return kExitBadInput;
    }
    faults_.push_back({e});
  }
  out_ = args_.out.empty() ? config_.output.dir : args_.out;
  std::error_code ec;
  std::filesystem::create_directories(out_, ec);
  if (ec) {
    std::cerr << "grapevine launch: cannot create " << out_ << ": " << ec.message() << "\n";
    return kExitFailure;
  }
  const auto local = localAddresses();
  addrs_ = config_.peers.addresses();
  for (int r = 0; r < config_.peers.count; ++r) {
    // `auto` (with peers.rendezvous) is whichever machine the peer runs on: here.
    if (addrs_[r].host != "auto" && !isLocal(addrs_[r].host, local)) continue;
    Child ch;
    ch.rank = r;
    children_.push_back(std::move(ch));
  }
  if (children_.empty()) {
    std::cerr << "grapevine launch: no peer of " << args_.path << " has a local host; start "
              << (args_.command.empty() ? "peers with `grapevine peer CONFIG --rank R`"
                                        : "the command with GRAPEVINE_RANK=R")
              << " on their hosts\n";
    return kExitBadInput;
  }
  peerOverrides_ = args_.overrides;
  return kExitOk;
}

int Launch::startNetwork() {
  const config::Config& c = config_;
  if (!args_.emulate && c.network.emulate != config::Emulation::kNetns) return kExitOk;
  if (static_cast<int>(children_.size()) != c.peers.count) {
    std::cerr << "grapevine launch: network emulation runs every peer on this host, but only "
              << children_.size() << " of " << c.peers.count << " peers have a local host\n";
    return kExitBadInput;
  }
  if (const Status s = netemu::checkPrerequisites(); !s.isOk()) {
    std::cerr << "grapevine launch: --emulate: " << s.message() << "\n";
    return kExitBadInput;
  }
  auto made = netemu::Network::create(netemu::optionsFromConfig(c, args_.mtu));
  if (!made.isOk()) {
    std::cerr << "grapevine launch: --emulate: " << made.status().toString() << "\n";
    return kExitFailure;
  }
  network_ = std::move(*made);
  // Peer r listens on (and is dialled at) its namespace's address, on the port it already had.
  std::string list = "[";
  for (int r = 0; r < c.peers.count; ++r) {
    list += (r ? ", " : "") + std::string("{host: ") + network_->address(r) +
            ", port: " + std::to_string(addrs_[r].port) + "}";
  }
  peerOverrides_.push_back("peers.list=" + list + "]");
  const auto& n = c.network;
  char bandwidth[64] = "unlimited";
  if (n.bandwidthMbit > 0) std::snprintf(bandwidth, sizeof bandwidth, "%g Mbit/s", n.bandwidthMbit);
  std::cout << "grapevine launch: emulated network " << network_->namespaceName(0) << ".."
            << network_->namespaceName(c.peers.count - 1) << " (" << network_->address(0)
            << "...), links " << bandwidth << ", " << n.latencyMs << " ms (+0-" << n.jitterMs
            << " ms), loss " << n.lossPercent << "%" << nodeCapText(n)
            << (n.uniform() ? "" : " (with per-peer/per-edge overrides)") << "\n";
  return kExitOk;
}

void Launch::printPlan() const {
  const config::Config& c = config_;
  std::cout << "grapevine launch: " << children_.size() << " of " << c.peers.count
            << " peers on this host"
            << (args_.command.empty() ? "" : " (" + commandText(args_.command) + ")") << ", "
            << topology::kindName(c.topology.kind) << ", "
            << algorithms::algorithmKindName(c.algorithm.name) << " + "
            << compress::methodName(c.compression.method) << " over " << c.transport.backend << ", "
            << c.run.rounds << " rounds; output in " << out_ << "/\n";
  if (c.monitoring.prometheusPort > 0 && !children_.empty()) {
    // Where to point a browser or a scrape config (docs/operations.md).
    std::cout << "grapevine launch: metrics at http://" << addrs_[children_.front().rank].host
              << ":" << c.monitoring.prometheusPort + children_.front().rank << "/metrics";
    if (children_.size() > 1) {
      std::cout << " .. :" << c.monitoring.prometheusPort + children_.back().rank;
    }
    std::cout << " (peer r on prometheus_port + r)\n";
  }
  std::cout << std::flush;
}

// The resolved config as one file, so that every command (and the API in it) trains exactly what
// this launch planned; loading it back must give the same config, checked here.
int Launch::writeResolvedConfig() {
  config::Config resolved = config_;
  std::error_code ec;
  resolved.output.dir = std::filesystem::absolute(out_, ec).string();
  // The key stays where it is (relative to the config's folder, not to DIR).
  if (!resolved.security.keyFile.empty()) {
    resolved.security.keyFile = std::filesystem::absolute(config_.keyFilePath(), ec).string();
  }
  if (network_) {
    resolved.peers.list.clear();
    for (int r = 0; r < resolved.peers.count; ++r) {
      resolved.peers.list.push_back({network_->address(r), addrs_[r].port});
    }
  }
  const std::string text = config::toYaml(resolved);
  resolvedConfig_ = resolved.output.dir + "/config.resolved.yaml";
  config::LoadOptions noEnvironment;
  noEnvironment.useEnvironment = false;
  const config::LoadResult again = config::loadString(text, resolvedConfig_, noEnvironment);
  if (!again.ok() || config::toYaml(again.config) != text) {
    std::cerr << "grapevine launch: internal error: the resolved config does not load back the "
                 "same:\n"
              << config::formatDiagnostics(again.diagnostics);
    return kExitFailure;
  }
  std::ofstream file(resolvedConfig_, std::ios::trunc);
  file << "# Written by grapevine launch from " << args_.path
       << " with its overrides: the config every command of this run reads (GRAPEVINE_CONFIG).\n"
       << text;
  file.close();
  if (!file) {
    std::cerr << "grapevine launch: cannot write " << resolvedConfig_ << "\n";
    return kExitFailure;
  }
  return kExitOk;
}

// `grapevine peer CONFIG --rank R --out DIR --set ...`, or the user's command.
std::vector<std::string> Launch::peerArgv(int rank, const std::string& self) const {
  if (!args_.command.empty()) return args_.command;
  std::vector<std::string> argv = {self,    "peer", args_.path, "--rank", std::to_string(rank),
                                   "--out", out_};
  if (args_.resume || restarts_ > 0) argv.push_back("--resume");
  for (const auto& o : peerOverrides_) {
    argv.push_back("--set");
    argv.push_back(o);
  }
  return argv;
}

std::vector<std::pair<std::string, std::string>> Launch::commandEnvironment(
    int rank, const std::string& self) const {
  std::error_code ec;
  std::vector<std::pair<std::string, std::string>> env = {
      {"GRAPEVINE_CONFIG", resolvedConfig_},
      {"GRAPEVINE_RANK", std::to_string(rank)},
      {"GRAPEVINE_WORLD_SIZE", std::to_string(config_.peers.count)},
      {"GRAPEVINE_OUT", std::filesystem::absolute(out_, ec).string()},
  };
  if (const std::string module = pythonModuleDir(self); !module.empty()) {
    const char* old = std::getenv("PYTHONPATH");
    env.emplace_back("PYTHONPATH", old && *old ? module + ":" + old : module);
  }
  return env;
}

int Launch::startPeers() {
  std::error_code ec;
  const std::string self = std::filesystem::read_symlink("/proc/self/exe", ec).string();
  if (restarts_ == 0) {  // once per launch; a restart (--max-restarts) reuses them
    if (!args_.command.empty()) {
      if (int rc = writeResolvedConfig(); rc != kExitOk) return rc;
    }
    struct sigaction sa {};
    sa.sa_handler = onSignal;
    sigaction(SIGINT, &sa, nullptr);
    sigaction(SIGTERM, &sa, nullptr);
    signal(SIGPIPE, SIG_IGN);  // a write to a guardian that is gone must not kill us
    // tellAlone's SIGUSR1 must not end a peer that has not installed its handler yet: ignored
    // from the fork on (inherited, and kept across exec); `grapevine peer` installs its own.
    if (args_.command.empty()) signal(SIGUSR1, SIG_IGN);
    auto guard = GroupGuard::start(static_cast<int>(children_.size()));
    if (!guard.isOk()) {
      std::cerr << "grapevine launch: " << guard.status().message() << "\n";
      return kExitFailure;
    }
    guard_ = std::move(*guard);
    start_ = std::chrono::steady_clock::now();
  }
  for (auto& ch : children_) {
    if (int rc = spawnPeer(ch, self, args_.resume || restarts_ > 0); rc != kExitOk) return rc;
  }
  return kExitOk;
}

int Launch::spawnPeer(Child& ch, const std::string& self, bool resuming) {
  const pid_t launcher = getpid();
  std::error_code ec;
  ch.jsonl = peerFile(ch.rank, ".jsonl");
  ch.log = peerFile(ch.rank, ".log");
  // A resumed peer keeps its records up to the checkpoint (it rewrites the file itself).
  if (!resuming) std::filesystem::remove(ch.jsonl, ec);
  std::filesystem::remove(peerFile(ch.rank, ".final.json"), ec);
  ch.offset = 0;  // the file is rewritten: read it from the start
  ch.last = nlohmann::json();
  std::vector<std::string> argv = peerArgv(ch.rank, self);
  if (resuming && args_.command.empty() &&
      std::find(argv.begin(), argv.end(), "--resume") == argv.end())
    argv.push_back("--resume");
  if (network_) {
    auto prefix = network_->execPrefix(ch.rank);
    argv.insert(argv.begin(), prefix.begin(), prefix.end());
  }
  SpawnOptions spawn;
  spawn.argv = argv;  // `ip` (emulation) and a command are found on PATH; self is absolute
  if (!args_.command.empty()) spawn.setEnv = commandEnvironment(ch.rank, self);
  // Appended after a restart: keep the crash's lines.
  spawn.out = ChildStream::file(ch.log, /*append=*/restarts_ > 0 || ch.faultRestarts > 0);
  spawn.err = ChildStream::sameAsStdout();
  spawn.newProcessGroup = true;  // a terminal's SIGINT reaches the launcher only; it forwards it
  // Until guard_ lists the new group, the parent-death signal covers a launcher that dies.
  spawn.beforeExec = [launcher] {
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != launcher) _exit(1);
  };
  auto child = Subprocess::spawn(spawn);
  if (!child.isOk()) {
    std::cerr << "grapevine launch: cannot start peer " << ch.rank << ": "
              << child.status().message() << "\n";
    return kExitFailure;
  }
  ch.pid = child->release();  // reaped by watch()
  ch.running = true;
  if (Status st = guard_.add(ch.pid); !st.isOk()) {
    std::cerr << "grapevine launch: " << st.message() << "\n";
    return kExitFailure;
  }
  return kExitOk;
}

int Launch::watch() {
  tty_ = isatty(STDOUT_FILENO) && !args_.quiet;
  lastPrint_ = std::chrono::steady_clock::now() - std::chrono::hours(1);
  for (;;) {
    int running = reapExited();
    forwardSignal(running);
    runFaults();
    if (int rc = restartCrashedPeers(); rc != kExitOk) return rc;
    running = 0;  // again: crashed peers may have started again
    for (const auto& ch : children_) running += ch.running ? 1 : 0;
    tellAlone(running);
    const int restartsBefore = restarts_;
    if (int rc = restartIfDue(running); rc != kExitOk) return rc;
    if (restarts_ != restartsBefore) continue;                         // every peer runs again
    if (!crash_.empty() || stopping_) running = std::max(running, 1);  // restarting
    // A peer the fault schedule restarts is started again even after the others finished (it
    // then trains on alone: tellAlone).
    for (const auto& ch : children_) {
      if (ch.faultRestarting && !ch.running && !g_signal) running = std::max(running, 1);
    }
    showProgress(running);
    if (running == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (tty_) std::cout << "\n";
  return kExitOk;
}

// A restarted peer whose bootstrap waits for neighbours that have all exited (they finished while
// it restarted) would wait out peers.connect_timeout: SIGUSR1 tells it that nobody will come, and
// it trains on alone from its checkpoint. Only our own peers (a command may not handle SIGUSR1),
// and only when every peer of the run is ours. Sent again every second: a peer ignores SIGUSR1
// (as the launcher does from startPeers on) until its handler is installed. `running`: the
// children running now.
void Launch::tellAlone(int running) {
  if (!args_.command.empty() || static_cast<int>(children_.size()) != config_.peers.count) return;
  if (running != 1) return;
  const auto now = std::chrono::steady_clock::now();
  for (auto& ch : children_) {
    if (!ch.running || ch.faultRestarts == 0 || ch.faultPaused) continue;
    if (ch.signalledAlone && now - *ch.signalledAlone < std::chrono::seconds(1)) continue;
    if (ch.pid > 1) kill(ch.pid, SIGUSR1);
    const bool first = !ch.signalledAlone;
    ch.signalledAlone = now;
    if (!first) continue;
    std::cout << (tty_ ? "\n" : "") << "grapevine launch: every other peer has exited; peer "
              << ch.rank << " (restarted) does not wait for its neighbours\n"
              << std::flush;
  }
}

int Launch::restartCrashedPeers() {
  int others = 0;
  for (const auto& ch : children_) others += ch.running ? 1 : 0;
  for (auto& ch : children_) {
    if (!ch.crashRestart || g_signal) continue;
    ch.crashRestart = false;
    if (others == 0 && static_cast<int>(children_.size()) == config_.peers.count) {
      // Nobody left to rejoin (the others finished): it would wait out connect_timeout and fail.
      // (With peers on other hosts, they may still run.)
      ++failed_;
      std::cout << "grapevine launch: not restarting peer " << ch.rank
                << ": no other peer runs any more\n"
                << std::flush;
      continue;
    }
    ++ch.faultRestarts;  // its log is appended to
    std::error_code ec;
    const std::string self = std::filesystem::read_symlink("/proc/self/exe", ec).string();
    if (int rc = spawnPeer(ch, self, /*resuming=*/true); rc != kExitOk) return rc;
  }
  return kExitOk;
}

int Launch::restartIfDue(int running) {
  if (crash_.empty() || g_signal) {
    crash_.clear();
    return kExitOk;
  }
  if (!stopping_) {
    if (tty_) std::cout << "\n";
    std::cout << "grapevine launch: restarting every peer from the newest checkpoint all of "
              << "them have (restart " << restarts_ + 1 << " of " << args_.maxRestarts << ")\n"
              << std::flush;
    for (auto& ch : children_) {
      if (ch.running) signalGroup(ch.pid, SIGINT);
    }
    stopping_ = true;
    stoppingAt_ = std::chrono::steady_clock::now();
  }
  if (running > 0) {
    if (std::chrono::steady_clock::now() - stoppingAt_ > std::chrono::seconds(5)) {
      for (auto& ch : children_) {
        if (ch.running) signalGroup(ch.pid, SIGKILL);
      }
    }
    return kExitOk;
  }
  // Every peer has exited: the counts describe the attempt that is over.
  ++restarts_;
  crash_.clear();
  stopping_ = false;
  failed_ = errored_ = 0;
  return startPeers();
}

int Launch::reapExited() {
  int running = 0;
  for (auto& ch : children_) {
    if (!ch.running) continue;
    int status = 0;
    const pid_t r = waitpid(ch.pid, &status, WNOHANG);
    if (r != ch.pid) {
      ++running;
      continue;
    }
    ch.running = false;
    ch.status = status;
    guard_.remove(ch.pid);
    readNewRecords(ch);
    if (WIFEXITED(status) && WEXITSTATUS(status) == kExitDiverged) {
      ++diverged_;  // said once, by the summary (every peer of the run stops the same way)
    } else if (ch.faultRestarting) {
      // Killed by the fault schedule's restart: started again when the event ends.
    } else if (ch.faultKilled) {
      ++failed_;  // as asked by faults.events: not a crash to restart, not an error of its own
      std::cout << (tty_ ? "\n" : "") << "grapevine launch: peer " << ch.rank
                << " was killed by the fault schedule\n"
                << std::flush;
    } else if (stopping_) {
      // Stopped (or killed after 5 s) for the restart.
    } else if (WIFSIGNALED(status) && restarts_ < args_.maxRestarts && !forwarded_ &&
               args_.restartScope == "peer") {
      // A crash: only this peer starts again, and rejoins the others, which train on.
      ++restarts_;
      ch.crashRestart = true;
      std::cout << (tty_ ? "\n" : "") << "grapevine launch: peer " << ch.rank << " "
                << describeStatus(status) << "; restarting it with --resume (restart " << restarts_
                << " of " << args_.maxRestarts << "); last lines of " << ch.log << ":\n"
                << tail(ch.log, 4) << std::flush;
    } else if (WIFSIGNALED(status) && restarts_ < args_.maxRestarts && !forwarded_ &&
               crash_.empty()) {
      // A crash, the OOM killer, a preempted machine: what --max-restarts is for. (A peer that
      // exits with an error of its own is not restarted: it would fail again.)
      crash_ = "peer " + std::to_string(ch.rank) + " " + describeStatus(status);
      std::cout << (tty_ ? "\n" : "") << "grapevine launch: peer " << ch.rank << " "
                << describeStatus(status) << "; last lines of " << ch.log << ":\n"
                << tail(ch.log, 4) << std::flush;
    } else if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
      ++failed_;
      if (WIFEXITED(status)) ++errored_;
      if (tty_) std::cout << "\n";
      std::cout << "grapevine launch: peer " << ch.rank << " " << describeStatus(status)
                << "; last lines of " << ch.log << ":\n"
                << tail(ch.log, 8) << std::flush;
    }
  }
  return running;
}

// SIGINT/SIGTERM: forwarded once as SIGINT; peers still running 5 s later are killed. Each peer
// leads its own process group (startPeers), and the signal goes to the group: a command such as
// `sh -c 'python3 train.py'` or a program with worker processes stops as a whole.
void Launch::forwardSignal(int running) {
  if (g_signal && !forwarded_) {
    std::cout << "\ngrapevine launch: " << strsignal(g_signal) << ": stopping " << running
              << " peers\n"
              << std::flush;
    for (auto& ch : children_) {
      if (!ch.running) continue;
      signalGroup(ch.pid, SIGINT);
      if (ch.faultPaused) signalGroup(ch.pid, SIGCONT);  // a stopped peer cannot stop
    }
    forwarded_ = true;
    forwardedAt_ = std::chrono::steady_clock::now();
  }
  if (forwarded_ && std::chrono::steady_clock::now() - forwardedAt_ > std::chrono::seconds(5)) {
    for (auto& ch : children_) {
      if (ch.running) signalGroup(ch.pid, SIGKILL);
    }
  }
}

// Every 0.5 s on a terminal (10 s otherwise) and once when the last peer has exited.
void Launch::showProgress(int running) {
  const auto now = std::chrono::steady_clock::now();
  if (!(now - lastPrint_ > std::chrono::milliseconds(tty_ ? 500 : 10000) || running == 0)) return;
  lastPrint_ = now;
  const std::string progress = progressLine();
  if (tty_)
    std::cout << "\r" << progress << "   " << std::flush;
  else if (running > 0)
    std::cout << progress << "\n" << std::flush;
}

// Round / total, mean loss, min-max accuracy, MB sent, rounds/s, ETA.
std::string Launch::progressLine() {
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  double lossSum = 0, accMin = INFINITY, accMax = -INFINITY, mbSent = 0;
  long long minRound = -1;
  int n = 0;
  for (auto& ch : children_) {
    readNewRecords(ch);
    if (ch.last.is_null()) continue;
    ++n;
    const long long r = ch.last.value("round", -1LL);
    minRound = minRound < 0 ? r : std::min(minRound, r);
    lossSum += ch.last.value("loss", 0.0);
    mbSent += ch.last.value("bytes_sent", 0.0) / 1e6;
    if (std::isfinite(ch.accuracy)) {
      accMin = std::min(accMin, ch.accuracy);
      accMax = std::max(accMax, ch.accuracy);
    }
  }
  char line[256];
  if (n == 0) {
    std::snprintf(line, sizeof line, "starting %zu peers (%.0f s)", children_.size(), elapsed);
    return line;
  }
  const double done = static_cast<double>(minRound + 1);
  const double rate = elapsed > 0 ? done / elapsed : 0;
  const double eta = rate > 0 ? (config_.run.rounds - done) / rate : 0;
  char acc[64] = "acc n/a";
  if (std::isfinite(accMin))
    std::snprintf(acc, sizeof acc, "acc %.1f-%.1f%%", 100 * accMin, 100 * accMax);
  std::snprintf(line, sizeof line,
                "round %lld/%lld  loss %.4f  %s  sent %.1f MB  %.1f rounds/s  ETA %.0f s",
                minRound + 1, static_cast<long long>(config_.run.rounds), lossSum / n, acc, mbSent,
                rate, eta);
  if (restarts_ > 0) return std::string(line) + "  restarts " + std::to_string(restarts_);
  return line;
}

void Launch::runFaults() {
  if (faults_.empty() || g_signal) return;
  const auto now = std::chrono::steady_clock::now();
  if (!trainingStart_) {
    for (auto& ch : children_) {
      readNewRecords(ch);
      if (!ch.last.is_null()) trainingStart_ = now;
    }
    if (!trainingStart_) return;
  }
  const double t = std::chrono::duration<double>(now - *trainingStart_).count();
  for (auto& f : faults_) {
    if (!f.started && t >= f.event.start()) {
      faultAction(f, true, t);
    } else if (f.started && !f.ended && f.event.kind != config::FaultKind::kKill &&
               t >= f.event.end() && !restartPending(f)) {
      faultAction(f, false, t);
    }
  }
}

void Launch::faultAction(FaultRun& f, bool begin, double now) {
  const config::FaultEvent& e = f.event;
  (begin ? f.started : f.ended) = true;
  (begin ? f.startedAt : f.endedAt) = now;
  if (e.kind == config::FaultKind::kKill) f.ended = true;
  std::string what;
  if (e.kind == config::FaultKind::kLinkDown) {
    // Down first, then count (up: count, then up): what the link carried while down is then only
    // a packet the emulator was writing at the moment the flag changed.
    if (!begin) f.packetsAtUp = linkPackets(e.linkA, e.linkB);
    const Status st = network_ ? network_->setLinkDown(e.linkA, e.linkB, begin)
                               : failedPrecondition("no emulated network");
    if (begin) f.packetsAtDown = linkPackets(e.linkA, e.linkB);
    what = std::string("link [") + std::to_string(e.linkA) + ", " + std::to_string(e.linkB) +
           (begin ? "] down" : "] up") + (st.isOk() ? "" : " failed: " + st.message());
  } else if (e.kind == config::FaultKind::kCorrupt) {
    // The peer damages its own messages (it reads the same schedule): nothing to send it.
    what = "peer " + std::to_string(e.peer) +
           (begin ? " corrupts its outgoing messages" : " sends intact messages again") +
           " (by its own clock)";
  } else {
    Child* ch = nullptr;
    for (auto& c : children_) {
      if (c.rank == e.peer) ch = &c;
    }
    if (ch && e.kind == config::FaultKind::kRestart && !begin && ch->faultRestarting &&
        !ch->running) {
      // Down for the event's seconds: back from its newest checkpoint, into the running training.
      ch->faultRestarting = false;
      ++ch->faultRestarts;
      std::error_code ec;
      const std::string self = std::filesystem::read_symlink("/proc/self/exe", ec).string();
      const int rc = spawnPeer(*ch, self, /*resuming=*/true);
      what = "peer " + std::to_string(e.peer) +
             (rc == kExitOk ? " started again with --resume" : " could not be started again");
    } else if (!ch || !ch->running) {
      what = "peer " + std::to_string(e.peer) + " is not running: nothing to do";
    } else if (e.kind == config::FaultKind::kKill) {
      ch->faultKilled = true;
      signalGroup(ch->pid, SIGKILL);
      what = "peer " + std::to_string(e.peer) + " SIGKILLed";
    } else if (e.kind == config::FaultKind::kRestart && begin) {
      ch->faultRestarting = true;
      signalGroup(ch->pid, SIGKILL);
      what = "peer " + std::to_string(e.peer) + " SIGKILLed (to be restarted with --resume)";
    } else if (e.kind == config::FaultKind::kRestart) {
      what = "peer " + std::to_string(e.peer) + " still exiting: nothing to do";
    } else {  // pause
      ch->faultPaused = begin;
      signalGroup(ch->pid, begin ? SIGSTOP : SIGCONT);
      what = "peer " + std::to_string(e.peer) + (begin ? " SIGSTOPped" : " SIGCONTinued");
    }
  }
  char at[32];
  std::snprintf(at, sizeof at, "%.2f", now);
  std::cout << (tty_ ? "\n" : "") << "grapevine launch: fault (" << e.describe() << "): " << what
            << " at " << at << " s\n"
            << std::flush;
}

// summary.json's "faults": each event (engine::faultEventJson), and when it was executed (seconds
// since the first round record; null when the run ended first).
nlohmann::json Launch::faultsJson() const {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& f : faults_) {
    const auto& e = f.event;
    nlohmann::json j = engine::faultEventJson(e);  // kind, peer or link, at, seconds
    j["executed_at"] = f.started ? nlohmann::json(f.startedAt) : nlohmann::json(nullptr);
    if (e.kind != config::FaultKind::kKill)
      j["ended_at"] = f.ended ? nlohmann::json(f.endedAt) : nlohmann::json(nullptr);
    if (e.kind == config::FaultKind::kLinkDown && network_) {
      // What the link carried (both directions): the test that it heals reads these.
      const std::uint64_t now = linkPackets(e.linkA, e.linkB);
      j["packets_before"] = f.packetsAtDown;
      j["packets_while_down"] = f.packetsAtUp - f.packetsAtDown;
      j["packets_after"] = f.ended ? now - f.packetsAtUp : 0;
      std::uint64_t dropped = 0;
      for (auto [a, b] : {std::pair{e.linkA, e.linkB}, std::pair{e.linkB, e.linkA}}) {
        if (auto st = network_->stats(a, b); st.isOk()) dropped += st->droppedDown;
      }
      j["dropped_down"] = dropped;
    }
    out.push_back(std::move(j));
  }
  return out;
}

std::uint64_t Launch::linkPackets(int a, int b) const {
  if (!network_) return 0;
  std::uint64_t n = 0;
  for (auto [from, to] : {std::pair{a, b}, std::pair{b, a}}) {
    if (auto st = network_->stats(from, to); st.isOk()) n += st->packets;
  }
  return n;
}

nlohmann::json Launch::stopNetwork() {
  if (!network_) return nullptr;
  LinkTotals t;
  for (int i = 0; i < network_->peers(); ++i) {
    for (int j = 0; j < network_->peers(); ++j) {
      if (auto s = network_->stats(i, j); s.isOk()) t.add(*s);
    }
  }
  network_.reset();  // peers are gone: stop the emulator, delete the namespaces now
  return {{"mode", "netns"},
          {"packets", t.packets},
          {"bytes", t.bytes},
          {"dropped_loss", t.droppedLoss},
          {"dropped_queue", t.droppedQueue},
          {"dropped_write", t.droppedWrite},
          {"dropped_down", t.droppedDown}};
}

// Every peer's final record and model; a peer without them counts as not finished.
std::vector<engine::PeerResult> Launch::readResults() const {
  std::vector<int> ranks;
  for (const auto& ch : children_) ranks.push_back(ch.rank);
  return engine::readPeerResults(out_, ranks);
}

int Launch::writeSummary() {
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const nlohmann::json faults = faults_.empty() ? nlohmann::json() : faultsJson();
  const nlohmann::json emulated = stopNetwork();
  auto plan = engine::makeRunPlan(config_);
  if (!plan.isOk()) {
    std::cerr << "grapevine launch: " << plan.status().toString() << "\n";
    return kExitFailure;
  }
  auto summary = engine::makeSummary(**plan, readResults(), wall, config_.transport.backend);
  summary["launched_peers"] = children_.size();
  summary["failed_peers"] = failed_;
  if (args_.maxRestarts > 0) summary["restarts"] = restarts_;
  if (!faults.is_null()) summary["faults"] = faults;
  if (!emulated.is_null()) summary["network_emulation"] = emulated;
  if (Status st = engine::writeJsonFile(out_ + "/summary.json", summary); !st.isOk()) {
    std::cerr << "grapevine launch: " << st.toString() << "\n";
    return kExitFailure;
  }
  std::cout << "\n" << engine::summaryTable(summary) << "summary: " << out_ << "/summary.json\n";
  if (summary.value("diverged", false)) {
    std::cerr << "error: " << summary.value("diverged_message", std::string()) << "\n";
  }
  return kExitOk;
}

// A peer killed by a signal (a crash, the OOM killer, a preempted machine) is the fault a
// decentralized run is built to survive: the run succeeds when any peer finished. A peer that
// exited with a status other than 0 and 3 reported an error of its own (a user program's traceback,
// a peer that could not start), which the exit code passes on.
int Launch::exitCode() const {
  if (g_signal) return kExitFailure;
  if (diverged_ > 0) return kExitDiverged;
  if (errored_ > 0) return kExitFailure;
  return failed_ == static_cast<int>(children_.size()) ? kExitFailure : kExitOk;
}

int runLaunch(const LaunchArgs& a) {
  Launch launch(a);
  if (int rc = launch.plan(); rc != kExitOk) return rc;
  if (int rc = launch.startNetwork(); rc != kExitOk) return rc;
  launch.printPlan();
  if (int rc = launch.startPeers(); rc != kExitOk) return rc;
  if (int rc = launch.watch(); rc != kExitOk) return rc;
  if (int rc = launch.writeSummary(); rc != kExitOk) return rc;
  return launch.exitCode();
}

}  // namespace

Command registerLaunch(CLI::App& root, const std::optional<std::vector<std::string>>& command) {
  auto args = std::make_shared<LaunchArgs>();
  CLI::App* app = root.add_subcommand(
      "launch",
      "Start every local peer of a config (or `-- COMMAND [ARGS...]`, your program, once per local "
      "rank) and follow the run");
  app->add_option("config", args->path, "YAML config file")->required();
  app->footer(
      "-- COMMAND [ARGS...]: after the options, the program to run once per local rank instead of "
      "`grapevine peer`, with GRAPEVINE_CONFIG (the resolved config), GRAPEVINE_RANK, "
      "GRAPEVINE_WORLD_SIZE, GRAPEVINE_OUT and PYTHONPATH set (workload.name: external: your "
      "model, through the API; docs/api.md)");
  app->add_option("--out", args->out, "Output folder (default: output.dir of the config)");
  app->add_option("--set", args->overrides, "Override a key for every peer (repeatable)");
  app->add_flag("--quiet", args->quiet, "No live progress line");
  app->add_flag(
      "--emulate", args->emulate,
      "Run every peer in its own network namespace behind the link emulator (rate, latency, "
      "jitter, loss from the network: section; needs root); same as network.emulate: netns");
  app->add_option("--emulate-mtu", args->mtu, "MTU of the emulated interfaces")
      ->check(CLI::Range(576, 65535));
  app->add_flag("--resume", args->resume,
                "Every peer continues from the newest checkpoint all of them have "
                "(checkpoint.every; docs/faults.md)");
  app->add_option("--max-restarts", args->maxRestarts,
                  "When a peer is killed by a signal, start it again with --resume (it rejoins "
                  "the running training), up to N restarts in all (docs/faults.md)")
      ->check(CLI::NonNegativeNumber);
  app->add_option("--restart-scope", args->restartScope,
                  "What --max-restarts restarts: peer (the crashed peer, which rejoins; default) "
                  "or run (stop every peer and restart all from the newest common checkpoint: "
                  "bit-identical to an undisturbed run)")
      ->check(CLI::IsMember({"peer", "run"}));
  return {
      app, [args, &command] {
        if (command && command->empty()) {
          std::cerr << "grapevine launch: nothing after `--`: give the command to run\n";
          return kExitBadInput;
        }
        if (command && (args->resume || args->maxRestarts > 0)) {
          std::cerr
              << "grapevine launch: --resume and --max-restarts restart `grapevine peer` from its "
                 "checkpoints; a program of your own (`-- COMMAND`) resumes from its own "
                 "(the API's state()/load_state())\n";
          return kExitBadInput;
        }
        if (command) args->command = *command;
        return runLaunch(*args);
      }};
}

}  // namespace grapevine::cli
