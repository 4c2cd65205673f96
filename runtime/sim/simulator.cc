#include "runtime/sim/simulator.h"

#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <utility>

#include "runtime/common/elapsed.h"
#include "runtime/common/log.h"
#include "runtime/engine/collectives.h"
#include "runtime/engine/deadline.h"
#include "runtime/engine/records.h"
#include "runtime/engine/setup.h"
#include "runtime/engine/summary.h"
#include "runtime/sim/faults.h"
#include "runtime/sim/link_model.h"
#include "runtime/sim/liveness.h"
#include "runtime/sim/peer_files.h"
#include "runtime/sim/worker_pool.h"

namespace grapevine::sim {
namespace {

using Clock = std::chrono::steady_clock;

// CPU time of the calling thread: a peer's compute cost even when the pool's threads outnumber the
// free cores (wall time would then count the waits for a core). BLAS runs single-threaded in a peer
// (workloadOptions sets workload threads to 1), so the work happens on this thread.
double threadCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

struct PeerState {
  double clock = 0.0;  // simulated seconds at the end of the last round
  double ready = 0.0;  // when this round's message left
  bool anyLost = false;
  std::vector<int> lostFrom;  // the awaited neighbours whose message never comes this round
  // When each delivered message of the round arrived (sender, seconds), for adaptive deadlines.
  std::vector<std::pair<int, double>> arrivedAt;
  engine::ArrivalDeadlines deadlines;  // algorithm.round_timeout, adaptive_timeout
  // algorithm.staleness: messages on their way to this peer (arrival, sender, round, bytes), and
  // when each neighbour's message of each recent round arrives (+inf: never).
  struct InFlight {
    double arrival = 0.0;
    int from = 0;
    std::int64_t round = 0;
    std::vector<std::uint8_t> bytes;
  };
  std::vector<InFlight> inflight;
  std::map<int, std::map<std::int64_t, double>> arrivals;
  std::map<int, double> lastArrival;  // per edge: a message never overtakes the one before (TCP)
  std::uint64_t lost = 0;
  double arrival = 0.0;            // latest arrival of a delivered message this round
  std::uint64_t faultDropped = 0;  // messages a fault took (link down, receiver down)
  // Overlapped push-sum (PeerCore::mixDelay): each round's latest arrival, until a mix takes it.
  std::map<std::int64_t, double> arrivalOf;
  // Neighbours this peer's core quarantined in the last mix (robust mixing's trust), with why.
  std::vector<std::pair<int, std::string>> quarantined;
  std::vector<int> incoming;
  // With node caps (network.node_bandwidth_mbit): incomingSlot[k] is incoming[k]'s index into its
  // sender's outgoing; outgoing are this round's receivers, egressDone when each message had
  // passed this peer's interface (shared by all of them, LinkModel::nodeBitsPerSecond).
  std::vector<std::size_t> incomingSlot;
  std::vector<int> outgoing;
  std::vector<double> egressDone;
  Status status;
  double testAccuracy = std::numeric_limits<double>::quiet_NaN();  // at the last evaluation
  double testLoss = std::numeric_limits<double>::quiet_NaN();
};

Status firstError(const std::vector<PeerState>& states) {
  for (const auto& s : states) {
    if (!s.status.isOk()) return s.status;
  }
  return Status::ok();
}

// The mean of every peer's model and the consensus distance (1/n) sum_i |x_i - xbar|^2 / |xbar|^2
// (not divided when xbar is 0). Exact: every model is in this process.
struct ModelSpread {
  std::vector<double> mean;
  double consensusDistance = 0.0;
};

ModelSpread modelSpread(const std::vector<std::unique_ptr<engine::PeerCore>>& peers) {
  const std::size_t n = peers.front()->model().size();
  ModelSpread s;
  s.mean.assign(n, 0.0);
  for (const auto& p : peers) {
    const auto m = p->model();
    for (std::size_t k = 0; k < n; ++k) s.mean[k] += m[k];
  }
  for (double& v : s.mean) v /= static_cast<double>(peers.size());
  double meanNorm = 0.0, dist = 0.0;
  for (double v : s.mean) meanNorm += v * v;
  for (const auto& p : peers) {
    const auto m = p->model();
    for (std::size_t k = 0; k < n; ++k) dist += (m[k] - s.mean[k]) * (m[k] - s.mean[k]);
  }
  dist /= static_cast<double>(peers.size());
  s.consensusDistance = meanNorm > 0 ? dist / meanNorm : dist;
  return s;
}

// One line of DIR/evals.jsonl: what the whole run looks like at an evaluation round (all models are
// in this process, so the consensus distance and the averaged model's accuracy are exact).
Result<nlohmann::json> evaluationPoint(const std::vector<std::unique_ptr<engine::PeerCore>>& peers,
                                       const std::vector<PeerState>& states, std::int64_t round,
                                       double wall) {
  const ModelSpread spread = modelSpread(peers);
  double simTime = 0.0, acc = 0.0, testLoss = 0.0, trainLoss = 0.0, bytes = 0.0, dense = 0.0;
  for (std::size_t i = 0; i < peers.size(); ++i) {
    simTime = std::max(simTime, states[i].clock);
    acc += states[i].testAccuracy;
    testLoss += states[i].testLoss;
    trainLoss += peers[i]->lastLoss();
    bytes += static_cast<double>(peers[i]->counters().bytesSent);
    dense += static_cast<double>(peers[i]->counters().bytesDenseEquivalent);
  }
  const double np = static_cast<double>(peers.size());
  auto num = [](double v) {
    return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr);
  };
  nlohmann::json j;
  j["round"] = round + 1;  // rounds completed
  j["sim_time"] = simTime;
  j["wall_time"] = wall;
  j["bytes_sent_per_peer"] = bytes / np;
  j["bytes_dense_per_peer"] = dense / np;
  j["train_loss"] = num(trainLoss / np);
  j["test_accuracy_mean"] = num(acc / np);
  j["test_loss_mean"] = num(testLoss / np);
  j["consensus_distance"] = num(spread.consensusDistance);
  const std::vector<float> meanF(spread.mean.begin(), spread.mean.end());
  const auto ev = peers.front()->workload().evaluateTest(meanF);
  j["averaged_model_accuracy"] = num(ev.accuracy);
  return j;
}

// One run of runSimulation: the peers, their simulated state and the worker pool, with one method
// per step of a round (see simulator.h). Owned and driven by the calling thread; the per-peer steps
// run on the pool, each peer's state touched only by the index that owns it.
class Simulation {
 public:
  Simulation(const engine::RunPlan& plan, const SimOptions& options)
      : plan_(plan),
        c_(plan.config),
        options_(options),
        dir_(options.outDir),
        files_(options.outDir, static_cast<std::size_t>(plan.config.peers.count)),
        count_(static_cast<std::size_t>(plan.config.peers.count)),
        link_(c_.network, c_.run.seed),
        fixedCompute_(c_.network.computeMs > 0.0
                          ? c_.network.computeMs * 1e-3 * std::max(1, c_.algorithm.localSteps)
                          : -1.0),
        pool_(options.threads) {
    result_.threads = pool_.threads();
    result_.rssBeforePeers = residentBytes();
  }

