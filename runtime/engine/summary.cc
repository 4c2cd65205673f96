#include "runtime/engine/summary.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>

#include "kernels/ops.h"
#include "runtime/common/atomic_file.h"
#include "runtime/common/bounded_file.h"
#include "runtime/common/byte_order.h"
#include "runtime/engine/records.h"

namespace grapevine::engine {

PeerResult collectResult(PeerCore& peer, bool finished, bool withModel) {
  PeerResult r;
  r.rank = peer.rank();
  r.finished = finished;
  r.rounds = peer.round() + 1;
  const auto test = peer.workload().evaluateTest(peer.model());
  r.testAccuracy = test.accuracy;
  r.testLoss = test.loss;
  r.trainLoss = peer.lastLoss();
  const auto& c = peer.counters();
  r.bytesSent = c.bytesSent;
  r.bytesReceived = c.bytesReceived;
  r.bytesDenseEquivalent = c.bytesDenseEquivalent;
  r.suspectRounds = c.suspectRounds;
  r.deadNeighbours = c.deadNeighbours;
  r.revivedNeighbours = c.revivedNeighbours;
  r.rejoinedNeighbours = c.rejoinedNeighbours;
  r.roundsSkipped = c.roundsSkipped;
  r.staleMixes = c.staleMixes;
  r.roundsComputeSkipped = c.roundsComputeSkipped;
  r.roundsIsolated = c.roundsIsolated;
  r.roundsBelowHalfDegree = c.roundsBelowHalfDegree;
  r.neighboursLost = static_cast<std::uint64_t>(peer.lostNeighbours());
  for (const auto& [reason, n] : c.dropped) r.droppedFrames += n;
  r.replicaMismatches = c.replicaMismatches;
  r.resyncs = c.resyncs;
  if (const auto step = peer.algorithm().stepReport()) {
    r.consensusStep = step->step;
    r.compressorQuality = step->compressorQuality;
  }
  if (const auto* robust = peer.algorithm().robustMixer()) r.neighbourTrust = trustJson(*robust);
  if (withModel) r.model.assign(peer.model().begin(), peer.model().end());
  r.modelSize = peer.model().size();
  r.divergence = peer.divergence();
  return r;
}

nlohmann::json peerResultToJson(const PeerResult& r) {
  auto num = [](double v) -> nlohmann::json {
    if (!std::isfinite(v)) return nullptr;
    return v;
  };
  nlohmann::json j = {{"rank", r.rank},
                      {"finished", r.finished},
                      {"rounds", r.rounds},
                      {"test_accuracy", num(r.testAccuracy)},
                      {"test_loss", num(r.testLoss)},
                      {"train_loss", num(r.trainLoss)},
                      {"bytes_sent", r.bytesSent},
                      {"bytes_received", r.bytesReceived},
                      {"bytes_dense_equivalent", r.bytesDenseEquivalent},
                      {"suspect_rounds", r.suspectRounds},
                      {"dead_neighbours", r.deadNeighbours},
                      {"revived_neighbours", r.revivedNeighbours},
                      {"rejoined_neighbours", r.rejoinedNeighbours},
                      {"rounds_skipped", r.roundsSkipped},
                      {"rounds_isolated", r.roundsIsolated},
                      {"rounds_below_half_degree", r.roundsBelowHalfDegree},
                      {"neighbours_lost", r.neighboursLost},
                      {"dropped_frames", r.droppedFrames},
                      {"replica_mismatches", r.replicaMismatches},
                      {"resyncs", r.resyncs},
                      {"model_size", r.modelSize},
                      {"consensus_step", num(r.consensusStep)},
                      {"compressor_quality", num(r.compressorQuality)},
                      {"diverged", r.divergence.has_value()}};
  if (r.peakRssBytes > 0) j["peak_rss_bytes"] = r.peakRssBytes;
  if (r.staleMixes > 0) j["stale_mixes"] = r.staleMixes;
  if (r.roundsComputeSkipped > 0) j["rounds_compute_skipped"] = r.roundsComputeSkipped;
  if (!r.neighbourTrust.empty()) j["neighbour_trust"] = r.neighbourTrust;
  if (r.divergence) {
    const Divergence& d = *r.divergence;
    j["diverged_round"] = d.round;
    j["diverged_peer"] = d.origin;
    j["diverged_reason"] = d.reason;
    j["diverged_loss"] = num(d.loss);
    j["diverged_model_norm"] = num(d.modelNorm);
  }
  return j;
}

PeerResult peerResultFromJson(const nlohmann::json& j) {
  auto numOr = [&j](const char* key) {
    return j.contains(key) && j[key].is_number() ? j[key].get<double>()
                                                 : std::numeric_limits<double>::quiet_NaN();
  };
  PeerResult r;
  r.rank = j.at("rank").get<int>();
  r.finished = j.at("finished").get<bool>();
  r.rounds = j.at("rounds").get<std::int64_t>();
  r.testAccuracy = numOr("test_accuracy");
  r.testLoss = numOr("test_loss");
  r.trainLoss = numOr("train_loss");
  r.bytesSent = j.at("bytes_sent").get<std::uint64_t>();
  r.bytesReceived = j.at("bytes_received").get<std::uint64_t>();
  r.bytesDenseEquivalent = j.at("bytes_dense_equivalent").get<std::uint64_t>();
  r.suspectRounds = j.at("suspect_rounds").get<std::uint64_t>();
  r.deadNeighbours = j.at("dead_neighbours").get<std::uint64_t>();
  r.revivedNeighbours = j.value("revived_neighbours", std::uint64_t{0});  // absent from older files
  r.rejoinedNeighbours = j.value("rejoined_neighbours", std::uint64_t{0});
  r.roundsSkipped = j.value("rounds_skipped", std::uint64_t{0});
  r.staleMixes = j.value("stale_mixes", std::uint64_t{0});
  r.roundsComputeSkipped = j.value("rounds_compute_skipped", std::uint64_t{0});
  r.roundsIsolated = j.value("rounds_isolated", std::uint64_t{0});  // absent from older files
  r.roundsBelowHalfDegree = j.value("rounds_below_half_degree", std::uint64_t{0});
  r.neighboursLost = j.value("neighbours_lost", std::uint64_t{0});
  r.droppedFrames = j.at("dropped_frames").get<std::uint64_t>();
  r.replicaMismatches = j.at("replica_mismatches").get<std::uint64_t>();
  r.resyncs = j.at("resyncs").get<std::uint64_t>();
  r.modelSize = j.at("model_size").get<std::uint64_t>();
  r.consensusStep = numOr("consensus_step");  // absent from older files
  r.compressorQuality = numOr("compressor_quality");
  r.peakRssBytes = j.value("peak_rss_bytes", std::uint64_t{0});  // absent from older files
  if (j.contains("neighbour_trust") && j["neighbour_trust"].is_array())
    r.neighbourTrust = j["neighbour_trust"];
  if (j.value("diverged", false)) {
    Divergence d;
    d.round = j.at("diverged_round").get<std::int64_t>();
    d.origin = j.at("diverged_peer").get<int>();
    d.reason = j.at("diverged_reason").get<std::string>();
    d.loss = numOr("diverged_loss");
    d.modelNorm = numOr("diverged_model_norm");
    r.divergence = d;
  }
  return r;
}

namespace {
nlohmann::json num(double v) {
  if (!std::isfinite(v)) return nullptr;
  return v;
}

// One peer's entry of per_peer: its final.json fields (peerResultToJson, so that a counter added
// there shows here too) less the ones the summary leaves out, and without the step and quality it
// never measured.
nlohmann::json peerRow(const PeerResult& p) {
  nlohmann::json row = peerResultToJson(p);
  for (const char* key :
       {"train_loss", "bytes_dense_equivalent", "model_size", "diverged_round", "diverged_peer",
        "diverged_reason", "diverged_loss", "diverged_model_norm"}) {
    row.erase(key);
  }
  for (const char* key : {"consensus_step", "compressor_quality"}) {
    if (row[key].is_null()) row.erase(key);
  }
  return row;
}

// Why a peer's run was degraded ("" when it was not): rounds trained alone or below half its
// degree because neighbours were lost, and neighbours lost for good.
// `interrupted`: the user stopped the run, so a peer that did not run all its rounds is no sign of
// a degraded run.
std::string degradedReason(const PeerResult& p, bool interrupted) {
  std::string why;
  auto add = [&why](const std::string& part) { why += (why.empty() ? "" : ", ") + part; };
  // A diverged run says so on its own ("diverged"); any other peer that did not run all its rounds
  // failed, was killed or was stopped.
  if (!p.finished && !p.divergence && !interrupted) add("did not finish its rounds");
  if (p.roundsIsolated > 0)
    add("isolated (training alone) for " + std::to_string(p.roundsIsolated) + " rounds");
  if (p.roundsBelowHalfDegree > p.roundsIsolated) {
    add("below half its neighbours for " + std::to_string(p.roundsBelowHalfDegree) + " rounds");
  }
  if (p.neighboursLost > 0) {
    add(std::to_string(p.neighboursLost) + (p.neighboursLost == 1 ? " neighbour" : " neighbours") +
        " lost and not back at the end");
  }
  return why;
}

// Mean, min and max of finite values; written as <name>_mean/_min/_max (null when none).
struct Aggregate {
  double sum = 0, lo = std::numeric_limits<double>::infinity(), hi = -lo;
  int n = 0;
  void add(double v) {
    if (!std::isfinite(v)) return;
    ++n;
    sum += v;
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  void write(nlohmann::json& s, const std::string& name) const {
    s[name + "_mean"] = n ? num(sum / n) : nlohmann::json(nullptr);
    s[name + "_min"] = n ? num(lo) : nlohmann::json(nullptr);
    s[name + "_max"] = n ? num(hi) : nlohmann::json(nullptr);
  }
};

// rounds_reached_min/max: the fewest and most rounds a peer with a final record ran (what an
// interrupted or failed run got to; both equal run.rounds when every peer finished).
void addRoundsReached(const std::vector<PeerResult>& peers, nlohmann::json& s) {
  std::int64_t lo = std::numeric_limits<std::int64_t>::max(), hi = -1;
  for (const auto& p : peers) {
    lo = std::min(lo, p.rounds);
    hi = std::max(hi, p.rounds);
  }
  if (hi < 0) return;
  s["rounds_reached_min"] = lo;
  s["rounds_reached_max"] = hi;
}

// The mean of the finished peers' final models (`done`, not empty), its accuracy, and how far the
// peers are from it: consensus_error, consensus_distance_final, averaged_model_*, optimum_distance.
void addAveragedModel(const RunPlan& plan, const std::vector<const PeerResult*>& done,
                      nlohmann::json& s) {
  const auto& c = plan.config;
  const std::size_t n = done.front()->model.size();
  std::vector<double> mean(n, 0.0);
  for (const auto* p : done) {
    for (std::size_t k = 0; k < n; ++k) mean[k] += p->model[k];
  }
  for (auto& v : mean) v /= static_cast<double>(done.size());
  double meanNorm = 0, dist = 0;
  for (std::size_t k = 0; k < n; ++k) meanNorm += mean[k] * mean[k];
  for (const auto* p : done) {
    double d = 0;
    for (std::size_t k = 0; k < n; ++k) d += (p->model[k] - mean[k]) * (p->model[k] - mean[k]);
    dist += d;
  }
  dist /= static_cast<double>(done.size());
  s["consensus_error"] = dist;  // (1/n) sum |x_i - xbar|^2
  s["consensus_distance_final"] = meanNorm > 0 ? dist / meanNorm : dist;
  std::vector<float> meanF(mean.begin(), mean.end());
  auto wl = train::makeWorkload(workloadOptions(c), 0, c.peers.count, c.run.seed, plan.data);
  if (wl.isOk()) {
    const auto ev = (*wl)->evaluateTest(meanF);
    s["averaged_model_accuracy"] = num(ev.accuracy);
    s["averaged_model_loss"] = num(ev.loss);
    const auto opt = (*wl)->optimum();
    if (!opt.empty() && opt.size() == n) {
      double od = 0;
      for (std::size_t k = 0; k < n; ++k) od += (mean[k] - opt[k]) * (mean[k] - opt[k]);
      s["optimum_distance"] = od;
    }
  }
}

// Attacks (faults: sign-flip .. replay): which peers attacked, the accuracy of the others (the
// honest peers: what a defence is judged by), and the neighbours robust mixing quarantined.
void addAttackers(const config::Config& c, const std::vector<PeerResult>& peers,
                  nlohmann::json& s) {
  std::vector<int> attackers;
  for (const auto& e : c.faults.events) {
    if (config::isAttack(e.kind) &&
        std::find(attackers.begin(), attackers.end(), e.peer) == attackers.end())
      attackers.push_back(e.peer);
  }
  nlohmann::json distrusted = nlohmann::json::array();
  for (const auto& p : peers) {
    for (const auto& t : p.neighbourTrust) {
      if (t.value("quarantined", false))
        distrusted.push_back({{"peer", p.rank}, {"neighbour", t.value("neighbour", -1)}});
    }
  }
  if (!distrusted.empty() || c.algorithm.robust != algorithms::RobustRule::kNone)
    s["quarantined_by_trust"] = distrusted;
  if (attackers.empty()) return;
  std::sort(attackers.begin(), attackers.end());
  s["attackers"] = attackers;
  Aggregate honest;
  for (const auto& p : peers) {
    if ((p.finished || p.divergence) && !p.model.empty() &&
        !std::binary_search(attackers.begin(), attackers.end(), p.rank))
      honest.add(p.testAccuracy);
  }
  honest.write(s, "honest_test_accuracy");
}

}  // namespace

nlohmann::json makeSummary(const RunPlan& plan, const std::vector<PeerResult>& peers,
                           double wallSeconds, const std::string& transport,
                           const std::string& interruptedBy) {
  nlohmann::json s;
  const auto& c = plan.config;
  s["name"] = c.run.name;
  s["peers"] = c.peers.count;
  s["rounds"] = c.run.rounds;
  if (!interruptedBy.empty()) s["interrupted"] = interruptedBy;
  addRoundsReached(peers, s);
  s["wall_seconds"] = wallSeconds;
  s["transport"] = transport;
  s["algorithm"] = std::string(algorithms::algorithmKindName(c.algorithm.name));
  s["compression"] = std::string(compress::methodName(c.compression.method));
  s["topology"] = std::string(topology::kindName(c.topology.kind));
  const auto analysis = topology::analyze(*plan.schedule, plan.spec);
  s["spectral_gap"] = analysis.spectralGap;

  // Of the peers that finished (a language model reports a test loss and no accuracy).
  Aggregate accuracy, testLoss;
  int finished = 0;
  double stepSum = 0, stepMin = std::numeric_limits<double>::infinity(), stepMax = -stepMin;
  double qualitySum = 0;
  int withStep = 0, withQuality = 0;
  std::uint64_t sent = 0, dense = 0, received = 0, suspects = 0, deadEdges = 0, revived = 0,
                rejoined = 0, skipped = 0;
  std::vector<const PeerResult*> done;
  const Divergence* firstDivergence = nullptr;
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& p : peers) {
    sent += p.bytesSent;
    received += p.bytesReceived;
    dense += p.bytesDenseEquivalent;
    suspects += p.suspectRounds;
    deadEdges += p.deadNeighbours;
    revived += p.revivedNeighbours;
    rejoined += p.rejoinedNeighbours;
    skipped += p.roundsSkipped;
    rows.push_back(peerRow(p));
    if (p.divergence && (!firstDivergence || p.divergence->round < firstDivergence->round ||
                         (p.divergence->round == firstDivergence->round &&
                          p.divergence->origin < firstDivergence->origin))) {
      firstDivergence = &*p.divergence;
    }
    if (p.finished) ++finished;
    // A diverged run's peers stopped early: their last finite models stand for the run.
    if (!(p.finished || p.divergence) || p.model.empty()) continue;
    if (std::isfinite(p.consensusStep)) {
      ++withStep;
      stepSum += p.consensusStep;
      stepMin = std::min(stepMin, p.consensusStep);
      stepMax = std::max(stepMax, p.consensusStep);
    }
    if (std::isfinite(p.compressorQuality)) {
      ++withQuality;
      qualitySum += p.compressorQuality;
    }
    done.push_back(&p);
    accuracy.add(p.testAccuracy);
    testLoss.add(p.testLoss);
  }
  s["peers_finished"] = finished;
  s["diverged"] = firstDivergence != nullptr;
  if (firstDivergence) {
    s["diverged_round"] = firstDivergence->round;
    s["diverged_peer"] = firstDivergence->origin;
    s["diverged_reason"] = firstDivergence->reason;
    s["diverged_message"] = divergenceMessage(*firstDivergence, std::nan(""));
  }
  accuracy.write(s, "test_accuracy");
  testLoss.write(s, "test_loss");
  addAttackers(c, peers, s);
  s["bytes_sent_total"] = sent;
  s["bytes_received_total"] = received;
  s["bytes_dense_equivalent"] = dense;
  s["suspect_rounds_total"] = suspects;
  s["dead_neighbours_total"] = deadEdges;
  s["revived_neighbours_total"] = revived;
  s["rejoined_neighbours_total"] = rejoined;
  s["rounds_skipped_total"] = skipped;
  std::uint64_t peakRss = 0;
  for (const auto& p : peers) peakRss = std::max(peakRss, p.peakRssBytes);
  if (peakRss > 0) s["peak_rss_bytes_max"] = peakRss;  // the largest peer process's
  if (withStep) {
    s["consensus_step"] = stepSum / withStep;
    s["consensus_step_min"] = stepMin;
    s["consensus_step_max"] = stepMax;
  }
  if (withQuality) s["compressor_quality"] = qualitySum / withQuality;
  s["compression_ratio"] = sent ? static_cast<double>(dense) / static_cast<double>(sent) : 0.0;

