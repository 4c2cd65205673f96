#include "runtime/engine/checkpoint.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <iterator>
#include <nlohmann/json.hpp>

#include "kernels/ops.h"
#include "runtime/algorithms/algorithm.h"
#include "runtime/common/atomic_file.h"
#include "runtime/common/bounded_file.h"
#include "runtime/common/byte_order.h"
#include "runtime/common/hash.h"
#include "runtime/common/log.h"
#include "runtime/config/schema.h"
#include "runtime/engine/setup.h"
#include "runtime/train/options.h"

namespace grapevine::engine {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

// Version 2 (this build writes it) ends with a CRC32C, version 1 (older builds) with FNV-1a 64:
// both are read. The CRC runs on the CPU's CRC32 instruction, 3 ms for 26 MB where FNV-1a took 30.
constexpr char kMagic[8] = {'G', 'V', 'C', 'K', 'P', 'T', '2', '\n'};
constexpr std::size_t kVersionByte = 6;
constexpr char kVersion1 = '1';
constexpr std::size_t kMaxNameBytes = 4096;

// Doubles travel as their bit patterns: exact, and NaN (an unreported loss) survives.
std::uint64_t bits(double v) { return std::bit_cast<std::uint64_t>(v); }
double fromBits(const Json& j) { return std::bit_cast<double>(j.get<std::uint64_t>()); }

Json countersToJson(const PeerCounters& c) {
  const auto byPeer = [](const std::map<int, std::uint64_t>& m) {
    Json j = Json::object();
    for (const auto& [peer, n] : m) j[std::to_string(peer)] = n;
    return j;
  };
  Json j = {{"bytes_sent", c.bytesSent},
            {"bytes_received", c.bytesReceived},
            {"bytes_dense_equivalent", c.bytesDenseEquivalent},
            {"bytes_sent_to", byPeer(c.bytesSentTo)},
            {"bytes_received_from", byPeer(c.bytesReceivedFrom)},
            {"messages_applied", c.messagesApplied},
            {"late_applied", c.lateApplied},
            {"suspect_rounds", c.suspectRounds},
            {"dead_neighbours", c.deadNeighbours},
            {"replica_checks", c.replicaChecks},
            {"replica_mismatches", c.replicaMismatches},
            {"resyncs", c.resyncs},
            {"dropped", c.dropped},
            {"collective_bytes", c.collectiveBytes},
            {"revived_neighbours", c.revivedNeighbours},
            {"rejoined_neighbours", c.rejoinedNeighbours},
            {"rounds_skipped", c.roundsSkipped}};
  if (c.staleMixes > 0) j["stale_mixes"] = c.staleMixes;
  if (c.roundsComputeSkipped > 0) j["rounds_compute_skipped"] = c.roundsComputeSkipped;
  return j;
}

PeerCounters countersFromJson(const Json& j) {
  const auto byPeer = [](const Json& o) {
    std::map<int, std::uint64_t> m;
    for (const auto& [peer, n] : o.items()) m[std::stoi(peer)] = n.get<std::uint64_t>();
    return m;
  };
  PeerCounters c;
  c.bytesSent = j.at("bytes_sent");
  c.bytesReceived = j.at("bytes_received");
  c.bytesDenseEquivalent = j.at("bytes_dense_equivalent");
  c.bytesSentTo = byPeer(j.at("bytes_sent_to"));
  c.bytesReceivedFrom = byPeer(j.at("bytes_received_from"));
  c.messagesApplied = j.at("messages_applied");
  c.lateApplied = j.at("late_applied");
  c.suspectRounds = j.at("suspect_rounds");
  c.deadNeighbours = j.at("dead_neighbours");
  c.replicaChecks = j.at("replica_checks");
  c.replicaMismatches = j.at("replica_mismatches");
  c.resyncs = j.at("resyncs");
  c.dropped = j.at("dropped").get<std::map<std::string, std::uint64_t>>();
  c.collectiveBytes = j.at("collective_bytes");
  // Absent from the checkpoints of older builds.
  c.revivedNeighbours = j.value("revived_neighbours", std::uint64_t{0});
  c.rejoinedNeighbours = j.value("rejoined_neighbours", std::uint64_t{0});
  c.roundsSkipped = j.value("rounds_skipped", std::uint64_t{0});
  c.staleMixes = j.value("stale_mixes", std::uint64_t{0});
  c.roundsComputeSkipped = j.value("rounds_compute_skipped", std::uint64_t{0});
  return c;
}

// Robust mixing's trust per neighbour (PeerState::trust), the doubles as their bits.
Json trustToJson(const std::vector<algorithms::NeighbourTrust>& trust) {
  Json j = Json::array();
  for (const auto& t : trust) {
    j.push_back({{"neighbour", t.neighbour},
                 {"rounds_mixed", t.roundsMixed},
                 {"rounds_clipped", t.roundsClipped},
                 {"clip_sum", bits(t.clipSum)},
                 {"score", bits(t.score)},
                 {"distrusted", t.distrusted},
                 {"rounds_lossy", t.roundsLossy}});
  }
  return j;
}

std::vector<algorithms::NeighbourTrust> trustFromJson(const Json& j) {
  std::vector<algorithms::NeighbourTrust> out;
  for (const auto& e : j) {
    algorithms::NeighbourTrust t;
    t.neighbour = e.at("neighbour");
    t.roundsMixed = e.at("rounds_mixed");
    t.roundsClipped = e.at("rounds_clipped");
    t.clipSum = fromBits(e.at("clip_sum"));
    t.score = fromBits(e.at("score"));
    t.distrusted = e.at("distrusted");
    t.roundsLossy = e.at("rounds_lossy");
    out.push_back(t);
  }
  return out;
}

Json configToJson(const std::vector<std::pair<std::string, std::string>>& config) {
  Json j = Json::object();
  for (const auto& [path, value] : config) j[path] = value;
  return j;
}

// The first key of `ours` the header's "config" gives another value (or none), as "key: the
// checkpoint's value vs ours"; "" when they agree or the checkpoint has no "config" (older builds).
// A key's default value as the identity shows it ("" for a path not in the schema).
std::string defaultValue(std::string_view path) {
  static const config::Config defaults;
  for (const auto& k : config::schema()) {
    if (k.path == path) return k.show(defaults);
  }
  return "";
}

std::string configMismatch(const Json& header,
                           const std::vector<std::pair<std::string, std::string>>& ours) {
  const auto it = header.find("config");
  if (it == header.end()) return "";
  if (!it->is_object()) return "config (not an object)";
  for (const auto& [path, value] : ours) {
    const auto theirs = it->find(path);
    if (theirs == it->end()) {
      // A key newer than the checkpoint's build: the run then had its default.
      if (value == defaultValue(path)) continue;
      return path + ": absent from the checkpoint, " + value + " here";
    }
    if (!theirs->is_string()) return path + " (not a string)";
    if (theirs->get<std::string>() != value) {
      return path + ": " + printable(theirs->get<std::string>()) + " in the checkpoint, " +
             printable(value) + " here";
    }
  }
  return "";
}

// A file's bytes as written: small pieces (magic, sizes, the header, section names) each in a
// buffer of its own (a deque keeps them in place as it grows), and the sections' values written
// straight from the state's own buffers, not copied (a copy of tens of MB into fresh memory cost
// more than the write itself).
class CheckpointParts {
 public:
  void addBytes(std::span<const std::uint8_t> bytes) {
    spans_.emplace_back(small_.emplace_back(bytes.begin(), bytes.end()));
  }
  void addLe64(std::uint64_t v) {
    std::uint8_t b[8];
    storeLe(b, v);
    addBytes(b);
  }
  void addSection(std::string_view name, const std::vector<float>& values) {
    std::uint8_t b[4];
    storeLe(b, static_cast<std::uint32_t>(name.size()));
    addBytes(b);
    addBytes({reinterpret_cast<const std::uint8_t*>(name.data()), name.size()});
    addLe64(values.size());
    spans_.emplace_back(reinterpret_cast<const std::uint8_t*>(values.data()),
                        values.size() * sizeof(float));
  }
  // The parts in order.
  const std::vector<std::span<const std::uint8_t>>& spans() const { return spans_; }