  // Builds every peer in parallel; the first error by rank.
  Status createPeers() {
    peers_.resize(count_);
    states_.resize(count_);
    for (auto& s : states_) {
      s.deadlines =
          engine::ArrivalDeadlines(c_.algorithm.roundTimeout, c_.algorithm.adaptiveTimeout);
    }
    pool_.parallelFor(count_, [&](std::size_t i) {
      auto p = engine::makePeer(plan_, static_cast<int>(i), 0);
      if (p.isOk())
        peers_[i] = std::move(*p);
      else
        states_[i].status = p.status();
    });
    GV_RETURN_IF_ERROR(firstError(states_));
    liveness_ = std::make_unique<Liveness>(peers_, c_.run.rounds, c_.peers.deadAfter);
    faults_ = std::make_unique<FaultRunner>(plan_, peers_, *liveness_);
    return Status::ok();
  }

  // Creates outDir, truncates every peer's records and removes an old evals.jsonl.
  Status prepareOutDir() const { return files_.prepare(); }

  // The wall clock of the records starts here.
  void startClock() { start_ = Clock::now(); }

  // One round; false when training diverged in it (the run stops).
  Result<bool> runRound(std::int64_t t) {
    if (!c_.faults.events.empty()) GV_RETURN_IF_ERROR(faults_->before(t, clocks()));
    GV_RETURN_IF_ERROR(computePhase(t));
    if (stopOnDivergence(false)) return false;
    routeMessages();
    if (link_.nodeCapped()) egressPhase();
    deliveryPhase(t);
    const engine::RoundReport due = engine::roundReport(c_, t);
    const double wall = wallSeconds();
    GV_RETURN_IF_ERROR(mixPhase(due, wall));
    applyQuarantines(t);
    if (stopOnDivergence(true)) return false;
    if (averaging_) {
      averagePhase(t, due, wall);
      if (stopOnDivergence(true)) return false;
    }
    if (!c_.faults.events.empty()) afterFaults(t);
    if (due.evaluate && files_.enabled()) GV_RETURN_IF_ERROR(appendEvaluationPoint(t, wall));
    reportProgress(t);
    return true;
  }

  // A peer that quarantined a neighbour closes its connections in a real run: the neighbour finds
  // it dead (and its redials are refused). Serially, after the parallel mix (which recorded the
  // quarantine at the peer itself).
  void applyQuarantines(std::int64_t t) {
    for (std::size_t i = 0; i < count_; ++i) {
      for (const auto& [j, why] : std::exchange(states_[i].quarantined, {})) {
        log::info("round ", t, ": peer ", i, ": neighbour ", j, " ", why);
        liveness_->connectionFailed(j, static_cast<int>(i));
      }
    }
  }

