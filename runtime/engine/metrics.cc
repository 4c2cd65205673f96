#include "runtime/engine/metrics.h"

#include <prometheus/collectable.h>
#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <algorithm>
#include <cmath>
#include <exception>
#include <map>
#include <mutex>

#include "compress/options.h"
#include "runtime/engine/http_endpoint.h"
#include "runtime/transport/socket_util.h"

namespace grapevine::engine {
namespace {

// A Prometheus counter that mirrors a cumulative value kept elsewhere (PeerCounters, the driver's
// phase totals): set() adds the growth since the last call, so the counter equals the value.
// Counters hold doubles: byte counts are exact up to 2^53.
struct Mirrored {
  prometheus::Counter* counter = nullptr;
  double last = 0.0;
  void set(double value) {
    if (value > last) counter->Increment(value - last);
    last = std::max(last, value);
  }
};

// The registry, collected under the lock that update() holds while it sets the values: a scrape
// sees one round's state, never half of two.
class LockedRegistry : public prometheus::Collectable {
 public:
  LockedRegistry(std::mutex& mu, std::shared_ptr<prometheus::Registry> registry)
      : mu_(mu), registry_(std::move(registry)) {}
  std::vector<prometheus::MetricFamily> Collect() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return registry_->Collect();
  }

 private:
  std::mutex& mu_;
  std::shared_ptr<prometheus::Registry> registry_;
};

constexpr const char* kPhases[] = {"step", "wait", "mix", "eval"};
constexpr int kPhaseCount = 4;

}  // namespace

struct PeerMetrics::State {
  std::mutex mu;  // guards every value below and the registry's values during a scrape
  std::shared_ptr<prometheus::Registry> registry = std::make_shared<prometheus::Registry>();
  std::shared_ptr<LockedRegistry> collectable;
  std::string address;

  Mirrored rounds;
  Mirrored phaseTotal[kPhaseCount];
  prometheus::Gauge* phaseLast[kPhaseCount] = {};
  prometheus::Gauge* loss = nullptr;
  prometheus::Gauge* lr = nullptr;
  prometheus::Gauge* liveDegree = nullptr;
  prometheus::Gauge* compressionRatio = nullptr;
  Mirrored denseBytes;
  // Added at their first defined value, as the records add their fields (records.h).
  prometheus::Family<prometheus::Gauge>* accuracyFamily = nullptr;
  prometheus::Family<prometheus::Gauge>* testLossFamily = nullptr;
  prometheus::Family<prometheus::Gauge>* stepFamily = nullptr;
  prometheus::Family<prometheus::Gauge>* consensusFamily = nullptr;
  prometheus::Family<prometheus::Gauge>* lagFamily = nullptr;
  prometheus::Gauge* accuracy = nullptr;
  prometheus::Gauge* testLoss = nullptr;
  prometheus::Gauge* step = nullptr;
  prometheus::Gauge* consensus = nullptr;
  prometheus::Gauge* lag = nullptr;

  // One entry per neighbour of the schedule (any round), in rank order.
  struct Neighbour {
    int rank = -1;
    Mirrored sent, received;
    prometheus::Counter* suspect = nullptr;
    prometheus::Counter* dead = nullptr;
    prometheus::Counter* rejoins = nullptr;
    // Robust mixing (algorithm.robust): rounds its difference was clipped, and its suspicion.
    Mirrored clipped;
    prometheus::Gauge* suspicion = nullptr;
  };
  std::vector<Neighbour> neighbours;
  prometheus::Family<prometheus::Counter>* droppedFamily = nullptr;
  std::map<std::string, Mirrored, std::less<>> dropped;  // by reason, as PeerCounters::dropped

  // The server last: destroyed first, so no scrape runs while the rest goes.
  std::unique_ptr<HttpEndpoint> server;

  Neighbour* neighbour(int j) {
    auto it = std::lower_bound(neighbours.begin(), neighbours.end(), j,
                               [](const Neighbour& n, int r) { return n.rank < r; });
    return it != neighbours.end() && it->rank == j ? &*it : nullptr;
  }
  void registerFamilies(const config::Config& config, int rank, const PeerCore& core);
  // Sets a gauge added at its first finite value.
  static void setDefined(prometheus::Family<prometheus::Gauge>* family, prometheus::Gauge*& gauge,
                         double value) {
    if (!std::isfinite(value)) return;
    if (!gauge) gauge = &family->Add({});
    gauge->Set(value);
  }
};