 private:
  std::deque<std::vector<std::uint8_t>> small_;
  std::vector<std::span<const std::uint8_t>> spans_;
};

// Reads what CheckpointParts::addSection wrote; false when the bytes run out or a size is absurd.
bool readSection(std::span<const std::uint8_t>& in, std::string& name, std::vector<float>& values) {
  if (in.size() < 4) return false;
  const std::uint32_t nameBytes = loadLe<std::uint32_t>(in.data());
  if (nameBytes > kMaxNameBytes || in.size() < 4 + std::size_t{nameBytes} + 8) return false;
  name.assign(reinterpret_cast<const char*>(in.data() + 4), nameBytes);
  const std::uint64_t count = loadLe<std::uint64_t>(in.data() + 4 + nameBytes);
  const std::size_t at = 4 + std::size_t{nameBytes} + 8;
  if (count > (in.size() - at) / sizeof(float)) return false;
  values.resize(count);
  std::memcpy(values.data(), in.data() + at, count * sizeof(float));
  in = in.subspan(at + count * sizeof(float));
  return true;
}

}  // namespace

CheckpointIdentity checkpointIdentity(const config::Config& config, const PeerCore& core) {
  CheckpointIdentity id;
  id.rank = core.rank();
  id.peers = config.peers.count;
  id.workload = std::string(train::workloadKindName(config.workload.name));
  id.algorithm = std::string(core.algorithm().name());
  id.parameters = core.model().size();
  for (const auto& k : config::schema()) {
    if (mustAgreeKey(k.path) || k.path.starts_with("optimizer.") || k.path.starts_with("outer.")) {
      id.config.emplace_back(k.path, k.show(config));
    }
  }
  return id;
}