  void endRounds() {
    result_.roundsWallSeconds = wallSeconds();
    result_.rssAfterRounds = residentBytes();
  }

  // After the local steps (every peer then abandons the round) or after mixing (the peers that
  // diverged abandon it): true when a peer diverged. The message carries the exact consensus
  // distance of the models as they were.
  bool stopOnDivergence(bool afterMixing) {
    const engine::Divergence* first = nullptr;
    for (const auto& p : peers_) {
      if (p->divergence()) {
        first = &*p->divergence();
        break;
      }
    }
    if (!first) return false;
    result_.divergence = *first;
    result_.divergenceMessage =
        engine::divergenceMessage(*first, modelSpread(peers_).consensusDistance);
    for (auto& p : peers_) {
      if (!afterMixing || p->divergence()) p->abandonRound();
    }
    return true;
  }

  // run.final_average, as the peers run it (engine::averagingCollectives), in lockstep: every live
  // peer takes each collective step, the messages go straight to the live receivers, and every
  // peer combines what it got. Not after a divergence (the peers stopped). Untimed.
  void finalAverage() {
    if (result_.divergence) return;
    const std::size_t values = peers_.empty() ? 0 : peers_[0]->model().size();
    // Around the ring when no live peer lost a ring neighbour (the same agreement as the peers').
    bool ring = engine::ringAveraging(plan_, values);
    if (ring) {
      std::vector<double> intact(count_, 1.0);
      for (std::size_t i = 0; i < count_; ++i) {
        const auto t = engine::collectiveTree(plan_, static_cast<int>(i), values);
        if (peers_[i]->isDead(t.ringPrev) || peers_[i]->isDead(t.ringNext)) intact[i] = 0.0;
      }
      runCollectives(engine::ringAgreementCollectives(plan_), &intact);
      for (std::size_t i = 0; i < count_; ++i) {
        if (!faults_->killed(i) && peers_[i]->collectiveState().at(0) < 1.0) ring = false;
      }
    }
    const auto kinds = engine::averagingCollectives(plan_, values, ring);
    if (engine::usesTree(kinds)) {
      for (std::size_t i = 0; i < count_; ++i)
        peers_[i]->setCollectiveTree(engine::collectiveTree(plan_, static_cast<int>(i), values));
    }
    runCollectives(kinds, nullptr);
  }

  // A sequence of collectives in lockstep (`initial`: each peer's small starting state; null: on
  // the models).
  void runCollectives(const std::vector<engine::CollectiveKind>& kinds,
                      const std::vector<double>* initial) {
    bool first = true;
    for (engine::CollectiveKind kind : kinds) {
      for (std::size_t i = 0; i < count_; ++i) {
        if (faults_->killed(i)) continue;
        if (first && initial) {
          peers_[i]->beginCollective(kind, std::span<const double>(&(*initial)[i], 1));
        } else {
          peers_[i]->beginCollective(kind);
        }
      }
      first = false;
      for (std::size_t i = 0; i < count_; ++i) {
        if (faults_->killed(i)) continue;
        for (int j : peers_[i]->sendTo()) {
          const auto to = static_cast<std::size_t>(j);
          if (!faults_->killed(to))
            peers_[to]->onMessage(static_cast<int>(i), peers_[i]->outgoing(j));
        }
      }
      for (std::size_t i = 0; i < count_; ++i) {
        if (!faults_->killed(i)) peers_[i]->endCollective();
      }
    }
    for (std::size_t i = 0; i < count_; ++i) {
      if (!faults_->killed(i)) peers_[i]->finishCollectives();
    }
  }

  // Final evaluation, record, model and final.json of every peer, as `grapevine peer` writes them.
  Status finishPeers() {
    result_.peers.resize(count_);
    pool_.parallelFor(count_, [&](std::size_t i) { finishPeer(i); });
    GV_RETURN_IF_ERROR(firstError(states_));
    result_.wallSeconds = wallSeconds();
    return Status::ok();
  }

  // Clocks, losses and the summary (written to outDir); the peers are released first.
  Result<SimResult> summarize() {
    collectClocks();
    peers_.clear();  // the summary evaluates the averaged model with a fresh workload
    auto& summary = result_.summary;
    summary = engine::makeSummary(plan_, result_.peers, result_.wallSeconds, "sim");
    summary["simulated_seconds"] = result_.simulatedSeconds;
    summary["sim"] = simBlock();
    if (!c_.faults.events.empty()) summary["faults"] = faults_->log();
    if (result_.divergence) summary["diverged_message"] = result_.divergenceMessage;
    if (!dir_.empty()) GV_RETURN_IF_ERROR(engine::writeJsonFile(dir_ + "/summary.json", summary));
    return std::move(result_);
  }