// Registers every metric family of peer `rank` (a declarative table: name, help, labels) and keeps
// what the updates set.
void PeerMetrics::State::registerFamilies(const config::Config& config, int rank,
                                          const PeerCore& core) {
  State& s = *this;
  prometheus::Registry& reg = *s.registry;
  const prometheus::Labels rankLabel = {{"rank", std::to_string(rank)}};
  auto counter = [&](const char* name,
                     const char* help) -> prometheus::Family<prometheus::Counter>& {
    return prometheus::BuildCounter().Name(name).Help(help).Labels(rankLabel).Register(reg);
  };
  auto gauge = [&](const char* name, const char* help) -> prometheus::Family<prometheus::Gauge>& {
    return prometheus::BuildGauge().Name(name).Help(help).Labels(rankLabel).Register(reg);
  };

  prometheus::Labels info = {
      {"algorithm", std::string(algorithms::algorithmKindName(config.algorithm.name))},
      {"compression", std::string(compress::methodName(config.compression.method))}};
  // The build id only when asked: a keyed hello keeps it from strangers, and the endpoint is
  // outside the key's protection.
  if (config.monitoring.prometheusBuildInfo) info["version"] = GRAPEVINE_VERSION;
  gauge("grapevine_info", "Constant 1; the labels describe the run").Add(info).Set(1);
  s.rounds.counter = &counter("grapevine_rounds_total", "Rounds completed").Add({});
  auto& phaseTotal = counter("grapevine_phase_seconds_total",
                             "Seconds spent in each phase of the rounds: local steps and "
                             "compression, waiting for the neighbours, mixing, test evaluation");
  auto& phaseLast =
      gauge("grapevine_last_round_phase_seconds", "Seconds of each phase in the latest round");
  for (int k = 0; k < kPhaseCount; ++k) {
    s.phaseTotal[k].counter = &phaseTotal.Add({{"phase", kPhases[k]}});
    s.phaseLast[k] = &phaseLast.Add({{"phase", kPhases[k]}});
  }
  s.loss = &gauge("grapevine_loss", "Local training loss of the latest round").Add({});
  s.lr = &gauge("grapevine_learning_rate", "Learning rate of the latest round").Add({});
  s.accuracyFamily = &gauge("grapevine_test_accuracy", "Accuracy of the latest test evaluation");
  s.testLossFamily = &gauge("grapevine_test_loss", "Loss of the latest test evaluation");
  s.stepFamily = &gauge("grapevine_consensus_step",
                        "Consensus step (gamma) in use: mean over the edges mixed in the latest "
                        "round (CHOCO, DeepSqueeze)");
  s.consensusFamily =
      &gauge("grapevine_local_consensus_distance",
             "sum_j w_ij |xhat_j - xhat_i|^2 / |xhat_i|^2 at the latest mix (CHOCO)");
  s.lagFamily = &gauge("grapevine_public_lag",
                       "|x - xhat|^2 / |xhat|^2 of the latest round: how far the public copy "
                       "trails the model (CHOCO)");
  s.liveDegree = &gauge("grapevine_live_degree", "Neighbours not declared dead").Add({});
  s.compressionRatio = &gauge("grapevine_compression_ratio",
                              "Dense-equivalent bytes / bytes sent so far (0 before any send)")
                            .Add({});
  s.denseBytes.counter =
      &counter("grapevine_dense_equivalent_bytes_total",
               "Bytes the sent messages would take as dense fp32 models (with envelopes)")
           .Add({});
  auto& sent = counter("grapevine_sent_bytes_total", "Bytes sent to each neighbour in rounds");
  auto& received =
      counter("grapevine_received_bytes_total", "Bytes received from each neighbour in rounds");
  auto& suspect = counter("grapevine_neighbour_suspect_rounds_total",
                          "Rounds in which the neighbour's message missed algorithm.round_timeout");
  auto& dead = counter("grapevine_neighbour_deaths_total",
                       "Times the neighbour was declared dead (heartbeats stopped, connection "
                       "failed) before finishing its rounds");
  auto& rejoins = counter("grapevine_neighbour_rejoins_total",
                          "Times a neighbour declared dead for its silence came back (heartbeats "
                          "again) and its edge was taken back");
  const bool robust = core.algorithm().robustMixer() != nullptr;
  auto* clipped = robust ? &counter("grapevine_neighbour_clipped_rounds_total",
                                    "algorithm.robust: rounds in which the neighbour's difference "
                                    "reached beyond the mixing radius")
                         : nullptr;
  auto* suspicion = robust ? &gauge("grapevine_neighbour_suspicion",
                                    "algorithm.robust: moving average of the fraction of the "
                                    "neighbour's difference far beyond the radius (quarantined at "
                                    "algorithm.robust_quarantine)")
                           : nullptr;
  for (int j : core.neighbours()) {
    const prometheus::Labels l = {{"neighbour", std::to_string(j)}};
    State::Neighbour n;
    n.rank = j;
    n.sent.counter = &sent.Add(l);
    n.received.counter = &received.Add(l);
    n.suspect = &suspect.Add(l);
    n.dead = &dead.Add(l);
    n.rejoins = &rejoins.Add(l);
    if (robust) {
      n.clipped.counter = &clipped->Add(l);
      n.suspicion = &suspicion->Add(l);
    }
    s.neighbours.push_back(n);
  }
  std::sort(s.neighbours.begin(), s.neighbours.end(),
            [](const State::Neighbour& a, const State::Neighbour& b) { return a.rank < b.rank; });
  s.droppedFamily = &counter("grapevine_dropped_frames_total",
                             "Frames dropped on arrival, by reason (crc, duplicate, gap, ...)");
}

