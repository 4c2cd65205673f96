// The run configuration: typed sections filled from one YAML file through the schema table
// (schema.h). Precedence: defaults < YAML < GRAPEVINE_* environment < command-line overrides
// (`--set key=value`). Every field's default, type, range and doc live in the schema table only;
// the initialisers below are the defaults, and a test checks they agree with the table's text.
//
// Enum keys are typed: each enum and its name table belong to the library that owns the concept
// (log level: common/log.h; topology kind and weights: topology/spec.h; algorithm:
// algorithms/algorithm.h; momentum kind and schedule: train/optimizer.h; workload and partition:
// train/options.h; compression: compress/options.h; emulation: below). The schema takes its
// allowed values from those tables, so a loaded Config never holds a value outside them.
// transport.backend stays a string: backends are registered and looked up by name
// (transport/backend_names.h lists the names the schema accepts).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "compress/options.h"
#include "runtime/algorithms/algorithm.h"
#include "runtime/common/log.h"
#include "runtime/train/optimizer.h"
#include "runtime/train/options.h"
#include "runtime/train/outer.h"
#include "topology/spec.h"

namespace grapevine::config {

struct PeerAddress {
  std::string host;
  int port = 0;
  bool operator==(const PeerAddress&) const = default;
};

struct RunSection {
  std::string name = "grapevine";
  std::uint64_t seed = 1;
  std::int64_t rounds = 1000;
  log::Level logLevel = log::Level::kInfo;
  bool finalAverage = false;
};

struct PeersSection {
  int count = 0;
  std::string host = "127.0.0.1";
  int basePort = 29500;
  std::vector<PeerAddress> list;  // explicit addresses; when set, count = list.size()
  // A shared folder where each peer publishes its address and reads its neighbours' (engine/
  // rendezvous.h); empty: addresses come from `list` or host + base_port. Never with `list`.
  std::string rendezvous;
  double connectTimeout = 30.0;
  double heartbeatInterval = 0.2;
  double deadAfter = 2.0;
  // The address of every peer, from `list` or from host + base_port + rank. With `rendezvous` only
  // the ports are known before the run (host is this peer's own, possibly `auto`).
  std::vector<PeerAddress> addresses() const;
};

struct TopologySection {
  topology::Kind kind = topology::Kind::kRing;
  topology::WeightsKind weights = topology::WeightsKind::kMetropolis;
  std::vector<int> dims;
  int degree = 4;
  double probability = 0.3;
  std::optional<std::uint64_t> seed;  // defaults to run.seed
  std::vector<topology::WeightedEdge> edges;
  bool directed = false;  // kind edges: [a, b] means a sends to b
};

struct TransportSection {
  std::string backend = "ucx";
  bool busyPoll = false;
  std::string ucxTls;
  std::int64_t ucxRndvThresh = 2ll << 20;  // bytes; 0: UCX's own choice
  std::string libfabricProvider = "tcp;ofi_rxm";
  std::int64_t maxFrameBytes = 64ll << 20;
  double ioTimeout = 30.0;
};

struct AlgorithmSection {
  algorithms::AlgorithmKind name = algorithms::AlgorithmKind::kChoco;
  std::optional<double> consensusStep;  // empty: `auto`
  bool overlap = false;
  int localSteps = 1;
  int checkEvery = 50;
  double roundTimeout = 5.0;
  // Each neighbour's deadline follows its own arrival times (engine/deadline.h).
  bool adaptiveTimeout = false;
  // CHOCO: rounds a neighbour may lag before a round waits for it (0: synchronous rounds).
  int staleness = 0;
  // push-sum with overlap: tau, the rounds a share stays in flight before it is mixed (OSGP).
  int overlapRounds = 1;
  // Robust mixing (runtime/algorithms/robust.h): the rule, b, the quarantine score, loss screening.
  algorithms::RobustRule robust = algorithms::RobustRule::kNone;
  int robustByzantine = 1;
  double robustQuarantine = 0.5;
  int robustProbe = 0;  // loss screening: samples of the own shard (0: off)
};

struct OptimizerSection {
  train::OptimizerKind kind = train::OptimizerKind::kSgd;
  double lr = 0.1;
  double momentum = 0.9;  // adamw: beta1
  double beta2 = 0.999;   // adamw
  double eps = 1e-8;      // adamw
  bool nesterov = true;
  train::MomentumKind momentumKind = train::MomentumKind::kLocal;
  int batchSize = 64;
  // Cosine to min_lr at run.rounds: the peers reach consensus as the steps shrink, so the final
  // models are as good as their average (docs/algorithms.md, "Defaults that train").
  train::LrScheduleKind schedule = train::LrScheduleKind::kCosine;
  int warmupRounds = 0;
  double weightDecay = 0.0;
  std::vector<int> stepMilestones;
  double stepGamma = 0.1;
  double minLr = 0.0;
};

// outer.*: an outer optimizer over each round's gossip-averaged pseudo-gradient (train/outer.h).
struct OuterSection {
  train::OuterKind optimizer = train::OuterKind::kNone;
  double lr = 0.7;        // DiLoCo's outer lr
  double momentum = 0.9;  // and momentum
};

struct CompressionSection {
  compress::Method method = compress::Method::kNone;
  double ratio = 0.05;  // top-5%: trains on every graph at the defaults (docs/algorithms.md)
  compress::Selector selector = compress::Selector::kApprox;
  double explore = 0.0;  // top-k: share of k drawn at random (Slim-DP); 0: plain top-k
  bool unbiased = false;
  int levels = 16;
  int blockSize = 256;
  compress::Rounding rounding = compress::Rounding::kNearest;
  int rank = 2;
  compress::Method fallback = compress::Method::kTopK;  // any but low-rank
  bool errorFeedback = false;
  compress::Lossless lossless = compress::Lossless::kNone;
  int zstdLevel = 3;
  std::int64_t denseBelow = 1024;
  std::int64_t chunkElements = 1 << 20;
};

struct WorkloadSection {
  train::WorkloadKind name = train::WorkloadKind::kFashionMnistMlp;
  std::vector<int> hidden = {128};
  std::vector<int> cnnChannels = {8, 16};
  int cnnHidden = 64;
  train::PartitionKind partition = train::PartitionKind::kIid;
  double alpha = 0.5;
  std::string dataDir = "/usr/share/datasets/fashion-mnist";
  std::string data;
  double noise = 0.0;
  int dim = 1000;
  int evalEvery = 100;
  int evalSamples = 0;
};

struct OutputSection {
  std::string dir = "runs/default";
  int logEvery = 10;
};

struct MonitoringSection {
  int prometheusPort = 0;  // 0: off; else peer r serves /metrics on prometheusPort + r
  std::string prometheusHost = "127.0.0.1";  // address it listens on; "peer": the control host
  bool prometheusBuildInfo = false;          // grapevine_info's version label
};

// Periodic checkpoints of each peer's whole state (runtime/engine/checkpoint.h), for --resume.
struct CheckpointSection {
  int every = 0;           // rounds between checkpoints; 0: off
  std::string dir;         // "" = <output.dir>/checkpoints
  int keep = 2;            // newest checkpoints kept per peer
  bool background = true;  // written beside the training (false: the round waits for the disk)
};

// One directed link's parameters, after overrides (NetworkSection::link).
struct LinkParams {
  double bandwidthMbit = 0.0;  // 0 = unlimited
  double latencyMs = 0.0;      // one way
  double jitterMs = 0.0;
  double lossPercent = 0.0;
};

// Link keys an override may set; an unset one keeps the value below it.
struct LinkOverride {
  std::optional<double> bandwidthMbit, latencyMs, jitterMs, lossPercent;
};

// `network.peers` item: every link touching `rank` (both directions), its compute speed and its
// own interface's cap.
struct PeerNetwork {
  int rank = 0;
  LinkOverride link;
  std::optional<double> computeScale;
  std::optional<double> nodeBandwidthMbit;
};

// `network.edges` item: the link between a and b, both directions.
struct EdgeNetwork {
  int a = 0, b = 0;
  LinkOverride link;
};

// `network.emulate`: how `grapevine launch` realises the links below. The config owns this enum
// because it owns the network description (LinkParams); runtime/netemu implements kNetns.
enum class Emulation { kNone, kNetns };

// Names as configs spell them: "none", "netns", in enum order (the one table).
std::string_view emulationName(Emulation emulation);
std::optional<Emulation> parseEmulation(std::string_view name);
const std::vector<std::string_view>& emulationNames();

struct NetworkSection {
  Emulation emulate = Emulation::kNone;
  double bandwidthMbit = 0.0;  // 0 = unlimited
  double latencyMs = 0.0;
  double jitterMs = 0.0;
  double lossPercent = 0.0;
  // Each peer's interface: all of its links share this rate in each direction (egress and ingress
  // capped separately), as one NIC does; on top of every link's own bandwidth. 0 = no cap.
  double nodeBandwidthMbit = 0.0;
  double computeScale = 1.0;
  double computeMs = 0.0;  // 0 = measured
  std::vector<PeerNetwork> peers;
  std::vector<EdgeNetwork> edges;