 private:
  double wallSeconds() const { return secondsSince(start_); }

  // Seconds of compute for a step that began at thread CPU time cpu0, before the peer's scale.
  double computeSince(double cpu0) const {
    return fixedCompute_ >= 0.0 ? fixedCompute_ : threadCpuSeconds() - cpu0;
  }

  // 1. Local steps and messages.
  Status computePhase(std::int64_t t) {
    if (c_.algorithm.staleness > 0) return computePhaseStale(t);
    pool_.parallelFor(count_, [&](std::size_t i) {
      if (faults_->down(i)) {
        startRound(states_[i], states_[i].clock);  // computes nothing, sends nothing
      } else {
        computePeer(i, t, false);
      }
    });
    return firstError(states_);
  }

  // Round t begins for a peer: its message leaves at `ready`, nothing has come yet.
  static void startRound(PeerState& s, double ready) {
    s.ready = ready;
    s.incoming.clear();
    s.anyLost = false;
    s.lostFrom.clear();
    s.arrivedAt.clear();
    s.arrival = ready;
  }

  // Peer i's local steps (none when `skip`: algorithm.staleness) and message of round t; its
  // compute time, scaled by its compute_scale, sets when the message leaves.
  void computePeer(std::size_t i, std::int64_t t, bool skip) {
    PeerState& s = states_[i];
    // Neighbours silent for peers.dead_after by the time the round begins are dropped first.
    liveness_->noticeSilence(static_cast<int>(i), s.clock);
    const double cpu0 = threadCpuSeconds();
    engine::RoundInput input;
    input.skipCompute = skip;
    s.status = peers_[i]->beginRound(t, input);
    const double compute = skip ? 0.0 : computeSince(cpu0);
    startRound(s, s.clock + compute * c_.network.computeScaleOf(static_cast<int>(i)));
  }

  // algorithm.staleness: a peer whose every neighbour's message of round t reached it before it
  // began the round takes no local steps (RoundInput::skipCompute), as the driver decides. That
  // needs those neighbours' messages first: only a peer whose clock is ahead of every neighbour's
  // can find them all there, and no two neighbours are both, so those peers go second (their
  // neighbours computed), each checking its neighbours' arrival by the link model (latency, jitter,
  // bytes over the link's bandwidth; node caps are not applied to this check).
  Status computePhaseStale(std::int64_t t) {
    std::vector<std::uint8_t> later(count_, 0);
    for (std::size_t i = 0; i < count_; ++i) {
      if (faults_->down(i)) continue;
      const auto from = peers_[i]->liveSenders(t);
      later[i] = !from.empty() && std::all_of(from.begin(), from.end(), [&](int j) {
        const auto k = static_cast<std::size_t>(j);
        return !faults_->down(k) && states_[k].clock < states_[i].clock;
      });
    }
    pool_.parallelFor(count_, [&](std::size_t i) {
      if (faults_->down(i)) {
        startRound(states_[i], states_[i].clock);
      } else if (!later[i]) {
        computePeer(i, t, false);
      }
    });
    GV_RETURN_IF_ERROR(firstError(states_));
    pool_.parallelFor(count_, [&](std::size_t i) {
      if (!later[i]) return;
      const int to = static_cast<int>(i);
      bool ahead = true;
      for (int j : peers_[i]->liveSenders(t)) {
        if (faults_->linkDown(j, to) || link_.lost(j, to, t)) {
          ahead = false;
          break;
        }
        const auto bytes = peers_[static_cast<std::size_t>(j)]->outgoing(to);
        const double at =
            states_[static_cast<std::size_t>(j)].ready + link_.delaySeconds(j, to, t, bytes.size());
        if (at > states_[i].clock) {
          ahead = false;
          break;
        }
      }
      computePeer(i, t, ahead);
    });
    return firstError(states_);
  }

  // Who sends to whom, in increasing sender rank (O(edges), serial: it fixes the delivery order).
  void routeMessages() {
    for (auto& s : states_) {
      s.incomingSlot.clear();
      s.outgoing.clear();
    }
    for (std::size_t j = 0; j < count_; ++j) {
      if (faults_->down(j)) continue;  // its sendTo() is a past round's
      for (int i : peers_[j]->sendTo()) {
        if (faults_->down(static_cast<std::size_t>(i))) {
          ++states_[j].faultDropped;  // a down peer receives nothing (it sees a gap later)
          continue;
        }
        PeerState& to = states_[static_cast<std::size_t>(i)];
        to.incoming.push_back(static_cast<int>(j));
        to.incomingSlot.push_back(states_[j].outgoing.size());
        states_[j].outgoing.push_back(i);
      }
    }
  }