  if (!done.empty()) addAveragedModel(plan, done, s);
  s["per_peer"] = rows;
  nlohmann::json degraded = nlohmann::json::array();
  for (const auto& p : peers) {
    if (const std::string why = degradedReason(p, !interruptedBy.empty()); !why.empty()) {
      degraded.push_back({{"rank", p.rank}, {"reason", why}});
    }
  }
  s["degraded"] = !degraded.empty();
  s["degraded_peers"] = degraded;
  return s;
}

nlohmann::json faultEventJson(const config::FaultEvent& e) {
  nlohmann::json j;
  j["kind"] = std::string(config::faultKindName(e.kind));
  if (config::isAttack(e.kind) && e.kind != config::FaultKind::kReplay)
    j["scale"] = e.attackScale();
  if (e.kind == config::FaultKind::kLinkDown)
    j["link"] = {e.linkA, e.linkB};
  else
    j["peer"] = e.peer;
  if (e.byRound()) {
    j["at_round"] = *e.atRound;
    if (e.rounds) j["rounds"] = *e.rounds;
  } else {
    j["at"] = e.start();
    if (e.seconds) j["seconds"] = *e.seconds;
  }
  return j;
}

Status writeJsonFile(const std::string& path, const nlohmann::json& json) {
  return writeFileAtomically(path, json.dump(2) + "\n");
}

namespace {

std::string pct(const nlohmann::json& v) {
  if (v.is_null()) return "n/a";
  char b[32];
  std::snprintf(b, sizeof b, "%.2f%%", 100.0 * v.get<double>());
  return b;
}

std::string mb(std::uint64_t v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.2f MB", v / 1e6);
  return std::string(b);
}

// The table's lines for the run: name, setup, rounds.
std::string runLines(const nlohmann::json& s) {
  std::string out;
  char line[256];
  std::snprintf(line, sizeof line, "%-28s %s\n", "run", s.value("name", "").c_str());
  out += line;
  std::snprintf(line, sizeof line, "%-28s %d peers, %s, %s + %s over %s\n", "setup",
                s.value("peers", 0), s.value("topology", "").c_str(),
                s.value("algorithm", "").c_str(), s.value("compression", "").c_str(),
                s.value("transport", "").c_str());
  out += line;
  if (s.value("diverged", false)) {
    std::snprintf(line, sizeof line, "%-28s %lld of %lld (stopped: diverged) in %.1f s\n", "rounds",
                  static_cast<long long>(s.value("diverged_round", 0)),
                  static_cast<long long>(s.value("rounds", 0)), s.value("wall_seconds", 0.0));
  } else if (s.contains("interrupted") || s.contains("failed_at_startup")) {
    const std::string why = s.contains("interrupted")
                                ? "interrupted: " + s.value("interrupted", std::string())
                                : std::string("stopped: a peer failed at start");
    std::snprintf(line, sizeof line, "%-28s %lld..%lld of %lld (%s) in %.1f s\n", "rounds",
                  static_cast<long long>(s.value("rounds_reached_min", 0)),
                  static_cast<long long>(s.value("rounds_reached_max", 0)),
                  static_cast<long long>(s.value("rounds", 0)), why.c_str(),
                  s.value("wall_seconds", 0.0));
  } else {
    std::snprintf(line, sizeof line, "%-28s %lld in %.1f s\n", "rounds",
                  static_cast<long long>(s.value("rounds", 0)), s.value("wall_seconds", 0.0));
  }
  out += line;
  return out;
}

// What the run reached: accuracy or test loss, the averaged model, the honest peers, consensus.
std::string qualityLines(const nlohmann::json& s) {
  std::string out;
  char line[256];
  if (s.contains("test_accuracy_mean") && !s["test_accuracy_mean"].is_null()) {
    out += "test accuracy (mean/min/max)  " + pct(s["test_accuracy_mean"]) + " / " +
           pct(s["test_accuracy_min"]) + " / " + pct(s["test_accuracy_max"]) + "\n";
  }
  const bool accuracy = s.contains("test_accuracy_mean") && !s["test_accuracy_mean"].is_null();
  if (!accuracy && s.contains("test_loss_mean") && !s["test_loss_mean"].is_null()) {
    // What a language model (or any program reporting test_loss) has instead of an accuracy.
    std::snprintf(line, sizeof line, "%-28s  %.4g / %.4g / %.4g\n", "test loss (mean/min/max)",
                  s["test_loss_mean"].get<double>(), s["test_loss_min"].get<double>(),
                  s["test_loss_max"].get<double>());
    out += line;
  }
  if (s.contains("averaged_model_accuracy") && !s["averaged_model_accuracy"].is_null()) {
    out += "averaged model accuracy       " + pct(s["averaged_model_accuracy"]) + "\n";
  }
  if (s.contains("honest_test_accuracy_mean") && !s["honest_test_accuracy_mean"].is_null()) {
    out += "honest peers' accuracy        " + pct(s["honest_test_accuracy_mean"]) + " / " +
           pct(s["honest_test_accuracy_min"]) + " / " + pct(s["honest_test_accuracy_max"]) +
           " (attackers: " + s["attackers"].dump() + ")\n";
  }
  if (s.contains("quarantined_by_trust") && !s["quarantined_by_trust"].empty()) {
    std::string list;
    for (const auto& q : s["quarantined_by_trust"])
      list += (list.empty() ? "" : ", ") + std::to_string(q.value("peer", -1)) + " -> " +
              std::to_string(q.value("neighbour", -1));
    out += "quarantined by trust          " + list + "\n";
  }
  if (s.contains("consensus_distance_final")) {
    std::snprintf(line, sizeof line, "%-28s  %.3g\n", "consensus distance (final)",
                  s["consensus_distance_final"].get<double>());
    out += line;
  }
  if (s.contains("optimum_distance")) {
    std::snprintf(line, sizeof line, "%-28s  %.3g\n", "distance to optimum",
                  s["optimum_distance"].get<double>());
    out += line;
  }
  return out;
}

// What it cost and how it went: bytes, peers finished, memory, and what went wrong.
std::string statusLines(const nlohmann::json& s) {
  std::string out;
  char line[256];
  const auto sent = s.value("bytes_sent_total", std::uint64_t{0});
  const auto dense = s.value("bytes_dense_equivalent", std::uint64_t{0});
  std::snprintf(line, sizeof line, "%-28s  %s (dense fp32 would be %s: %.1fx less)\n", "bytes sent",
                mb(sent).c_str(), mb(dense).c_str(), sent ? double(dense) / double(sent) : 0.0);
  out += line;
  std::snprintf(line, sizeof line, "%-28s  %d of %d\n", "peers finished",
                s.value("peers_finished", 0), s.value("peers", 0));
  out += line;
  if (const auto rss = s.value("peak_rss_bytes_max", std::uint64_t{0}); rss > 0) {
    std::snprintf(line, sizeof line, "%-28s  %s (the largest peer process)\n", "peak memory",
                  mb(rss).c_str());
    out += line;
  }
  if (s.value("degraded", false)) {
    std::string list;
    for (const auto& d : s.value("degraded_peers", nlohmann::json::array())) {
      list += std::string(list.empty() ? "" : "; ") + "peer " +
              std::to_string(d.value("rank", -1)) + ": " + d.value("reason", std::string());
    }
    out += "DEGRADED                      " + list + "\n";
  }
  if (s.contains("interrupted")) {
    out += "INTERRUPTED                   by " + s.value("interrupted", std::string()) + ": " +
           std::to_string(s.value("stopped_peers", 0)) + " of " +
           std::to_string(s.value("launched_peers", 0)) +
           " peers stopped when told to (SIGINT, forwarded)\n";
  }
  if (s.contains("failed_at_startup")) {
    std::string ranks;
    for (const auto& r : s["failed_at_startup"]) {
      ranks += (ranks.empty() ? "" : ", ") + std::to_string(r.is_number() ? r.get<int>() : -1);
    }
    out += "NOT STARTED                   peer " + ranks +
           " failed before its first round; the other peers were stopped\n";
  }
  if (s.value("diverged", false))
    out += "DIVERGED                      " + s.value("diverged_message", std::string()) + "\n";
  return out;
}

}  // namespace

std::string summaryTable(const nlohmann::json& s) {
  return runLines(s) + qualityLines(s) + statusLines(s);
}

namespace {
constexpr char kModelMagic[8] = {'G', 'V', 'M', 'O', 'D', 'E', 'L', '2'};
constexpr char kModelMagicV1[8] = {'G', 'V', 'M', 'O', 'D', 'E', 'L', '1'};
}  // namespace

Status writeModel(const std::string& path, std::span<const float> x) {
  const std::uint64_t n = x.size();
  auto bytes = [](const void* p, std::size_t size) {
    return std::span<const std::uint8_t>(static_cast<const std::uint8_t*>(p), size);
  };
  std::uint8_t count[8];
  storeLe(count, n);
  const auto& crc32c = kernels::cpuOps().crc32c;
  std::uint32_t crc = crc32c(0, reinterpret_cast<const std::uint8_t*>(kModelMagic), 8);
  crc = crc32c(crc, count, 8);
  crc = crc32c(crc, reinterpret_cast<const std::uint8_t*>(x.data()), x.size_bytes());
  std::uint8_t sum[8];
  storeLe(sum, std::uint64_t{crc});
  return writeFileAtomically(path, {bytes(kModelMagic, 8), bytes(count, 8),
                                    bytes(x.data(), x.size_bytes()), bytes(sum, 8)});
}

Result<std::vector<float>> readModel(const std::string& path, std::size_t expected) {
  constexpr std::uint64_t kHeader = 16, kTrailer = 8;  // magic + count; CRC32C
  const std::uint64_t limit = expected > (UINT64_MAX - 64) / sizeof(float)
                                  ? UINT64_MAX
                                  : kHeader + kTrailer + sizeof(float) * expected;
  auto read = readRegularFile(path, limit);
  if (!read.isOk()) {
    if (read.status().code() == ErrorCode::kNotFound) return notFound("cannot open " + path);
    return dataLoss(read.status().message() + " (a model file of " + std::to_string(expected) +
                    " parameters)");
  }
  return parseModel(*read, path, expected);
}

Result<std::vector<float>> parseModel(std::span<const std::uint8_t> raw, const std::string& path,
                                      std::size_t expected) {
  constexpr std::uint64_t kHeader = 16, kTrailer = 8;
  if (raw.size() < kHeader) return dataLoss(path + ": not a model file (too short)");
  const bool v1 = std::memcmp(raw.data(), kModelMagicV1, 8) == 0;
  if (!v1 && std::memcmp(raw.data(), kModelMagic, 8) != 0) {
    return dataLoss(path + ": not a model file");
  }
  const std::uint64_t n = loadLe<std::uint64_t>(raw.data() + 8);
  if (n != expected) {
    return dataLoss(path + ": has " + std::to_string(n) + " parameters, expected " +
                    std::to_string(expected));
  }
  const std::uint64_t trailer = v1 ? 0 : kTrailer;
  // n is compared with the bytes there are before any arithmetic on it (a forged count times 4
  // wraps around).
  if (n > raw.size() / sizeof(float) || raw.size() != kHeader + sizeof(float) * n + trailer) {
    return dataLoss(path + ": " + std::to_string(raw.size()) + " bytes, a model of " +
                    std::to_string(n) + " parameters has " +
                    std::to_string(kHeader + sizeof(float) * n + trailer) + " (truncated?)");
  }
  if (!v1) {
    const std::size_t body = raw.size() - kTrailer;
    if (loadLe<std::uint64_t>(raw.data() + body) != kernels::cpuOps().crc32c(0, raw.data(), body)) {
      return dataLoss(path + ": checksum mismatch (corrupt)");
    }
  }
  std::vector<float> x(n);
  std::memcpy(x.data(), raw.data() + kHeader, sizeof(float) * n);
  return x;
}

std::vector<PeerResult> readPeerResults(const std::string& dir, const std::vector<int>& ranks) {
  std::vector<PeerResult> results;
  for (int rank : ranks) {
    const std::string r = std::to_string(rank);
    // A record of counters and a few maps: 64 MiB is far above a real one.
    auto text = readRegularTextFile(dir + "/peer-" + r + ".final.json", 64ull << 20);
    PeerResult result;
    result.rank = rank;
    if (text.isOk()) {
      try {
        result = peerResultFromJson(nlohmann::json::parse(*text));
        auto m =
            readModel(dir + "/model-" + r + ".bin", static_cast<std::size_t>(result.modelSize));
        if (m.isOk())
          result.model = std::move(*m);
        else
          result.finished = false;
      } catch (const nlohmann::json::exception&) {
        result.finished = false;
      }
    }
    results.push_back(std::move(result));
  }
  return results;
}

}  // namespace grapevine::engine
