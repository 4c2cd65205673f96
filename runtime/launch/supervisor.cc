#include "runtime/launch/supervisor.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <system_error>
#include <thread>

#include "runtime/common/elapsed.h"
#include "runtime/common/subprocess.h"
#include "runtime/launch/progress.h"
#include "runtime/launch/signals.h"

namespace grapevine::launch {

Supervisor::Supervisor(const Options& options, const Plan& plan) : options_(options), plan_(plan) {
  for (int r : plan.ranks) {
    PeerProcess p;
    p.rank = r;
    peers_.push_back(std::move(p));
  }
}

Status Supervisor::start(const PeerCommand& command) {
  command_ = &command;
  installSignalHandlers(/*ignoreUsr1=*/command.builtIn());
  auto guard = GroupGuard::start(static_cast<int>(peers_.size()));
  if (!guard.isOk()) return failedPrecondition(guard.status().message());
  guard_ = std::move(*guard);
  start_ = std::chrono::steady_clock::now();
  return spawnAll(options_.resume);
}

Status Supervisor::spawnAll(bool resuming) {
  const std::string self = selfPath();
  for (auto& p : peers_) GV_RETURN_IF_ERROR(spawn(p, self, resuming));
  return Status::ok();
}

Status Supervisor::respawn(PeerProcess& p) { return spawn(p, selfPath(), /*resuming=*/true); }

Status Supervisor::spawn(PeerProcess& p, const std::string& self, bool resuming) {
  const pid_t launcher = getpid();
  std::error_code ec;
  p.jsonl = plan_.peerFile(p.rank, ".jsonl");
  p.log = plan_.peerFile(p.rank, ".log");
  // A resumed peer keeps its records up to the checkpoint (it rewrites the file itself).
  if (!resuming) std::filesystem::remove(p.jsonl, ec);
  std::filesystem::remove(plan_.peerFile(p.rank, ".final.json"), ec);
  p.offset = 0;  // the file is rewritten: read it from the start
  p.last = nlohmann::json();
  SpawnOptions spawn;
  // `ip` (emulation) and a command are found on PATH; self is absolute.
  const bool resumeAll = options_.resume || restarts_ > 0;
  spawn.argv = command_->argv(p.rank, self, resumeAll, resuming);
  if (!command_->builtIn())
    spawn.setEnv = command_->environment(p.rank, self, resumeAll || resuming);
  // Appended after a restart: keep the crash's lines.
  spawn.out = ChildStream::file(p.log, /*append=*/restarts_ > 0 || p.faultRestarts > 0);
  spawn.err = ChildStream::sameAsStdout();
  spawn.newProcessGroup = true;  // a terminal's SIGINT reaches the launcher only; it forwards it
  // Until guard_ lists the new group, the parent-death signal covers a launcher that dies.
  spawn.beforeExec = [launcher] {
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != launcher) _exit(1);
  };
  auto child = Subprocess::spawn(spawn);
  if (!child.isOk()) {
    return failedPrecondition("cannot start peer " + std::to_string(p.rank) + ": " +
                              child.status().message());
  }
  p.pid = child->release();  // reaped by watch()
  p.running = true;
  if (Status st = guard_.add(p.pid); !st.isOk()) return failedPrecondition(st.message());
  return Status::ok();
}