  // 1b. With node caps: each sender's messages leave through its one interface together, sharing
  // it (shareInterface), each also held to its link's bandwidth. A message on a link that is down
  // never enters it (as in the emulator); a lost one does (it is lost further on).
  void egressPhase() {
    pool_.parallelFor(count_, [&](std::size_t j) {
      PeerState& s = states_[j];
      const int from = static_cast<int>(j);
      std::vector<Transfer> transfers(s.outgoing.size());
      for (std::size_t k = 0; k < s.outgoing.size(); ++k) {
        const int to = s.outgoing[k];
        transfers[k].start = s.ready;
        if (faults_->linkDown(from, to)) continue;  // zero bits: done at once, never delivered
        transfers[k].bits = 8.0 * static_cast<double>(peers_[j]->outgoing(to).size());
        transfers[k].maxBitsPerSecond = link_.params(from, to).bandwidthBitsPerSecond;
      }
      s.egressDone = shareInterface(link_.nodeBitsPerSecond(from), transfers);
    });
  }

  // 2. Delivery: a receiver mutates only itself; senders' outgoing buffers are only read.
  void deliveryPhase(std::int64_t t) {
    const bool stale = c_.algorithm.staleness > 0;
    pool_.parallelFor(count_, [&](std::size_t i) {
      PeerState& s = states_[i];
      const int to = static_cast<int>(i);
      if (faults_->down(i)) return;
      // A neighbour that is down (paused, restarting) is waited for until the round's deadline.
      for (int j : peers_[i]->expectedFrom()) {
        if (faults_->down(static_cast<std::size_t>(j))) {
          s.anyLost = true;
          s.lostFrom.push_back(j);
        }
      }
      const bool capped = link_.nodeCapped();
      std::vector<Transfer> ingress;  // with node caps: the messages through i's interface
      std::vector<int> ingressFrom;   // ... and their senders
      for (std::size_t k = 0; k < s.incoming.size(); ++k) {
        const int j = s.incoming[k];
        if (faults_->linkDown(j, to)) {
          s.anyLost = true;  // waited for until the deadline, as a loss
          s.lostFrom.push_back(j);
          ++s.faultDropped;
          continue;
        }
        if (link_.lost(j, to, t)) {
          s.anyLost = true;
          s.lostFrom.push_back(j);
          ++s.lost;
          continue;
        }
        const auto bytes = peers_[static_cast<std::size_t>(j)]->outgoing(to);
        // algorithm.staleness: it reaches the core when it arrives (mixPeer), not in its round.
        if (stale) {
          s.inflight.push_back({0.0, j, t, std::vector<std::uint8_t>(bytes.begin(), bytes.end())});
        } else {
          peers_[i]->onMessage(j, bytes);
        }
        const PeerState& from = states_[static_cast<std::size_t>(j)];
        if (!capped) {
          const double at = from.ready + link_.delaySeconds(j, to, t, bytes.size());
          s.arrival = std::max(s.arrival, at);
          if (s.deadlines.adaptive() || stale) s.arrivedAt.emplace_back(j, at);
          continue;
        }
        // Its first bit reaches i's interface after the latency and jitter; it cannot arrive
        // faster than it left j's interface (egressPhase), whose pace it keeps.
        Transfer in;
        in.start = from.ready + link_.params(j, to).latencySeconds + link_.jitterSeconds(j, to, t);
        in.bits = 8.0 * static_cast<double>(bytes.size());
        const double upstream = from.egressDone[s.incomingSlot[k]] - from.ready;
        if (upstream > 0.0) in.maxBitsPerSecond = in.bits / upstream;
        ingress.push_back(in);
        ingressFrom.push_back(j);
      }
      if (capped) {
        const std::vector<double> done = shareInterface(link_.nodeBitsPerSecond(to), ingress);
        for (std::size_t k = 0; k < done.size(); ++k) {
          s.arrival = std::max(s.arrival, done[k]);
          if (s.deadlines.adaptive() || stale) s.arrivedAt.emplace_back(ingressFrom[k], done[k]);
        }
      }
      if (stale) {
        // The queued messages of this round (in arrivedAt's order) get their arrival times.
        std::size_t q = s.inflight.size() - s.arrivedAt.size();
        for (auto& [j, at] : s.arrivedAt) {
          double& last = s.lastArrival[j];
          at = std::max(at, last);
          last = at;
          s.inflight[q++].arrival = at;
          s.arrivals[j][t] = at;
        }
        for (int j : s.lostFrom) s.arrivals[j][t] = std::numeric_limits<double>::infinity();
      }
      if (peers_[i]->mixDelay() > 0) s.arrivalOf[t] = s.arrival;
    });
  }

  // 3. Mixing, clocks, records.
  Status mixPhase(const engine::RoundReport& due, double wall) {
    pool_.parallelFor(count_, [&](std::size_t i) { mixPeer(i, due, wall); });
    return firstError(states_);
  }