std::string checkpointFolder(const config::Config& config, const std::string& outDir, int rank) {
  const std::string base =
      config.checkpoint.dir.empty() ? outDir + "/checkpoints" : config.checkpoint.dir;
  return base + "/rank-" + std::to_string(rank);
}

std::string checkpointPath(const std::string& folder, std::int64_t round) {
  char name[40];
  std::snprintf(name, sizeof name, "/round-%010lld.ckpt", static_cast<long long>(round));
  return folder + name;
}

std::vector<std::int64_t> checkpointRounds(const std::string& folder) {
  std::vector<std::int64_t> rounds;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(folder, ec)) {
    const std::string name = entry.path().filename().string();
    long long round = -1;
    char tail[8] = {};
    // Exactly "round-<digits>.ckpt" (temporary files of an interrupted write do not match).
    if (name.size() == 21 && std::sscanf(name.c_str(), "round-%10lld.%4s", &round, tail) == 2 &&
        std::string(tail) == "ckpt" && round >= 0) {
      rounds.push_back(round);
    }
  }
  std::sort(rounds.begin(), rounds.end());
  return rounds;
}

void removeCheckpointsAfter(const std::string& folder, std::int64_t round) {
  std::error_code ec;
  for (std::int64_t r : checkpointRounds(folder)) {
    if (r > round) fs::remove(checkpointPath(folder, r), ec);
  }
}

Status writeCheckpoint(const std::string& folder, const CheckpointIdentity& id,
                       std::uint32_t incarnation, const PeerState& s, int keep,
                       std::int64_t everyoneHas) {
  std::error_code ec;
  fs::create_directories(folder, ec);
  if (ec) return unavailable("cannot create " + folder + ": " + ec.message());
  Json h = {{"rank", id.rank},
            {"peers", id.peers},
            {"workload", id.workload},
            {"algorithm", id.algorithm},
            {"parameters", id.parameters},
            {"config", configToJson(id.config)},
            {"round", s.round},
            {"incarnation", incarnation},
            {"workload_step", s.workloadStep},
            {"gradient_ready", s.gradientReady},
            {"initial_norm", bits(s.health.initialNorm)},
            {"first_loss", bits(s.health.firstLoss)},
            {"loss_ema", bits(s.health.lossEma)},
            {"min_loss_ema", bits(s.health.minLossEma)},
            {"loss_seen", s.health.lossSeen},
            {"last_loss", bits(s.lastLoss)},
            {"last_lr", bits(s.lastLr)},
            {"counters", countersToJson(s.counters)}};
  Json scalars = Json::array();
  for (double v : s.algorithmScalars) scalars.push_back(bits(v));
  h["algorithm_scalars"] = scalars;
  if (!s.trust.empty()) h["trust"] = trustToJson(s.trust);
  const std::string header = h.dump();

  CheckpointParts parts;
  parts.addBytes({reinterpret_cast<const std::uint8_t*>(kMagic), sizeof kMagic});
  parts.addLe64(header.size());
  parts.addBytes({reinterpret_cast<const std::uint8_t*>(header.data()), header.size()});
  parts.addSection("model", s.model);
  parts.addSection("momentum", s.momentum);
  parts.addSection("gradient", s.gradient);
  if (!s.outerMomentum.empty()) parts.addSection("outer_momentum", s.outerMomentum);
  for (const auto& [name, values] : s.algorithm) parts.addSection("algorithm/" + name, values);
  std::uint32_t crc = 0;
  for (const auto& part : parts.spans()) {
    crc = kernels::cpuOps().crc32c(crc, part.data(), part.size());
  }
  parts.addLe64(crc);
  const std::string path = checkpointPath(folder, s.round);
  GV_RETURN_IF_ERROR(writeFileAtomically(path, parts.spans()));

  // Only now the old ones go: a crash before here leaves one more, never one fewer.
  for (std::int64_t r : checkpointsToDelete(checkpointRounds(folder), keep, everyoneHas)) {
    fs::remove(checkpointPath(folder, r), ec);
  }
  return Status::ok();
}

