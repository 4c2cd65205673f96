// What a peer is at a round boundary: the input a round starts from (RoundInput), what it counted
// (PeerCounters) and everything it needs to continue a run exactly (PeerState: checkpoints).
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "runtime/algorithms/algorithm.h"
#include "runtime/engine/health.h"

namespace grapevine::engine {

// What a round starts from. The engine's workloads take their local steps; the API's caller may
// have taken its own optimizer step already (then x is x_half and `loss` is the caller's).
struct RoundInput {
  bool localSteps = true;
  double loss = 0.0;  // with localSteps false: the caller's loss (NaN: unknown)
  // The round's lr instead of optimizer.*'s schedule (the API caller's scheduler; with localSteps
  // false the lr its own optimizer used, for the records). NaN: the schedule.
  double lr = std::numeric_limits<double>::quiet_NaN();
  // algorithm.staleness: the neighbours are ahead (neighboursAhead()): no local steps this round,
  // the model goes out as it is (the loss reported is the previous round's). Last, so that the
  // API's {localSteps, loss, lr} stays as it is.
  bool skipCompute = false;
};

struct PeerCounters {
  std::uint64_t bytesSent = 0;
  std::uint64_t bytesReceived = 0;
  std::uint64_t bytesDenseEquivalent = 0;
  // bytesSent and bytesReceived by neighbour (each map sums to its total): the metrics' labels.
  std::map<int, std::uint64_t> bytesSentTo, bytesReceivedFrom;
  std::uint64_t messagesApplied = 0;
  std::uint64_t lateApplied = 0;
  std::uint64_t suspectRounds = 0;   // (neighbour, round) pairs that missed the round
  std::uint64_t deadNeighbours = 0;  // neighbours lost before they finished their rounds
  std::uint64_t replicaChecks = 0;
  std::uint64_t replicaMismatches = 0;
  std::uint64_t resyncs = 0;
  std::map<std::string, std::uint64_t> dropped;  // by reason: crc, bad_magic, duplicate, ...
  // Sent and received in collectives (the API's start-up sync and finalize averaging), not in the
  // byte counts above.
  std::uint64_t collectiveBytes = 0;
  // Neighbours quarantined (PeerCoreOptions::quarantineAfter, algorithm.robust_quarantine).
  std::uint64_t quarantined = 0;
  std::uint64_t revivedNeighbours = 0;   // dead neighbours taken back (revive())
  std::uint64_t rejoinedNeighbours = 0;  // neighbours connected again (rejoin())
  std::uint64_t roundsSkipped = 0;       // rounds this peer skipped to catch up (skipTo())
  // algorithm.staleness: (neighbour, round) pairs mixed from a replica of an earlier round, and
  // rounds this peer took no local steps in because its neighbours were ahead.
  std::uint64_t staleMixes = 0;
  std::uint64_t roundsComputeSkipped = 0;
  // Rounds begun with neighbours lost (not finished): with none of them live (isolated: training
  // alone), or with fewer than half of its neighbours live.
  std::uint64_t roundsIsolated = 0;
  std::uint64_t roundsBelowHalfDegree = 0;
  std::int64_t stateFrom = -1;  // adoptFirstSnapshot(): the neighbour whose public copy it took
};

// Everything a peer needs to continue a run exactly after the round it was taken in (checkpoints:
// runtime/engine/checkpoint.h). Not in it, by design: per-edge sequence numbers and in-flight
// messages (a resumed peer's edges start afresh, as after any reconnection, at both ends) and the
// set of dead neighbours (everyone is alive again after a restart).
struct PeerState {
  std::int64_t round = -1;         // the last completed round
  std::uint64_t workloadStep = 0;  // the minibatch stream's position (Workload::step)
  std::vector<float> model;
  std::vector<float> momentum;       // the optimizer's buffer (empty without momentum)
  std::vector<float> outerMomentum;  // the outer optimizer's (empty without one or with mu 0)
  // algorithm.overlap: the next round's gradient, computed during this round's communication.
  std::vector<float> gradient;
  bool gradientReady = false;
  std::vector<std::pair<std::string, std::vector<float>>> algorithm;  // Algorithm::state()
  std::vector<double> algorithmScalars;                               // Algorithm::scalars()
  HealthHistory health;                 // divergence detection's history (HealthMonitor)
  double lastLoss = 0.0, lastLr = 0.0;  // the last round's figures (records)
  PeerCounters counters;
  // Robust mixing's trust in each neighbour (algorithm.robust): a restarted peer goes on from it
  // and quarantines a neighbour it had quarantined as soon as that one is mixed again.
  std::vector<algorithms::NeighbourTrust> trust;
};

}  // namespace grapevine::engine