  void mixPeer(std::size_t i, const engine::RoundReport& due, double wall) {
    if (faults_->down(i)) return;
    PeerState& s = states_[i];
    engine::PeerCore& p = *peers_[i];
    double end = s.arrival;
    if (p.mixDelay() > 0) {
      // The round waits only for the messages of the rounds it mixes.
      end = s.ready;
      auto& a = s.arrivalOf;
      for (auto it = a.begin(); it != a.end() && it->first <= p.dueRound(); it = a.erase(it))
        end = std::max(end, it->second);
    }
    if (c_.algorithm.overlap && p.mixDelay() == 0) {
      // The real driver computes the next gradient while it waits for its neighbours.
      const double cpu0 = threadCpuSeconds();
      p.precomputeGradient();
      const double g = computeSince(cpu0);
      end = std::max(end, s.ready + g * c_.network.computeScaleOf(static_cast<int>(i)));
    }
    if (c_.algorithm.staleness > 0) {
      end = staleRoundEnd(i);
    } else if (s.anyLost) {
      end = std::max(end, lostWaitEnd(i));
    }
    // A neighbour dropped for its silence meanwhile is no longer awaited (its message is no
    // suspect) and counts neither way for the adaptive deadlines, as in the driver.
    liveness_->noticeSilence(static_cast<int>(i), end);
    if (s.deadlines.adaptive()) {
      for (const auto& [j, at] : s.arrivedAt) s.deadlines.arrived(j, at - s.ready);
      for (int j : s.lostFrom) {
        if (!p.isDead(j)) s.deadlines.missed(j);
      }
    }
    s.clock = end;
    const auto suspects = p.endRound();
    s.quarantined = p.takeQuarantined();
    for (const auto& [j, why] : s.quarantined) liveness_->quarantined(static_cast<int>(i), j);
    if (p.divergence()) return;  // the round is abandoned (stopOnDivergence)
    if (averaging_) return;      // recorded after the round's average (averagePhase)
    recordIfDue(i, due, suspects, wall);
  }

  // The round waits for a message that never comes until its deadline (round_timeout, or with
  // adaptive_timeout the latest of the missing neighbours' own; engine/deadline.h), or until its
  // sender is dropped for silence (Liveness::deathAt), whichever comes first.
  double lostWaitEnd(std::size_t i) const {
    const PeerState& s = states_[i];
    double end = s.ready;
    std::vector<int> waited;
    for (int j : s.lostFrom) {
      const double death = liveness_->deathAt(static_cast<int>(i), j);
      if (death < s.ready + s.deadlines.deadline(j)) {
        end = std::max(end, death);
      } else {
        waited.push_back(j);
      }
    }
    if (!waited.empty()) end = std::max(end, s.ready + s.deadlines.latest(waited));
    return end;
  }

  // algorithm.staleness: the round waits for each neighbour j it hears from until a message of j
  // of round t - staleness or later has arrived (PeerCore::waitingFor), or until j's deadline when
  // none of those will (lost, or j down). Then every queued message that has arrived by then goes
  // to the core, per edge in order; the rest wait for a later round's mix.
  double staleRoundEnd(std::size_t i) {
    PeerState& s = states_[i];
    engine::PeerCore& p = *peers_[i];
    const std::int64_t t = p.round(), need = t - c_.algorithm.staleness;
    double end = s.ready;
    for (int j : p.expectedFrom()) {
      if (need < 0 || p.lastRoundFrom(j) >= need) continue;  // it had one already
      double first = std::numeric_limits<double>::infinity();
      auto& byRound = s.arrivals[j];
      for (auto it = byRound.lower_bound(need); it != byRound.end(); ++it)
        first = std::min(first, it->second);
      const double given = std::min(s.ready + s.deadlines.deadline(j),
                                    std::max(s.ready, liveness_->deathAt(static_cast<int>(i), j)));
      end = std::max(end, std::isfinite(first) ? first : given);
    }
    // Deliver what has arrived by `end`, by sender, each edge in round order (stable sort).
    std::stable_sort(s.inflight.begin(), s.inflight.end(),
                     [](const PeerState::InFlight& a, const PeerState::InFlight& b) {
                       return a.from != b.from ? a.from < b.from : a.round < b.round;
                     });
    std::vector<PeerState::InFlight> keep;
    for (auto& m : s.inflight) {
      // In order per edge: once one of j's messages is still on its way, so are j's later ones.
      const bool blocked = !keep.empty() && keep.back().from == m.from;
      if (!blocked && m.arrival <= end) {
        p.onMessage(m.from, m.bytes);
      } else {
        keep.push_back(std::move(m));
      }
    }
    s.inflight = std::move(keep);
    for (auto& [j, byRound] : s.arrivals) byRound.erase(byRound.begin(), byRound.lower_bound(need));
    return end;
  }