std::vector<std::int64_t> checkpointsToDelete(const std::vector<std::int64_t>& rounds, int keep,
                                              std::int64_t everyoneHas) {
  // The newest round at or below everyoneHas: it and everything after it stay.
  const auto anchor = std::upper_bound(rounds.begin(), rounds.end(), everyoneHas);
  if (anchor == rounds.begin()) return {};
  const std::size_t protectedFrom = static_cast<std::size_t>(anchor - rounds.begin()) - 1;
  const std::size_t kept = std::min(rounds.size(), static_cast<std::size_t>(std::max(keep, 1)));
  const std::size_t end = std::min(protectedFrom, rounds.size() - kept);
  return {rounds.begin(), rounds.begin() + static_cast<std::ptrdiff_t>(end)};
}

CheckpointWriter::CheckpointWriter(std::string folder, CheckpointIdentity id,
                                   std::uint32_t incarnation, int keep,
                                   std::function<std::int64_t()> everyoneHas,
                                   std::function<void(std::int64_t)> written)
    : folder_(std::move(folder)),
      id_(std::move(id)),
      incarnation_(incarnation),
      keep_(keep),
      everyoneHas_(std::move(everyoneHas)),
      onWritten_(std::move(written)),
      thread_([this] { run(); }) {}

CheckpointWriter::~CheckpointWriter() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void CheckpointWriter::write(const PeerCore& core) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return !pending_ && !busy_; });
  // The thread is idle and leaves state_ alone until pending_ is set.
  core.saveState(state_);
  pending_ = true;
  lock.unlock();
  cv_.notify_all();
}

void CheckpointWriter::flush() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return !pending_ && !busy_; });
}

std::uint64_t CheckpointWriter::written() const {
  std::lock_guard<std::mutex> lock(mu_);
  return written_;
}

void CheckpointWriter::run() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [this] { return pending_ || stop_; });
    if (!pending_) return;  // stopping, nothing left
    pending_ = false;
    busy_ = true;
    lock.unlock();
    const Status st = writeCheckpoint(folder_, id_, incarnation_, state_, keep_,
                                      everyoneHas_ ? everyoneHas_() : INT64_MAX);
    if (st.isOk()) {
      if (onWritten_) onWritten_(state_.round);
    } else {
      log::warn("checkpoint of round ", state_.round, " not written: ", st.message());
    }
    lock.lock();
    if (st.isOk()) ++written_;
    busy_ = false;
    cv_.notify_all();
  }
}

void CheckpointKnowledge::learn(int rank, std::int64_t round) {
  if (rank < 0 || static_cast<std::size_t>(rank) >= known_.size()) return;
  auto& k = known_[static_cast<std::size_t>(rank)];
  if (round <= k) return;
  k = round;
  if (!pending_[static_cast<std::size_t>(rank)]) {
    pending_[static_cast<std::size_t>(rank)] = 1;
    changed_.push_back(rank);
  }
}

// CheckpointKnowledge's messages: entries of (u32 rank, i64 round).
constexpr std::size_t kPair = 12;

