// faults.events under `grapevine launch`: each event at its wall time, counted from the first round
// record any peer writes (not from the launch: peers take a while to boot), against the real
// processes (pause: SIGSTOP/SIGCONT, kill: SIGKILL, restart: SIGKILL, then a start with --resume
// when the event ends) and the emulated network (link-down: the link between two peers down, then
// up). A corrupt event is the peer's own doing (it reads the same schedule); the executor only says
// so. Each action is announced on stdout; summary.json's "faults" says when each was executed.
//
// Threads: the launcher's main thread, from Supervisor::watch's per-tick callback (poll) and after
// watch (json). Nothing happens once a stop signal has arrived.
#pragma once

#include <chrono>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "runtime/common/status.h"
#include "runtime/config/config.h"
#include "runtime/launch/supervisor.h"
#include "runtime/netemu/network.h"

namespace grapevine::launch {

// kInvalidArgument (naming `configPath`, the item and what to add) when an event of `c` cannot run
// under this launch: a link goes down in the emulated network only.
Status checkFaultSchedule(const config::Config& c, const std::string& configPath, bool emulating);

class FaultExecutor {
 public:
  // `supervisor` and `network` (the emulated network, or null) outlive every call.
  FaultExecutor(std::vector<config::FaultEvent> events, Supervisor& supervisor,
                netemu::Network* network);

  // Executes what is due: an event's start once its time has come, its end (not a kill's) once its
  // seconds have passed and, for a restart, once the killed peer was reaped.
  void poll();

  // summary.json's "faults": each event (engine::faultEventJson), when it was executed
  // ("executed_at", "ended_at": seconds since the first round record, null when the run ended
  // first) and, for a link, what it carried before, while and after it was down. null without
  // events. Call before the network stops (it reads the links' counters).
  nlohmann::json json() const;

 private:
  // One faults.events item and what was done with it.
  struct Run {
    config::FaultEvent event;
    bool started = false, ended = false;
    double startedAt = 0.0, endedAt = 0.0;  // seconds since the first round record
    // link-down: packets delivered on the link (both directions) when it went down and up again.
    std::uint64_t packetsAtDown = 0, packetsAtUp = 0;
  };

  // A restart whose peer was killed but not reaped yet: its start waits for that.
  bool restartPending(const Run& f);
  // Starts (`begin`) or ends event f at `now` seconds, and says so.
  void act(Run& f, bool begin, double now);
  std::string linkAction(Run& f, bool begin);  // returns what was done, for the announcement
  std::string peerAction(const config::FaultEvent& e, bool begin);

  std::vector<Run> runs_;
  Supervisor& supervisor_;
  netemu::Network* network_;
  std::optional<std::chrono::steady_clock::time_point> trainingStart_;  // first round record
};

}  // namespace grapevine::launch