  // 4. allreduce, diloco: the round's exact average over the collectives the peers run (ring or
  // tree), in lockstep as finalize averaging runs; each peer's clock follows its messages: a step
  // ends at a peer when its own previous step ended and each awaited message arrived (its sender's
  // previous step's end plus the link's delay for its bytes). Node caps and losses are not applied
  // to these transfers, and a down peer's missing messages cost no wait (a real peer waits up to
  // algorithm.round_timeout for each). Then the outer step, the divergence check and the record.
  void averagePhase(std::int64_t t, const engine::RoundReport& due, double wall) {
    std::vector<double> clock(count_), next(count_);
    for (std::size_t i = 0; i < count_; ++i) {
      clock[i] = states_[i].clock;
      if (live(i)) peers_[i]->setRoundCollectives(true);
    }
    for (engine::CollectiveKind kind : peers_.front()->roundCollectives()) {
      for (std::size_t i = 0; i < count_; ++i) {
        if (live(i)) peers_[i]->beginCollective(kind);
      }
      next = clock;
      for (std::size_t i = 0; i < count_; ++i) {
        if (!live(i)) continue;
        for (int j : peers_[i]->sendTo()) {
          const auto to = static_cast<std::size_t>(j);
          if (!live(to) || faults_->linkDown(static_cast<int>(i), j)) continue;
          const auto bytes = peers_[i]->outgoing(j);
          peers_[to]->onMessage(static_cast<int>(i), bytes);
          next[to] = std::max(
              next[to], clock[i] + link_.delaySeconds(static_cast<int>(i), j, t, bytes.size()));
        }
      }
      clock = next;
      for (std::size_t i = 0; i < count_; ++i) {
        if (live(i)) peers_[i]->endCollective();
      }
    }
    for (std::size_t i = 0; i < count_; ++i) {
      if (!live(i)) continue;
      engine::PeerCore& p = *peers_[i];
      p.finishCollectives();
      p.setRoundCollectives(false);
      p.finishAveragedRound();
      if (p.divergence()) continue;  // the round is abandoned (stopOnDivergence)
      states_[i].clock = clock[i];
      recordIfDue(i, due, {}, wall);
    }
  }
  bool live(std::size_t i) const { return faults_->live(i); }
  // After round t with a fault schedule: its in-memory checkpoints, and the clocks of the peers
  // that are down (they wait for the others: the latest clock of a peer that ran).
  void afterFaults(std::int64_t t) {
    faults_->after(t);
    double latest = 0.0;
    for (std::size_t i = 0; i < count_; ++i) {
      if (!faults_->down(i)) latest = std::max(latest, states_[i].clock);
    }
    for (std::size_t i = 0; i < count_; ++i) {
      if (faults_->down(i)) states_[i].clock = std::max(states_[i].clock, latest);
    }
  }
  // Every peer's clock at the end of its last round.
  std::vector<double> clocks() const {
    std::vector<double> c(count_);
    for (std::size_t i = 0; i < count_; ++i) c[i] = states_[i].clock;
    return c;
  }

  // When the round is due (logged, evaluated, or an event: suspects, deaths, revivals, rejoins),
  // appends peer i's round record to its pending text, flushed to its file in large writes; then
  // the round's membership moves are done with.
  void recordIfDue(std::size_t i, const engine::RoundReport& due, const std::vector<int>& suspects,
                   double wall) {
    const int me = static_cast<int>(i);
    const auto& dead = liveness_->deadThisRound(me);
    const auto& revived = liveness_->revivedThisRound(me);
    const auto& rejoined = liveness_->rejoinedThisRound(me);
    if (due.due(suspects, dead, revived) || !rejoined.empty()) {
      recordRound(i, due, suspects, dead, revived, rejoined, wall);
    }
    liveness_->endRound(me);
  }

  void recordRound(std::size_t i, const engine::RoundReport& due, const std::vector<int>& suspects,
                   const std::vector<int>& dead, const std::vector<int>& revived,
                   const std::vector<int>& rejoined, double wall) {
    PeerState& s = states_[i];
    engine::PeerCore& p = *peers_[i];
    std::optional<train::Workload::Eval> ev;
    if (due.evaluate) {
      ev = p.workload().evaluateTest(p.model());
      s.testAccuracy = ev->accuracy;
      s.testLoss = ev->loss;
    }
    auto rec = engine::reportRecord(p, wall, suspects, dead, ev ? &*ev : nullptr, revived);
    if (!rejoined.empty()) rec["rejoined"] = rejoined;
    rec["sim_time"] = s.clock;
    const Status written = files_.appendRecord(i, rec);
    if (s.status.isOk()) s.status = written;  // an earlier error of this peer's stays
  }

  Status appendEvaluationPoint(std::int64_t t, double wall) {
    auto point = evaluationPoint(peers_, states_, t, wall);
    GV_RETURN_IF_ERROR(point.status());
    return files_.appendEvaluation(*point);
  }