Status CheckpointKnowledge::merge(std::span<const std::uint8_t> message) {
  if (message.size() % kPair != 0) {
    return dataLoss("checkpoint rounds message of " + std::to_string(message.size()) +
                    " bytes (not a whole number of 12-byte entries)");
  }
  for (std::size_t at = 0; at < message.size(); at += kPair) {
    const auto rank = loadLe<std::uint32_t>(message.data() + at);
    const auto round = static_cast<std::int64_t>(loadLe<std::uint64_t>(message.data() + at + 4));
    if (rank >= known_.size() || round < -1) {
      return dataLoss("checkpoint rounds message names rank " + std::to_string(rank) + " round " +
                      std::to_string(round) + " (out of range)");
    }
  }
  for (std::size_t at = 0; at < message.size(); at += kPair) {
    learn(static_cast<int>(loadLe<std::uint32_t>(message.data() + at)),
          static_cast<std::int64_t>(loadLe<std::uint64_t>(message.data() + at + 4)));
  }
  return Status::ok();
}

std::int64_t CheckpointKnowledge::everyoneHas() const {
  return known_.empty() ? -1 : *std::min_element(known_.begin(), known_.end());
}

std::vector<std::vector<std::uint8_t>> CheckpointKnowledge::takeUpdates(std::size_t maxBytes) {
  const std::size_t perMessage = std::max<std::size_t>(1, maxBytes / kPair);
  std::vector<std::vector<std::uint8_t>> out;
  for (std::size_t i = 0; i < changed_.size(); ++i) {
    if (i % perMessage == 0) out.emplace_back();
    std::uint8_t b[kPair];
    const int rank = changed_[i];
    pending_[static_cast<std::size_t>(rank)] = 0;
    storeLe(b, static_cast<std::uint32_t>(rank));
    storeLe(b + 4, static_cast<std::uint64_t>(known_[static_cast<std::size_t>(rank)]));
    out.back().insert(out.back().end(), b, b + kPair);
  }
  changed_.clear();
  return out;
}

Result<LoadedCheckpoint> readCheckpoint(const std::string& path, const CheckpointIdentity& id) {
  // One read of the whole file (tens of MB; a character iterator took ~0.25 s for 26 MB), of a
  // regular file of a size a checkpoint of this peer can have.
  GV_ASSIGN_OR_RETURN(const std::vector<std::uint8_t> bytes,
                      readRegularFile(path, checkpointSizeLimit(id)));
  return parseCheckpoint(bytes, path, id);
}