  // The link from -> to: the defaults above; then the per-peer overrides of either end (a link is
  // as slow as its slower end: the lower bandwidth, the higher latency, jitter and loss of the ends
  // that set one); then a per-edge override, which wins.
  LinkParams link(int from, int to) const;
  // network.compute_scale, or the peer's own compute_scale.
  double computeScaleOf(int rank) const;
  // network.node_bandwidth_mbit, or the peer's own (the last matching network.peers item wins);
  // 0 = no cap.
  double nodeBandwidthOf(int rank) const;
  // Whether some peer's interface is capped.
  bool anyNodeCap() const;
  // Whether any override is given (every link equal otherwise).
  bool uniform() const { return peers.empty() && edges.empty(); }
};

// security.*: docs/security.md.
struct SecuritySection {
  std::string keyFile;   // the pre-shared key; empty: no authentication (today's behaviour)
  bool encrypt = false;  // AEAD on every message (needs keyFile)
  // A received message may change a value by at most this times max(1, |model|_inf); 0: no bound.
  double maxDeltaRatio = 1e6;
};

// `faults:`: a schedule of faults that `grapevine sim` (by round) and `grapevine launch --emulate`
// (by wall time from the first round) execute, for tests and fault studies (docs/faults.md).
// The behavioural faults (kSignFlip..kReplay) make a member an attacker: it publishes a crafted
// model instead of its own (runtime/engine/attacks.h, docs/faults.md "Attackers").
enum class FaultKind {
  kPause,
  kKill,
  kRestart,
  kLinkDown,
  kCorrupt,
  kSignFlip,
  kNoise,
  kAlie,
  kIpm,
  kDissensus,
  kBias,
  kReplay
};

// Names as configs spell them: "pause", "kill", "restart", "link-down", "corrupt", "sign-flip",
// "noise", "alie", "ipm", "dissensus", "bias", "replay", in enum order.
std::string_view faultKindName(FaultKind kind);
std::optional<FaultKind> parseFaultKind(std::string_view name);
const std::vector<std::string_view>& faultKindNames();
// An attack (sign-flip .. replay): executed by the peer itself, like corrupt; its length may be
// left out (the rest of the run), and it takes a `scale` (not replay).
bool isAttack(FaultKind kind);
// The attack's `scale` when the item gives none (docs/faults.md).
double defaultAttackScale(FaultKind kind);

// One `faults:` item. Exactly one of atRound / atSeconds is set (which one a runner accepts is
// checked by the runner: sim counts rounds, launch wall time); the length (`rounds` / `seconds`, in
// the same unit as the start) is set for pause, restart (time down), link-down and corrupt, never
// for kill. corrupt is executed by the peer itself (every runner: sim by round, `grapevine peer` by
// round or by its own clock from its first round): its outgoing messages are damaged after their
// checksum was computed, so its neighbours refuse them and, in time, quarantine it.
struct FaultEvent {
  FaultKind kind = FaultKind::kPause;
  int peer = -1;               // pause, kill, restart, corrupt
  int linkA = -1, linkB = -1;  // link-down: the link between a and b, both directions
  std::optional<std::int64_t> atRound, rounds;
  std::optional<double> atSeconds, seconds;
  std::optional<double> scale;  // attacks: their strength (defaultAttackScale when not given)