  void reportProgress(std::int64_t t) const {
    if (!options_.onRound) return;
    double latest = 0.0;
    for (const auto& s : states_) latest = std::max(latest, s.clock);
    options_.onRound(t, latest);
  }

  void finishPeer(std::size_t i) {
    PeerState& s = states_[i];
    engine::PeerCore& p = *peers_[i];
    engine::PeerResult& r = result_.peers[i];
    r = engine::collectResult(p, !result_.divergence && !faults_->killed(i));
    if (faults_->killed(i)) {
      // A killed peer writes nothing more: no final record, model or final.json.
      r.model.clear();
      s.status = files_.flush(i);
      return;
    }
    // Every peer of a diverged run stopped because of it (in a real run the notices tell them).
    if (result_.divergence) r.divergence = result_.divergence;
    if (!files_.enabled()) return;
    auto rec = engine::finalRecord(p, wallSeconds(), r.testAccuracy, r.testLoss, r.divergence);
    rec["sim_time"] = s.clock;
    nlohmann::json j;
    if (options_.writeModels) {
      j = engine::peerResultToJson(r);
      j["wall_seconds"] = wallSeconds();
      j["sim_time"] = s.clock;
      if (p.counters().quarantined > 0) j["quarantined"] = p.counters().quarantined;  // as a peer
    }
    s.status = files_.finish(i, rec, options_.writeModels, r.model, j);
  }

  void collectClocks() {
    result_.clock.reserve(count_);
    for (const auto& s : states_) {
      result_.clock.push_back(s.clock);
      result_.simulatedSeconds = std::max(result_.simulatedSeconds, s.clock);
      result_.messagesLost += s.lost;
      result_.messagesFaultDropped += s.faultDropped;
    }
  }

  // The "sim" block of summary.json: threads, losses, speed, memory.
  nlohmann::json simBlock() const {
    const SimResult& r = result_;
    const double perPeer =
        r.rssAfterRounds > r.rssBeforePeers
            ? static_cast<double>(r.rssAfterRounds - r.rssBeforePeers) / c_.peers.count
            : 0.0;
    return {
        {"threads", r.threads},
        {"messages_lost", r.messagesLost},
        {"messages_dropped_by_faults", r.messagesFaultDropped},
        {"rounds_wall_seconds", r.roundsWallSeconds},
        {"rounds_per_second",
         r.roundsWallSeconds > 0 ? static_cast<double>(c_.run.rounds) / r.roundsWallSeconds : 0.0},
        {"compute", fixedCompute_ >= 0.0 ? "fixed" : "measured"},
        {"rss_before_peers_bytes", r.rssBeforePeers},
        {"rss_after_rounds_bytes", r.rssAfterRounds},
        {"rss_per_peer_bytes", perPeer},
    };
  }

  const engine::RunPlan& plan_;
  const config::Config& c_;
  const SimOptions& options_;
  const std::string& dir_;
  PeerFiles files_;  // what the peers write: records, models, final.json; evals.jsonl
  const std::size_t count_;
  const LinkModel link_;
  const double fixedCompute_;  // seconds per round when network.compute_ms > 0, else -1 (measured)
  WorkerPool pool_;
  std::vector<std::unique_ptr<engine::PeerCore>> peers_;
  std::vector<PeerState> states_;
  Clock::time_point start_;
  SimResult result_;
  // Every peer's membership of its neighbours, on the virtual clock (liveness.h).
  std::unique_ptr<Liveness> liveness_;
  // faults.events: who is down, the links down, kills, restarts (faults.h).
  std::unique_ptr<FaultRunner> faults_;
  // allreduce, diloco: each round ends with the averaging collectives (averagePhase).
  const bool averaging_ = algorithms::averagesEachRound(c_.algorithm.name);
};

}  // namespace

std::uint64_t residentBytes() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (!f) return 0;
  unsigned long long size = 0, resident = 0;
  const int n = std::fscanf(f, "%llu %llu", &size, &resident);
  std::fclose(f);
  if (n != 2) return 0;
  return resident * static_cast<std::uint64_t>(sysconf(_SC_PAGESIZE));
}

Result<SimResult> runSimulation(const engine::RunPlan& plan, const SimOptions& options) {
  Simulation sim(plan, options);
  GV_RETURN_IF_ERROR(sim.createPeers());
  GV_RETURN_IF_ERROR(sim.prepareOutDir());
  sim.startClock();
  for (std::int64_t t = 0; t < plan.config.run.rounds; ++t) {
    GV_ASSIGN_OR_RETURN(const bool goOn, sim.runRound(t));
    if (!goOn) break;
  }
  sim.endRounds();
  if (plan.config.run.finalAverage) sim.finalAverage();
  GV_RETURN_IF_ERROR(sim.finishPeers());
  return sim.summarize();
}

}  // namespace grapevine::sim
