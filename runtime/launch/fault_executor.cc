#include "runtime/launch/fault_executor.h"

#include <signal.h>

#include <cstdio>
#include <iostream>

#include "runtime/engine/summary.h"
#include "runtime/launch/emulation.h"
#include "runtime/launch/signals.h"

namespace grapevine::launch {

Status checkFaultSchedule(const config::Config& c, const std::string& configPath, bool emulating) {
  for (std::size_t i = 0; i < c.faults.events.size(); ++i) {
    const auto& e = c.faults.events[i];
    if (e.kind == config::FaultKind::kLinkDown && !emulating) {
      return invalidArgument(configPath + ": faults.events: item " + std::to_string(i) + " (" +
                             e.describe() +
                             "): a link goes down in the emulated network only: add --emulate (or "
                             "network.emulate: netns)");
    }
  }
  return Status::ok();
}

FaultExecutor::FaultExecutor(std::vector<config::FaultEvent> events, Supervisor& supervisor,
                             netemu::Network* network)
    : supervisor_(supervisor), network_(network) {
  for (auto& e : events) runs_.push_back({std::move(e)});
}

void FaultExecutor::poll() {
  if (runs_.empty() || stopSignal()) return;
  const auto now = std::chrono::steady_clock::now();
  if (!trainingStart_) {
    if (!supervisor_.anyRoundRecord()) return;
    trainingStart_ = now;
  }
  const double t = std::chrono::duration<double>(now - *trainingStart_).count();
  for (auto& f : runs_) {
    if (!f.started && t >= f.event.start()) {
      act(f, true, t);
    } else if (f.started && !f.ended && f.event.kind != config::FaultKind::kKill &&
               t >= f.event.end() && !restartPending(f)) {
      act(f, false, t);
    }
  }
}

bool FaultExecutor::restartPending(const Run& f) {
  if (f.event.kind != config::FaultKind::kRestart) return false;
  const PeerProcess* p = supervisor_.peer(f.event.peer);
  return p && p->faultRestarting && p->running;
}

void FaultExecutor::act(Run& f, bool begin, double now) {
  const config::FaultEvent& e = f.event;
  (begin ? f.started : f.ended) = true;
  (begin ? f.startedAt : f.endedAt) = now;
  if (e.kind == config::FaultKind::kKill) f.ended = true;
  std::string what;
  if (e.kind == config::FaultKind::kLinkDown) {
    what = linkAction(f, begin);
  } else if (e.kind == config::FaultKind::kCorrupt) {
    // The peer damages its own messages (it reads the same schedule): nothing to send it.
    what = "peer " + std::to_string(e.peer) +
           (begin ? " corrupts its outgoing messages" : " sends intact messages again") +
           " (by its own clock)";
  } else if (config::isAttack(e.kind)) {
    // The peer crafts its own messages (it reads the same schedule): nothing to send it.
    what = "peer " + std::to_string(e.peer) +
           (begin ? " attacks (" + std::string(config::faultKindName(e.kind)) + ")"
                  : " sends its own model again") +
           " (by its own clock)";
  } else {
    what = peerAction(e, begin);
  }
  char at[32];
  std::snprintf(at, sizeof at, "%.2f", now);
  std::cout << (supervisor_.tty() ? "\n" : "") << "grapevine launch: fault (" << e.describe()
            << "): " << what << " at " << at << " s\n"
            << std::flush;
}

std::string FaultExecutor::linkAction(Run& f, bool begin) {
  const config::FaultEvent& e = f.event;
  // Down first, then count (up: count, then up): what the link carried while down is then only
  // a packet the emulator was writing at the moment the flag changed.
  if (!begin) f.packetsAtUp = linkPackets(network_, e.linkA, e.linkB);
  const Status st = network_ ? network_->setLinkDown(e.linkA, e.linkB, begin)
                             : failedPrecondition("no emulated network");
  if (begin) f.packetsAtDown = linkPackets(network_, e.linkA, e.linkB);
  return std::string("link [") + std::to_string(e.linkA) + ", " + std::to_string(e.linkB) +
         (begin ? "] down" : "] up") + (st.isOk() ? "" : " failed: " + st.message());
}

// pause, kill, restart: signals to the peer's process group, or its start again.
std::string FaultExecutor::peerAction(const config::FaultEvent& e, bool begin) {
  const std::string peer = "peer " + std::to_string(e.peer);
  PeerProcess* p = supervisor_.peer(e.peer);
  if (p && e.kind == config::FaultKind::kRestart && !begin && p->faultRestarting && !p->running) {
    // Down for the event's seconds: back from its newest checkpoint, into the running training.
    p->faultRestarting = false;
    ++p->faultRestarts;
    const Status st = supervisor_.respawn(*p);
    if (!st.isOk()) std::cerr << "grapevine launch: " << st.message() << "\n";
    return peer + (st.isOk() ? " started again with --resume" : " could not be started again");
  }
  if (!p || !p->running) return peer + " is not running: nothing to do";
  if (e.kind == config::FaultKind::kKill) {
    p->faultKilled = true;
    signalGroup(p->pid, SIGKILL);
    return peer + " SIGKILLed";
  }
  if (e.kind == config::FaultKind::kRestart && begin) {
    p->faultRestarting = true;
    signalGroup(p->pid, SIGKILL);
    return peer + " SIGKILLed (to be restarted with --resume)";
  }
  if (e.kind == config::FaultKind::kRestart) return peer + " still exiting: nothing to do";
  p->faultPaused = begin;  // pause
  signalGroup(p->pid, begin ? SIGSTOP : SIGCONT);
  return peer + (begin ? " SIGSTOPped" : " SIGCONTinued");
}

nlohmann::json FaultExecutor::json() const {
  if (runs_.empty()) return nullptr;
  nlohmann::json out = nlohmann::json::array();
  for (const auto& f : runs_) {
    const auto& e = f.event;
    nlohmann::json j = engine::faultEventJson(e);
    j["executed_at"] = f.started ? nlohmann::json(f.startedAt) : nlohmann::json(nullptr);
    if (e.kind != config::FaultKind::kKill)
      j["ended_at"] = f.ended ? nlohmann::json(f.endedAt) : nlohmann::json(nullptr);
    if (e.kind == config::FaultKind::kLinkDown && network_) {
      // What the link carried (both directions): the test that it heals reads these.
      const std::uint64_t now = linkPackets(network_, e.linkA, e.linkB);
      j["packets_before"] = f.packetsAtDown;
      j["packets_while_down"] = f.packetsAtUp - f.packetsAtDown;
      j["packets_after"] = f.ended ? now - f.packetsAtUp : 0;
      j["dropped_down"] = linkDroppedDown(*network_, e.linkA, e.linkB);
    }
    out.push_back(std::move(j));
  }
  return out;
}

}  // namespace grapevine::launch