  bool byRound() const { return atRound.has_value(); }
  // [start, end) in the event's unit; kill and an attack without a length: end is +infinity.
  double start() const;
  double end() const;
  // "pause peer 3 at round 200 for 50 rounds": for logs and messages.
  std::string describe() const;
  double attackScale() const { return scale.value_or(defaultAttackScale(kind)); }
};

struct FaultsSection {
  std::vector<FaultEvent> events;
};

struct Config {
  std::string sourcePath;  // the YAML file it came from ("" for defaults)
  RunSection run;
  PeersSection peers;
  TopologySection topology;
  TransportSection transport;
  AlgorithmSection algorithm;
  OptimizerSection optimizer;
  OuterSection outer;
  CompressionSection compression;
  WorkloadSection workload;
  OutputSection output;
  MonitoringSection monitoring;
  CheckpointSection checkpoint;
  NetworkSection network;
  SecuritySection security;
  FaultsSection faults;

  // security.key_file as a path: relative paths are relative to the config file's folder, like
  // workload.data. Empty without a key.
  std::string keyFilePath() const;
  // Whether any peer's host is not a loopback address (127.0.0.0/8, ::1, localhost): traffic then
  // crosses a network, where security.key_file matters. `auto` hosts count as not loopback.
  bool anyNonLoopbackHost() const;

  // The topology as the topology library wants it (peers from peers.count, seed from run.seed).
  topology::Spec topologySpec() const;
};

// The rank a launcher gives this process: the first of GRAPEVINE_RANK (`grapevine launch`),
// SLURM_PROCID (srun), OMPI_COMM_WORLD_RANK and PMIX_RANK (mpirun) that is set; -1 when none is.
// kInvalidArgument naming the variable when that one is not a non-negative integer (a malformed
// rank is an error, never a reason to look at the next variable). `grapevine peer` and the API
// both take their rank from here.
Result<int> rankFromEnvironment();

}  // namespace grapevine::config
