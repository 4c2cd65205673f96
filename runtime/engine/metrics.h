// Prometheus metrics of one peer process (monitoring.prometheus_port; docs/operations.md,
// "Prometheus"): an HTTP endpoint, /metrics in the Prometheus text format (prometheus-cpp's
// registry and serializer), served by an HttpEndpoint thread from start() until the object is
// destroyed. The values mirror
// what the records carry (records.h): counters and gauges set from PeerCore after every round.
//
// Consistency: update() sets every value under one lock, and a scrape collects under the same
// lock, so each scrape shows the state after one whole round (its bytes are the record's of that
// round), never a mix of two.
//
// Thread: start(), update() and the destructor on the training thread; scrapes on the server's own
// threads.
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "runtime/common/status.h"
#include "runtime/config/config.h"
#include "runtime/engine/peer_core.h"

namespace grapevine::engine {

// Cumulative seconds of the driver's phases of a round (the records' step_seconds, wait_seconds,
// mix_seconds and eval_seconds).
struct PhaseSeconds {
  double step = 0.0, wait = 0.0, mix = 0.0, eval = 0.0;
};

// What one completed round adds: the rounds done so far, the phase totals, the neighbours that were
// suspect in it, those declared dead and those taken back (revived) since the previous update, and
// the round's evaluation
// (NaN: none this round; the gauges keep the previous one).
struct RoundMetrics {
  std::int64_t rounds = 0;
  PhaseSeconds phases;
  const std::vector<int>* suspects = nullptr;
  const std::vector<int>* dead = nullptr;
  const std::vector<int>* revived = nullptr;
  double testAccuracy = std::numeric_limits<double>::quiet_NaN();
  double testLoss = std::numeric_limits<double>::quiet_NaN();
};

class PeerMetrics {
 public:
  // Serves /metrics on the peer's own host (its control address: peers.host or its peers.list
  // entry) at port monitoring.prometheus_port + rank. kUnavailable naming the key and address
  // when the port cannot be bound.
  static Result<std::unique_ptr<PeerMetrics>> start(const config::Config& config, int rank,
                                                    const PeerCore& core);
  // Stops the server: once it returns the port refuses connections.
  ~PeerMetrics();
  PeerMetrics(const PeerMetrics&) = delete;
  PeerMetrics& operator=(const PeerMetrics&) = delete;

  // After each completed round. Allocation-free once every neighbour and drop reason has been
  // seen (a new reason adds its series).
  void update(const PeerCore& core, const RoundMetrics& round);
  // "host:port" it serves on.
  const std::string& address() const;

 private:
  struct State;
  explicit PeerMetrics(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace grapevine::engine