Result<std::unique_ptr<PeerMetrics>> PeerMetrics::start(const config::Config& config, int rank,
                                                        const PeerCore& core) {
  auto state = std::make_unique<State>();
  State& s = *state;
  s.registerFamilies(config, rank, core);
  // monitoring.prometheus_host: loopback unless asked; "peer" is the peer's own control host, so
  // the endpoint is reachable where its neighbours reach the peer.
  const int port = config.monitoring.prometheusPort + rank;
  const std::string host = config.monitoring.prometheusHost == "peer"
                               ? config.peers.addresses()[rank].host
                               : config.monitoring.prometheusHost;
  auto endpoint = transport::parseEndpoint(host + ":" + std::to_string(port));
  if (!endpoint.isOk()) {
    return invalidArgument("monitoring.prometheus_port: " + endpoint.status().message());
  }
  s.address = transport::formatEndpoint(*endpoint);
  s.collectable = std::make_shared<LockedRegistry>(s.mu, s.registry);
  HttpEndpoint::Options http;
  http.host = endpoint->address().to_string();
  http.port = port;
  auto server = HttpEndpoint::start(http, [collectable = s.collectable] {
    return prometheus::TextSerializer().Serialize(collectable->Collect());
  });
  if (!server.isOk()) {
    return unavailable("monitoring.prometheus_port: cannot serve /metrics on " +
                       server.status().message());
  }
  s.server = std::move(server).value();
  return std::unique_ptr<PeerMetrics>(new PeerMetrics(std::move(state)));
}

PeerMetrics::PeerMetrics(std::unique_ptr<State> state) : state_(std::move(state)) {}

PeerMetrics::~PeerMetrics() {
  if (state_) state_->server.reset();  // stops the server's thread and closes the port
}

const std::string& PeerMetrics::address() const { return state_->address; }

void PeerMetrics::update(const PeerCore& core, const RoundMetrics& round) {
  State& s = *state_;
  const PeerCounters& c = core.counters();
  std::lock_guard<std::mutex> lock(s.mu);
  s.rounds.set(static_cast<double>(round.rounds));
  const double phases[kPhaseCount] = {round.phases.step, round.phases.wait, round.phases.mix,
                                      round.phases.eval};
  for (int k = 0; k < kPhaseCount; ++k) {
    s.phaseLast[k]->Set(std::max(0.0, phases[k] - s.phaseTotal[k].last));
    s.phaseTotal[k].set(phases[k]);
  }
  s.loss->Set(core.lastLoss());
  s.lr->Set(core.lastLr());
  State::setDefined(s.accuracyFamily, s.accuracy, round.testAccuracy);
  State::setDefined(s.testLossFamily, s.testLoss, round.testLoss);
  if (const auto step = core.algorithm().stepReport()) {
    State::setDefined(s.stepFamily, s.step, step->step);
    State::setDefined(s.consensusFamily, s.consensus, step->localConsensus);
    State::setDefined(s.lagFamily, s.lag, step->publicLag);
  }
  s.liveDegree->Set(core.liveDegree());
  s.denseBytes.set(static_cast<double>(c.bytesDenseEquivalent));
  s.compressionRatio->Set(c.bytesSent ? static_cast<double>(c.bytesDenseEquivalent) /
                                            static_cast<double>(c.bytesSent)
                                      : 0.0);
  for (auto& n : s.neighbours) {
    if (auto it = c.bytesSentTo.find(n.rank); it != c.bytesSentTo.end())
      n.sent.set(static_cast<double>(it->second));
    if (auto it = c.bytesReceivedFrom.find(n.rank); it != c.bytesReceivedFrom.end())
      n.received.set(static_cast<double>(it->second));
  }
  if (const auto* robust = core.algorithm().robustMixer()) {
    for (const auto& t : robust->trust()) {
      auto* n = s.neighbour(t.neighbour);
      if (!n || !n->suspicion) continue;
      n->clipped.set(static_cast<double>(t.roundsClipped));
      n->suspicion->Set(t.score);
    }
  }
  for (const auto& [reason, count] : c.dropped) {
    auto it = s.dropped.find(reason);
    if (it == s.dropped.end()) {
      it = s.dropped.emplace(reason, Mirrored{}).first;
      it->second.counter = &s.droppedFamily->Add({{"reason", reason}});
    }
    it->second.set(static_cast<double>(count));
  }
  if (round.suspects) {
    for (int j : *round.suspects) {
      if (auto* n = s.neighbour(j)) n->suspect->Increment();
    }
  }
  if (round.dead) {
    for (int j : *round.dead) {
      if (auto* n = s.neighbour(j)) n->dead->Increment();
    }
  }
  if (round.revived) {
    for (int j : *round.revived) {
      if (auto* n = s.neighbour(j)) n->rejoins->Increment();
    }
  }
}

}  // namespace grapevine::engine
