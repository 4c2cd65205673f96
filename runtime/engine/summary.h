// The end-of-run summary (DIR/summary.json) computed from every peer's final model and counters.
// Field names are a user contract (scripts read them); extend, never rename.
#pragma once

#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "runtime/config/config.h"
#include "runtime/engine/peer_core.h"
#include "runtime/engine/setup.h"

namespace grapevine::engine {

struct PeerResult {
  int rank = 0;
  bool finished = false;      // ran all rounds
  std::int64_t rounds = 0;    // rounds completed
  double testAccuracy = 0.0;  // NaN without a notion of accuracy
  double testLoss = 0.0;
  double trainLoss = 0.0;
  std::uint64_t bytesSent = 0;
  std::uint64_t bytesReceived = 0;
  std::uint64_t bytesDenseEquivalent = 0;
  std::uint64_t suspectRounds = 0;
  std::uint64_t deadNeighbours = 0;
  std::uint64_t revivedNeighbours = 0;   // dead neighbours that came back (PeerCore::revive)
  std::uint64_t rejoinedNeighbours = 0;  // neighbours connected again (PeerCore::rejoin)
  std::uint64_t roundsSkipped = 0;       // rounds skipped to catch up with the neighbours
  // algorithm.staleness (PeerCounters): neighbours mixed from an earlier round's replica, rounds
  // without local steps because the neighbours were ahead. In the JSON only when not 0.
  std::uint64_t staleMixes = 0;
  std::uint64_t roundsComputeSkipped = 0;
  // How healthy its rounds were (PeerCounters): rounds trained alone or below half its degree
  // because neighbours were lost, and the neighbours lost and never back at the end.
  std::uint64_t roundsIsolated = 0;
  std::uint64_t roundsBelowHalfDegree = 0;
  std::uint64_t neighboursLost = 0;
  std::uint64_t droppedFrames = 0;
  std::uint64_t replicaMismatches = 0;
  std::uint64_t resyncs = 0;
  std::uint64_t modelSize = 0;
  // The peer process's peak resident memory (getrusage's maximum RSS) when it wrote its results;
  // 0: not measured (the simulator's peers share one process).
  std::uint64_t peakRssBytes = 0;
  double consensusStep = std::numeric_limits<double>::quiet_NaN();  // last round's (StepReport)
  double compressorQuality = std::numeric_limits<double>::quiet_NaN();
  // Robust mixing: what it knows of each neighbour (trustJson, records.h); empty without.
  nlohmann::json neighbourTrust = nlohmann::json::array();
  std::vector<float> model;  // final parameters (empty when the peer did not finish)
  // Training diverged (here or at a peer whose notice reached this one): the model is the last
  // finite one, from the start of the abandoned round.
  std::optional<Divergence> divergence;
};

// DIR/peer-<rank>.final.json (everything but the model, which goes to DIR/model-<rank>.bin).
nlohmann::json peerResultToJson(const PeerResult& r);
PeerResult peerResultFromJson(const nlohmann::json& j);  // throws nlohmann::json::exception

// `withModel`: PeerResult::model gets a copy of the peer's model (a process that writes the model
// from the peer itself does without the copy: one model size less at the end of a run).
PeerResult collectResult(PeerCore& peer, bool finished, bool withModel = true);

// Builds summary.json: rounds, wall_seconds, transport, test_accuracy_{mean,min,max},
// averaged_model_accuracy, consensus_distance_final, bytes_sent_total, bytes_dense_equivalent,
// consensus_step (mean of the peers' last steps; _min, _max) and compressor_quality (mean),
// plus per-peer rows, spectral gap, and for quadratic/consensus optimum_distance and
// consensus_error; "diverged" (always) and, when true, "diverged_round" (the earliest round a peer
// detected it), "diverged_peer", "diverged_reason" and "diverged_message". The accuracies and
// distances of a diverged run are those of the peers' last finite models. rounds_reached_min/max:
// the fewest and most rounds the peers ran. `interruptedBy` (launch: "SIGINT" or "SIGTERM" when the
// user stopped the run) becomes "interrupted"; a peer that did not finish its rounds is then not
// counted as degraded.
nlohmann::json makeSummary(const RunPlan& plan, const std::vector<PeerResult>& peers,
                           double wallSeconds, const std::string& transport,
                           const std::string& interruptedBy = "");

// One faults.events item as summary.json's "faults" lists it, the part both runners write: "kind",
// "link" ([a, b], link-down) or "peer", and the schedule as the config gives it: "at_round" and
// "rounds" (when given) for an event by round (`grapevine sim`), "at" and "seconds" (when given)
// for one by wall time (`grapevine launch`). Each runner adds when and how it executed the event
// (sim: "executed_at_round", "event", "resumed_from_round"; launch: "executed_at", "ended_at", a
// link's packet counts). Field names are a user contract, as for the rest of the summary.
nlohmann::json faultEventJson(const config::FaultEvent& e);

// Every listed peer's result from DIR/peer-<rank>.final.json and DIR/model-<rank>.bin, in the
// order given; a peer whose files are missing or unreadable counts as not finished. What `launch`
// and `summarize` build summary.json from.
std::vector<PeerResult> readPeerResults(const std::string& dir, const std::vector<int>& ranks);

// Writes `json` pretty-printed (2-space indent, trailing newline) to `path`, replacing it
// atomically (writeFileAtomically: a crash leaves the old file or the new one, never a torn one):
// how DIR/summary.json and DIR/peer-<rank>.final.json are written. kUnavailable naming the path
// when the file cannot be written.
Status writeJsonFile(const std::string& path, const nlohmann::json& json);

// A human table of the summary, for the end of `launch` / `sim`.
std::string summaryTable(const nlohmann::json& summary);

// Model files: DIR/model-<rank>.bin, written atomically: "GVMODEL2", u64 count, count
// little-endian fp32 values, u64 CRC32C of the bytes before it. readModel reads a regular file of
// exactly that size for `expected` values (format 1 of older builds, without the checksum, too)
// and kDataLoss says what is wrong; parseModel checks bytes already read (fuzz_run_files).
Status writeModel(const std::string& path, std::span<const float> x);
Result<std::vector<float>> readModel(const std::string& path, std::size_t expected);
Result<std::vector<float>> parseModel(std::span<const std::uint8_t> raw, const std::string& path,
                                      std::size_t expected);

}  // namespace grapevine::engine