Result<LoadedCheckpoint> parseCheckpoint(std::span<const std::uint8_t> bytes,
                                         const std::string& path, const CheckpointIdentity& id) {
  const auto corrupt = [&](const std::string& why) { return dataLoss(path + ": " + why); };
  const bool version1 = bytes.size() > kVersionByte && bytes[kVersionByte] == kVersion1;
  char expected[sizeof kMagic];
  std::memcpy(expected, kMagic, sizeof kMagic);
  if (version1) expected[kVersionByte] = kVersion1;
  if (bytes.size() < sizeof kMagic + 16 ||
      std::memcmp(bytes.data(), expected, sizeof expected) != 0) {
    return corrupt("not a Grapevine checkpoint (bad magic or too short)");
  }
  const std::size_t bodyBytes = bytes.size() - 8;
  const std::uint64_t sum = version1 ? fnv1a64(bytes.data(), bodyBytes)
                                     : kernels::cpuOps().crc32c(0, bytes.data(), bodyBytes);
  if (loadLe<std::uint64_t>(bytes.data() + bodyBytes) != sum) {
    return corrupt("checksum mismatch (torn or corrupt)");
  }
  std::span<const std::uint8_t> in(bytes.data() + sizeof kMagic, bodyBytes - sizeof kMagic);
  const std::uint64_t headerBytes = loadLe<std::uint64_t>(in.data());
  if (headerBytes > in.size() - 8) return corrupt("header size out of range");
  Json h = Json::parse(in.begin() + 8, in.begin() + 8 + static_cast<std::ptrdiff_t>(headerBytes),
                       nullptr, false);
  if (h.is_discarded() || !h.is_object()) return corrupt("header is not JSON");
  in = in.subspan(8 + headerBytes);

  LoadedCheckpoint out;
  out.path = path;
  PeerState& s = out.state;
  try {
    const auto mismatch = [&](const char* field, const std::string& theirs,
                              const std::string& ours) {
      return invalidArgument(path + ": made for " + field + " " + theirs + ", this peer has " +
                             ours + " (another run's or config's checkpoint)");
    };
    if (h.at("rank").get<int>() != id.rank)
      return mismatch("rank", std::to_string(h.at("rank").get<int>()), std::to_string(id.rank));
    if (h.at("peers").get<int>() != id.peers)
      return mismatch("peers.count", std::to_string(h.at("peers").get<int>()),
                      std::to_string(id.peers));
    if (h.at("workload").get<std::string>() != id.workload)
      return mismatch("workload.name", h.at("workload"), id.workload);
    if (h.at("algorithm").get<std::string>() != id.algorithm)
      return mismatch("algorithm.name", h.at("algorithm"), id.algorithm);
    if (h.at("parameters").get<std::uint64_t>() != id.parameters)
      return mismatch("a model of", std::to_string(h.at("parameters").get<std::uint64_t>()),
                      std::to_string(id.parameters) + " parameters");
    if (const std::string key = configMismatch(h, id.config); !key.empty()) {
      return invalidArgument(path + ": made by another run (" + key +
                             "); skipped, as a checkpoint of another config");
    }
    s.round = h.at("round");
    out.incarnation = h.at("incarnation");
    s.workloadStep = h.at("workload_step");
    s.gradientReady = h.at("gradient_ready");
    s.health.initialNorm = fromBits(h.at("initial_norm"));
    s.health.firstLoss = fromBits(h.at("first_loss"));
    s.health.lossEma = fromBits(h.at("loss_ema"));
    s.health.minLossEma = fromBits(h.at("min_loss_ema"));
    s.health.lossSeen = h.at("loss_seen");
    s.lastLoss = fromBits(h.at("last_loss"));
    s.lastLr = fromBits(h.at("last_lr"));
    s.counters = countersFromJson(h.at("counters"));
    for (const auto& v : h.at("algorithm_scalars")) s.algorithmScalars.push_back(fromBits(v));
    if (h.contains("trust")) s.trust = trustFromJson(h.at("trust"));  // absent before robust mixing
  } catch (const Json::exception& e) {
    return corrupt(std::string("header: ") + e.what());
  }
  std::string name;
  std::vector<float> values;
  bool model = false;
  while (!in.empty()) {
    if (!readSection(in, name, values)) return corrupt("a section runs past the end");
    if (name == "model") {
      if (values.size() != id.parameters) {
        return corrupt("the model section holds " + std::to_string(values.size()) +
                       " values, the header says " + std::to_string(id.parameters));
      }
      const auto bad =
          std::find_if(values.begin(), values.end(), [](float v) { return !std::isfinite(v); });
      if (bad != values.end()) {
        return corrupt("the model is not finite (" + std::to_string(*bad) + " at parameter " +
                       std::to_string(bad - values.begin()) + ")");
      }
      s.model = std::move(values);
      model = true;
    } else if (name == "momentum") {
      s.momentum = std::move(values);
    } else if (name == "gradient") {
      s.gradient = std::move(values);
    } else if (name == "outer_momentum") {
      s.outerMomentum = std::move(values);
    } else if (name.rfind("algorithm/", 0) == 0) {
      s.algorithm.emplace_back(name.substr(10), std::move(values));
    } else {
      return corrupt("unknown section '" + name + "'");
    }
    values.clear();
  }
  if (!model) return corrupt("no model section");
  return out;
}

std::uint64_t checkpointSizeLimit(const CheckpointIdentity& id) {
  // Model, momentum (two buffers for adamw), gradient, an algorithm's own buffers (a public copy, a
  // tracker, ...) and up to two replicas per peer, each at most a model; the header and names are
  // small (64 MiB is far above any real one).
  const std::uint64_t copies = 8 + 2 * static_cast<std::uint64_t>(std::max(id.peers, 1));
  const std::uint64_t model = sizeof(float) * id.parameters;
  constexpr std::uint64_t kSmall = 64ull << 20;
  if (model > (UINT64_MAX - kSmall) / copies) return UINT64_MAX;
  return kSmall + copies * model;
}

std::optional<LoadedCheckpoint> latestCheckpoint(const std::string& folder,
                                                 const CheckpointIdentity& id,
                                                 std::int64_t maxRound) {
  auto rounds = checkpointRounds(folder);
  for (auto it = rounds.rbegin(); it != rounds.rend(); ++it) {
    if (*it > maxRound) continue;
    auto loaded = readCheckpoint(checkpointPath(folder, *it), id);
    if (loaded.isOk()) return std::move(*loaded);
    log::warn("skipping checkpoint: ", loaded.status().message());
  }
  return std::nullopt;
}

}  // namespace grapevine::engine
