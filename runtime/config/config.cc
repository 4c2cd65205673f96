#include "runtime/config/config.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iterator>
#include <limits>

#include "runtime/common/enum_names.h"

namespace grapevine::config {
namespace {
// Indexed by Emulation.
constexpr std::string_view kEmulationNames[] = {"none", "netns"};
// Indexed by FaultKind.
constexpr std::string_view kFaultKindNames[] = {"pause",   "kill",      "restart", "link-down",
                                                "corrupt", "sign-flip", "noise",   "alie",
                                                "ipm",     "dissensus", "bias",    "replay"};

std::string numberText(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}
}  // namespace

std::string_view faultKindName(FaultKind kind) { return enumName(kFaultKindNames, kind); }

std::optional<FaultKind> parseFaultKind(std::string_view name) {
  return parseEnum<FaultKind>(kFaultKindNames, name);
}

const std::vector<std::string_view>& faultKindNames() {
  static const std::vector<std::string_view> names = enumNameList(kFaultKindNames);
  return names;
}

bool isAttack(FaultKind kind) { return kind >= FaultKind::kSignFlip; }

double defaultAttackScale(FaultKind kind) {
  switch (kind) {
    case FaultKind::kSignFlip:
    case FaultKind::kNoise:
    case FaultKind::kAlie:
    case FaultKind::kDissensus:
      return 1.0;
    case FaultKind::kIpm:
      return 0.1;
    case FaultKind::kBias:
      return 0.1;
    default:
      return 0.0;
  }
}

double FaultEvent::start() const {
  return atRound ? static_cast<double>(*atRound) : atSeconds.value_or(0.0);
}

double FaultEvent::end() const {
  if (kind == FaultKind::kKill || (isAttack(kind) && !rounds && !seconds))
    return std::numeric_limits<double>::infinity();
  return start() + (atRound ? static_cast<double>(rounds.value_or(0)) : seconds.value_or(0.0));
}

std::string FaultEvent::describe() const {
  std::string s(faultKindName(kind));
  if (kind == FaultKind::kLinkDown)
    s += " link [" + std::to_string(linkA) + ", " + std::to_string(linkB) + "]";
  else
    s += " peer " + std::to_string(peer);
  s += atRound ? " at round " + std::to_string(*atRound) : " at " + numberText(start()) + " s";
  if (isAttack(kind) && kind != FaultKind::kReplay)
    s += " (scale " + numberText(attackScale()) + ")";
  if (isAttack(kind) && !rounds && !seconds) {
    s += " for the rest of the run";
  } else if (kind != FaultKind::kKill) {
    const std::string len = atRound ? std::to_string(rounds.value_or(0)) + " rounds"
                                    : numberText(seconds.value_or(0.0)) + " s";
    s += (kind == FaultKind::kRestart ? ", back after " : " for ") + len;
  }
  return s;
}

std::string_view emulationName(Emulation emulation) { return enumName(kEmulationNames, emulation); }

std::optional<Emulation> parseEmulation(std::string_view name) {
  return parseEnum<Emulation>(kEmulationNames, name);
}

const std::vector<std::string_view>& emulationNames() {
  static const std::vector<std::string_view> names = enumNameList(kEmulationNames);
  return names;
}

std::vector<PeerAddress> PeersSection::addresses() const {
  if (!list.empty()) return list;
  std::vector<PeerAddress> out;
  out.reserve(count);
  for (int r = 0; r < count; ++r) out.push_back({host, basePort + r});
  return out;
}

std::string Config::keyFilePath() const {
  if (security.keyFile.empty() || security.keyFile[0] == '/' || sourcePath.empty()) {
    return security.keyFile;
  }
  return (std::filesystem::path(sourcePath).parent_path() / security.keyFile).string();
}

namespace {
bool isLoopback(std::string host) {
  if (host == "localhost") return true;
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  unsigned char v4[4];
  if (inet_pton(AF_INET, host.c_str(), v4) == 1) return v4[0] == 127;
  unsigned char v6[16];
  if (inet_pton(AF_INET6, host.c_str(), v6) == 1) {
    static const unsigned char kLoop[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
    return std::equal(v6, v6 + 16, kLoop);
  }
  return false;  // a name, or `auto`: assume a network
}
}  // namespace

bool Config::anyNonLoopbackHost() const {
  if (peers.list.empty()) return !isLoopback(peers.host);
  return std::any_of(peers.list.begin(), peers.list.end(),
                     [](const PeerAddress& a) { return !isLoopback(a.host); });
}

topology::Spec Config::topologySpec() const {
  topology::Spec s;
  s.kind = topology.kind;
  s.peers = peers.count;
  s.dims = topology.dims;
  s.degree = topology.degree;
  s.probability = topology.probability;
  s.seed = topology.seed.value_or(run.seed);
  s.weights = topology.weights;
  s.edges = topology.edges;
  s.directed = topology.directed;
  return s;
}

LinkParams NetworkSection::link(int from, int to) const {
  LinkParams p{bandwidthMbit, latencyMs, jitterMs, lossPercent};
  // Per-peer: the more restrictive end wins among the ends that set a value.
  std::optional<double> bw, lat, jit, loss;
  auto bwRank = [](double v) { return v <= 0 ? std::numeric_limits<double>::infinity() : v; };
  for (const PeerNetwork& pn : peers) {
    if (pn.rank != from && pn.rank != to) continue;
    const LinkOverride& o = pn.link;
    if (o.bandwidthMbit && (!bw || bwRank(*o.bandwidthMbit) < bwRank(*bw))) bw = o.bandwidthMbit;
    if (o.latencyMs) lat = std::max(lat.value_or(0.0), *o.latencyMs);
    if (o.jitterMs) jit = std::max(jit.value_or(0.0), *o.jitterMs);
    if (o.lossPercent) loss = std::max(loss.value_or(0.0), *o.lossPercent);
  }
  if (bw) p.bandwidthMbit = *bw;
  if (lat) p.latencyMs = *lat;
  if (jit) p.jitterMs = *jit;
  if (loss) p.lossPercent = *loss;
  // Per-edge: replaces (the last matching item wins).
  for (const EdgeNetwork& e : edges) {
    if (!((e.a == from && e.b == to) || (e.a == to && e.b == from))) continue;
    if (e.link.bandwidthMbit) p.bandwidthMbit = *e.link.bandwidthMbit;
    if (e.link.latencyMs) p.latencyMs = *e.link.latencyMs;
    if (e.link.jitterMs) p.jitterMs = *e.link.jitterMs;
    if (e.link.lossPercent) p.lossPercent = *e.link.lossPercent;
  }
  return p;
}

double NetworkSection::computeScaleOf(int rank) const {
  double s = computeScale;
  for (const PeerNetwork& pn : peers) {
    if (pn.rank == rank && pn.computeScale) s = *pn.computeScale;
  }
  return s;
}

double NetworkSection::nodeBandwidthOf(int rank) const {
  double v = nodeBandwidthMbit;
  for (const PeerNetwork& pn : peers) {
    if (pn.rank == rank && pn.nodeBandwidthMbit) v = *pn.nodeBandwidthMbit;
  }
  return v;
}

bool NetworkSection::anyNodeCap() const {
  if (nodeBandwidthMbit > 0) return true;
  for (const PeerNetwork& pn : peers) {
    if (pn.nodeBandwidthMbit && *pn.nodeBandwidthMbit > 0) return true;
  }
  return false;
}

Result<int> rankFromEnvironment() {
  for (const char* name : {"GRAPEVINE_RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMIX_RANK"}) {
    const char* v = std::getenv(name);
    if (!v) continue;
    char* end = nullptr;
    const long r = std::strtol(v, &end, 10);
    if (end == v || *end != '\0' || r < 0 || r > std::numeric_limits<int>::max()) {
      return invalidArgument(std::string(name) + "='" + v +
                             "' is not a rank (a non-negative integer)");
    }
    return static_cast<int>(r);
  }
  return -1;
}

}  // namespace grapevine::config
