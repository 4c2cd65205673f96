// The launcher's process supervisor: starts every local peer as a child process (each leading its
// own process group, listed with a GroupGuard so that no peer outlives the launcher), watches them
// until all have exited for good, restarts crashed peers (--max-restarts, by --restart-scope),
// forwards SIGINT/SIGTERM to them, and reports: one live progress line, a dead peer's exit status
// and last log lines, and the counts behind the command's exit code and summary.
//
// Threads: everything runs on the launcher's main thread; the only asynchronous input is the stop
// signal (signals.h), installed by start(). The fault executor (fault_executor.h) acts on the same
// peers through peer() and respawn(), from watch()'s per-tick callback.
//
// Output: progress and reports go to stdout, prefixed "grapevine launch: ". On a terminal (and
// without --quiet) the progress line is rewritten in place every 0.5 s; otherwise a line is printed
// every 10 s.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "runtime/common/group_guard.h"
#include "runtime/common/status.h"
#include "runtime/launch/peer_command.h"
#include "runtime/launch/peer_process.h"
#include "runtime/launch/plan.h"

namespace grapevine::launch {

class Supervisor {
 public:
  // What the run's peers did, for the exit code and the summary.
  struct Report {
    int stopSignal = 0;  // SIGINT/SIGTERM received by the launcher (0: none)
    int launched = 0;    // local peers
    int failed = 0;    // peers that exited with a status other than 0 and diverged, or by a signal
    int errored = 0;   // of those, the ones that exited with a status (their own error)
    int diverged = 0;  // peers that exited with Options::divergedExitStatus
    int stopped = 0;   // peers that exited after the stop signal was forwarded (0, SIGINT, 130)
    // Peers that exited with an error before their first round; the others were then stopped.
    std::vector<int> failedAtStartup;
    int restarts = 0;  // restarts done (--max-restarts: a peer's or the whole run's)
  };

  // One PeerProcess per plan.ranks; nothing starts yet. `options` and `plan` outlive this object.
  Supervisor(const Options& options, const Plan& plan);

  // Installs the signal handlers, starts the guardian, then every peer (with --resume under
  // options.resume). `command` says what each peer runs and must outlive watch(). Once.
  Status start(const PeerCommand& command);

  // Returns when every peer has exited for good: crashed peers restarted as --max-restarts asks, a
  // stop signal forwarded as SIGINT (SIGKILL to what still runs 5 s later). `everyTick` runs once
  // per 100 ms tick, after the signal was forwarded and before crashed peers start again (the
  // fault executor's poll). Not ok only when a peer could not be started again.
  Status watch(const std::function<void()>& everyTick);

  // For the fault executor, during watch():
  // The peer of `rank`, or null when it is not local.
  PeerProcess* peer(int rank);
  // Starts a peer that has exited again, with --resume (it rejoins the running training); its log
  // is appended to.
  Status respawn(PeerProcess& p);
  // Whether any peer has written a round record (reads every peer's new records).
  bool anyRoundRecord();
  // Whether the progress line is on a terminal (a report then starts on a new line).
  bool tty() const { return tty_; }

  std::vector<int> ranks() const;
  Report report() const;
  double elapsedSeconds() const;  // since start()

 private:
  Status spawnAll(bool resuming);
  Status spawn(PeerProcess& p, const std::string& self, bool resuming);
  int countRunning() const;
  int reapExited();  // returns how many peers still run
  void onExited(PeerProcess& p, int status);
  void forwardSignal(int running);
  // --restart-scope peer: starts the crashed peers again with --resume (they rejoin the running
  // training).
  Status restartCrashedPeers();
  // --restart-scope run: after a peer was killed by a signal, stops the others (SIGINT, SIGKILL
  // after 5 s) and, once none runs, starts every peer again with --resume.
  Status restartIfDue(int running);
  void tellAlone(int running);
  void showProgress(int running);

  const Options& options_;
  const Plan& plan_;
  const PeerCommand* command_ = nullptr;  // set by start()
  std::vector<PeerProcess> peers_;
  // The peers' process groups die with us, even when we are SIGKILLed (start).
  GroupGuard guard_;
  std::chrono::steady_clock::time_point start_;
  bool tty_ = false;
  int failed_ = 0, errored_ = 0, diverged_ = 0, stopped_ = 0;  // as in Report
  int restarts_ = 0;                                           // as in Report
  std::string crash_;      // a peer's death that asks for a whole-run restart ("" when none)
  bool stopping_ = false;  // the others were sent SIGINT for the whole-run restart
  std::chrono::steady_clock::time_point stoppingAt_;
  bool forwarded_ = false;  // the stop signal was forwarded (or the others stopped: below)
  std::vector<int> startupFailures_;  // peers that exited with an error before their first round
  std::chrono::steady_clock::time_point forwardedAt_;
  std::chrono::steady_clock::time_point lastPrint_;
};

}  // namespace grapevine::launch
