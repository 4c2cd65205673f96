// One local peer as the launcher sees it: its process, its files, what its records said last, and
// what the fault schedule and the restarts did to it. The Supervisor owns them; the fault executor
// changes the fault flags through Supervisor::peer(). Main thread only.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace grapevine::launch {

struct PeerProcess {
  int rank = 0;
  pid_t pid = -1;             // leads its own process group once it has run setpgid
  bool running = false;       // started and not reaped yet
  int status = 0;             // waitpid status, once reaped
  std::string jsonl, log;     // DIR/peer-<rank>.jsonl (its records), DIR/peer-<rank>.log (output)
  std::streamoff offset = 0;  // of jsonl: read up to here
  nlohmann::json last;        // last record
  double accuracy = NAN;      // latest test accuracy seen in any record
  double testLoss = NAN;      // latest test loss seen in any record (a program's report())
  bool faultKilled = false;   // SIGKILLed by the fault schedule (faults.events): not a crash
  bool faultPaused = false;   // SIGSTOPped by the fault schedule, not yet continued
  // SIGKILLed by the fault schedule's restart: started again with --resume when the event ends
  // (it rejoins the running training); neither a crash nor a failure.
  bool faultRestarting = false;
  int faultRestarts = 0;      // times it was started again (a fault's restart, or a crash's)
  bool crashRestart = false;  // crashed; --restart-scope peer starts it again in watch()
  // The last SIGUSR1 of Supervisor::tellAlone (every other peer has exited); none yet: not told.
  std::optional<std::chrono::steady_clock::time_point> signalledAlone;
};

// Reads the records appended to p.jsonl since the last call into p.last (the last one with a
// numeric "round"), p.accuracy and p.testLoss; a partial last line is left for the next call.
void readNewRecords(PeerProcess& p);

// The last `lines` lines of the file at `path`, each indented by four spaces and ending in a
// newline: what a dead peer's report shows of its log.
std::string tailLines(const std::string& path, int lines);

// Sends `sig` to the process group `pid` leads (a peer runs setpgid right after the fork:
// Subprocess's newProcessGroup); before that, only the process itself can be reached. Never a pid
// that kill() reads as "every process" or "our own group" (-1, 0), or init.
void signalGroup(pid_t pid, int sig);

// A waitpid status in words: "exited with status 1", "was killed by signal Killed", "stopped".
std::string describeStatus(int status);

}  // namespace grapevine::launch