Status Supervisor::watch(const std::function<void()>& everyTick) {
  tty_ = isatty(STDOUT_FILENO) && !options_.quiet;
  lastPrint_ = std::chrono::steady_clock::now() - std::chrono::hours(1);
  for (;;) {
    int running = reapExited();
    forwardSignal(running);
    everyTick();
    GV_RETURN_IF_ERROR(restartCrashedPeers());
    running = countRunning();  // again: crashed peers may have started again
    tellAlone(running);
    const int restartsBefore = restarts_;
    GV_RETURN_IF_ERROR(restartIfDue(running));
    if (restarts_ != restartsBefore) continue;                         // every peer runs again
    if (!crash_.empty() || stopping_) running = std::max(running, 1);  // restarting
    // A peer the fault schedule restarts is started again even after the others finished (it
    // then trains on alone: tellAlone).
    for (const auto& p : peers_) {
      if (p.faultRestarting && !p.running && !stopSignal()) running = std::max(running, 1);
    }
    showProgress(running);
    if (running == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (tty_) std::cout << "\n";
  return Status::ok();
}

int Supervisor::countRunning() const {
  int running = 0;
  for (const auto& p : peers_) running += p.running ? 1 : 0;
  return running;
}

int Supervisor::reapExited() {
  int running = 0;
  for (auto& p : peers_) {
    if (!p.running) continue;
    int status = 0;
    if (waitpid(p.pid, &status, WNOHANG) != p.pid) {
      ++running;
      continue;
    }
    p.running = false;
    p.status = status;
    guard_.remove(p.pid);
    readNewRecords(p);
    onExited(p, status);
  }
  return running;
}

namespace {
// How a peer ends when the launcher forwarded SIGINT: exit 0 (`grapevine peer`), died of SIGINT or
// exit 130 (a Python program's KeyboardInterrupt, a shell), exit 143 (a program's SIGTERM-style
// handler). A peer killed 5 s later, or any other status, is reported as a failure.
bool stoppedAsAsked(int status) {
  if (WIFSIGNALED(status)) return WTERMSIG(status) == SIGINT;
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return code == 0 || code == 128 + SIGINT || code == 128 + SIGTERM;
}
}  // namespace

// What a peer's exit means: diverged (said once, by the summary), the fault schedule's doing, the
// whole-run restart's, a crash to restart, or a failure to report with its last log lines.
void Supervisor::onExited(PeerProcess& p, int status) {
  const char* newline = tty_ ? "\n" : "";
  if (WIFEXITED(status) && WEXITSTATUS(status) == options_.divergedExitStatus) {
    ++diverged_;  // said once, by the summary (every peer of the run stops the same way)
  } else if (p.faultRestarting) {
    // Killed by the fault schedule's restart: started again when the event ends.
  } else if (p.faultKilled) {
    ++failed_;  // as asked by faults.events: not a crash to restart, not an error of its own
    std::cout << newline << "grapevine launch: peer " << p.rank
              << " was killed by the fault schedule\n"
              << std::flush;
  } else if (stopping_) {
    // Stopped (or killed after 5 s) for the restart.
  } else if (forwarded_ && (stoppedAsAsked(status) || (WIFEXITED(status) && p.last.is_null()))) {
    // (A peer stopped in its bootstrap exits 1: it had not started training.)
    ++stopped_;  // the user's Ctrl-C, forwarded: the summary says the run was interrupted
  } else if (WIFSIGNALED(status) && restarts_ < options_.maxRestarts && !forwarded_ &&
             options_.restartScope == RestartScope::kPeer) {
    // A crash: only this peer starts again, and rejoins the others, which train on.
    ++restarts_;
    p.crashRestart = true;
    std::cout << newline << "grapevine launch: peer " << p.rank << " " << describeStatus(status)
              << "; restarting it with --resume (restart " << restarts_ << " of "
              << options_.maxRestarts << "); last lines of " << p.log << ":\n"
              << tailLines(p.log, 4) << std::flush;
  } else if (WIFSIGNALED(status) && restarts_ < options_.maxRestarts && !forwarded_ &&
             crash_.empty()) {
    // A crash, the OOM killer, a preempted machine: what --max-restarts is for. (A peer that
    // exits with an error of its own is not restarted: it would fail again.)
    crash_ = "peer " + std::to_string(p.rank) + " " + describeStatus(status);
    std::cout << newline << "grapevine launch: peer " << p.rank << " " << describeStatus(status)
              << "; last lines of " << p.log << ":\n"
              << tailLines(p.log, 4) << std::flush;
  } else if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
    ++failed_;
    if (WIFEXITED(status)) ++errored_;
    // Its own error before its first round (a port in use, a bad file, a program's traceback):
    // the others would train on a graph with a hole from the start (forwardSignal stops them).
    if (WIFEXITED(status) && p.last.is_null() && !forwarded_) startupFailures_.push_back(p.rank);
    if (tty_) std::cout << "\n";
    std::cout << "grapevine launch: peer " << p.rank << " " << describeStatus(status)
              << "; last lines of " << p.log << ":\n"
              << tailLines(p.log, 8) << std::flush;
  }
}

// SIGINT/SIGTERM: forwarded once as SIGINT; peers still running 5 s later are killed. The same
// when a peer failed before its first round (startupFailures_). Each peer
// leads its own process group (spawn), and the signal goes to the group: a command such as
// `sh -c 'python3 train.py'` or a program with worker processes stops as a whole.
void Supervisor::forwardSignal(int running) {
  const int sig = stopSignal();
  if (!forwarded_ && (sig || (!startupFailures_.empty() && running > 0))) {
    if (sig) {
      std::cout << "\ngrapevine launch: " << strsignal(sig) << ": stopping " << running
                << " peers\n";
    } else {
      std::string ranks;
      for (int r : startupFailures_) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
      std::cout << "\ngrapevine launch: peer " << ranks
                << " failed before its first round: stopping the other " << running
                << " peers (they would train on a graph missing it from the start)\n";
    }
    std::cout << std::flush;
    for (auto& p : peers_) {
      if (!p.running) continue;
      signalGroup(p.pid, SIGINT);
      if (p.faultPaused) signalGroup(p.pid, SIGCONT);  // a stopped peer cannot stop
    }
    forwarded_ = true;
    forwardedAt_ = std::chrono::steady_clock::now();
  }
  if (forwarded_ && std::chrono::steady_clock::now() - forwardedAt_ > std::chrono::seconds(5)) {
    for (auto& p : peers_) {
      if (p.running) signalGroup(p.pid, SIGKILL);
    }
  }
}

Status Supervisor::restartCrashedPeers() {
  const int others = countRunning();
  for (auto& p : peers_) {
    if (!p.crashRestart || stopSignal()) continue;
    p.crashRestart = false;
    if (others == 0 && static_cast<int>(peers_.size()) == plan_.config.peers.count) {
      // Nobody left to rejoin (the others finished): it would wait out connect_timeout and fail.
      // (With peers on other hosts, they may still run.)
      ++failed_;
      std::cout << "grapevine launch: not restarting peer " << p.rank
                << ": no other peer runs any more\n"
                << std::flush;
      continue;
    }
    ++p.faultRestarts;  // its log is appended to
    GV_RETURN_IF_ERROR(respawn(p));
  }
  return Status::ok();
}

Status Supervisor::restartIfDue(int running) {
  if (crash_.empty() || stopSignal()) {
    crash_.clear();
    return Status::ok();
  }
  if (!stopping_) {
    if (tty_) std::cout << "\n";
    std::cout << "grapevine launch: restarting every peer from the newest checkpoint all of "
              << "them have (restart " << restarts_ + 1 << " of " << options_.maxRestarts << ")\n"
              << std::flush;
    for (auto& p : peers_) {
      if (p.running) signalGroup(p.pid, SIGINT);
    }
    stopping_ = true;
    stoppingAt_ = std::chrono::steady_clock::now();
  }
  if (running > 0) {
    if (std::chrono::steady_clock::now() - stoppingAt_ > std::chrono::seconds(5)) {
      for (auto& p : peers_) {
        if (p.running) signalGroup(p.pid, SIGKILL);
      }
    }
    return Status::ok();
  }
  // Every peer has exited: the counts describe the attempt that is over.
  ++restarts_;
  crash_.clear();
  stopping_ = false;
  failed_ = errored_ = 0;
  return spawnAll(/*resuming=*/true);
}

// A restarted peer whose bootstrap waits for neighbours that have all exited (they finished while
// it restarted) would wait out peers.connect_timeout: SIGUSR1 tells it that nobody will come, and
// it trains on alone from its checkpoint. Only our own peers (a command may not handle SIGUSR1),
// and only when every peer of the run is ours. Sent again every second: a peer ignores SIGUSR1
// (as the launcher does from start() on) until its handler is installed. `running`: the peers
// running now.
void Supervisor::tellAlone(int running) {
  if (!command_->builtIn() || static_cast<int>(peers_.size()) != plan_.config.peers.count) return;
  if (running != 1) return;
  const auto now = std::chrono::steady_clock::now();
  for (auto& p : peers_) {
    if (!p.running || p.faultRestarts == 0 || p.faultPaused) continue;
    if (p.signalledAlone && now - *p.signalledAlone < std::chrono::seconds(1)) continue;
    if (p.pid > 1) kill(p.pid, SIGUSR1);
    const bool first = !p.signalledAlone;
    p.signalledAlone = now;
    if (!first) continue;
    std::cout << (tty_ ? "\n" : "") << "grapevine launch: every other peer has exited; peer "
              << p.rank << " (restarted) does not wait for its neighbours\n"
              << std::flush;
  }
}

// Every 0.5 s on a terminal (10 s otherwise) and once when the last peer has exited.
void Supervisor::showProgress(int running) {
  const auto now = std::chrono::steady_clock::now();
  if (!(now - lastPrint_ > std::chrono::milliseconds(tty_ ? 500 : 10000) || running == 0)) return;
  lastPrint_ = now;
  const std::string progress =
      progressLine(peers_, elapsedSeconds(), plan_.config.run.rounds, restarts_);
  if (tty_)
    std::cout << "\r" << progress << "   " << std::flush;
  else if (running > 0)
    std::cout << progress << "\n" << std::flush;
}

PeerProcess* Supervisor::peer(int rank) {
  for (auto& p : peers_) {
    if (p.rank == rank) return &p;
  }
  return nullptr;
}

bool Supervisor::anyRoundRecord() {
  bool any = false;
  for (auto& p : peers_) {
    readNewRecords(p);
    if (!p.last.is_null()) any = true;
  }
  return any;
}

std::vector<int> Supervisor::ranks() const {
  std::vector<int> ranks;
  for (const auto& p : peers_) ranks.push_back(p.rank);
  return ranks;
}

Supervisor::Report Supervisor::report() const {
  Report r;
  r.stopSignal = stopSignal();
  r.launched = static_cast<int>(peers_.size());
  r.failed = failed_;
  r.errored = errored_;
  r.diverged = diverged_;
  r.stopped = stopped_;
  r.failedAtStartup = startupFailures_;
  r.restarts = restarts_;
  return r;
}

double Supervisor::elapsedSeconds() const { return secondsSince(start_); }

}  // namespace grapevine::launch
