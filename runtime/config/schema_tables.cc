// The schema's rows, one table per section (as UCX keeps one config table per component): each
// row is a key's path, type, range, doc and where its value lives in Config; its default is that
// field's initialiser in config.h. schema() concatenates the tables in the order below, which is
// the order of docs/config.md and of `grapevine config --explain`.
#include "runtime/config/schema_rows.h"
#include "runtime/transport/backend_names.h"

namespace grapevine::config::rows {

// run
std::vector<KeyDef> runKeys() {
  return {
      stringKey(
          "run.name", [](Config & c) -> auto& { return c.run.name; },
          "Name of the run, used in logs and output files"),
      intKey(
          "run.seed", [](Config & c) -> auto& { return c.run.seed; }, 0, 9.2e18,
          "Seed of every random choice (data shards, random graphs, rand-k, rounding)"),
      intKey(
          "run.rounds", [](Config & c) -> auto& { return c.run.rounds; }, 1, 1e9,
          "Number of gossip rounds each peer runs"),
      enumKey(
          "run.log_level", [](Config & c) -> auto& { return c.run.logLevel; },
          choicesOf(log::levelNames(), log::parseLevel), "Verbosity of each peer's log"),
      boolKey(
          "run.final_average", [](Config & c) -> auto& { return c.run.finalAverage; },
          "After the last round, average the peers' models exactly (a sum up a spanning tree of "
          "the graph to rank 0 and the average back down; around the ring, reduce-scatter then "
          "all-gather, when the graph has the ring 0-1-...-n-1 and the model is over 1 MiB of f64) "
          "so every peer ends with the same, deployable model; its time is the final record's "
          "average_seconds (docs/api.md)"),
  };
}

// peers
std::vector<KeyDef> peersKeys() {
  return {
      required(intKey(
          "peers.count", [](Config & c) -> auto& { return c.peers.count; }, 1, kMaxPeers,
          "Number of peers (with `peers` given as a list, its length)")),
      stringKey(
          "peers.host", [](Config & c) -> auto& { return c.peers.host; },
          "Host of every peer when peers are given by count; with peers.rendezvous, this peer's "
          "own address: a numeric IP, or `auto` (this machine's hostname, resolved to its "
          "address)"),
      intKey(
          "peers.base_port", [](Config & c) -> auto& { return c.peers.basePort; }, 1, 65535,
          "Control port of peer 0; peer r listens on base_port + r"),
      customKey(
          "peers.list", ValueType::kPeerList,
          "Explicit peer addresses, rank order; also written as `peers: [{host: h, port: p}, ...]`",
          applyPeerList, showPeerList),
      stringKey(
          "peers.rendezvous", [](Config & c) -> auto& { return c.peers.rendezvous; },
          "Shared folder (one per run) where each peer writes `rank-<r>` with its host:port and "
          "reads its neighbours' (for hosts assigned by a scheduler); empty: off"),
      doubleKey(
          "peers.connect_timeout", [](Config & c) -> auto& { return c.peers.connectTimeout; }, 0.1,
          86400, "Seconds to keep retrying an unreachable neighbour before giving up"),
      doubleKey(
          "peers.heartbeat_interval", [](Config & c) -> auto& { return c.peers.heartbeatInterval; },
          0.01, 60, "Seconds between heartbeats on each control connection"),
      doubleKey(
          "peers.dead_after", [](Config & c) -> auto& { return c.peers.deadAfter; }, 0.05, 3600,
          "Seconds without heartbeats after which a neighbour is declared dead"),
  };
}

// topology
std::vector<KeyDef> topologyKeys() {
  return {
      enumKey(
          "topology.kind", [](Config & c) -> auto& { return c.topology.kind; },
          choicesOf(topology::kindNames(), topology::parseKind), "Graph of the peers"),
      enumKey(
          "topology.weights", [](Config & c) -> auto& { return c.topology.weights; },
          choicesOf(topology::weightsNames(), topology::parseWeights),
          "Mixing weights: Metropolis-Hastings, uniform 1/(d_max+1), per edge, or lazy Metropolis "
          "(I + W)/2, whose eigenvalues are all >= 0"),
      intListKey(
          "topology.dims", [](Config & c) -> auto& { return c.topology.dims; }, 1, kMaxPeers,
          "Torus sizes, 2 or 3 of them, e.g. [4, 4]; product = peers (unset: the squarest a x b)"),
      intKey(
          "topology.degree", [](Config & c) -> auto& { return c.topology.degree; }, 1, kMaxPeers,
          "Degree of the random-regular graph"),
      doubleKey(
          "topology.probability", [](Config & c) -> auto& { return c.topology.probability; }, 0.0,
          1.0, "Edge probability of the Erdos-Renyi graph"),
      withRange(
          customKey("topology.seed", ValueType::kInt, "Seed of random graphs (default: run.seed)",
                    applyTopologySeed, showTopologySeed),
          0, 9.2e18),

      customKey("topology.edges", ValueType::kEdgeList,
                "Edges of kind `edges`: [[a, b], ...] or [[a, b, weight], ...] (weights: explicit)",
                applyTopologyEdges, showTopologyEdges),
      boolKey(
          "topology.directed", [](Config & c) -> auto& { return c.topology.directed; },
          "Kind edges: [a, b] means a sends to b only (a directed graph; algorithm.name push-sum "
          "only, and it must be strongly connected)"),
  };
}

// transport
std::vector<KeyDef> transportKeys() {
  return {
      nameKey(
          "transport.backend", [](Config & c) -> auto& { return c.transport.backend; },
          transport::kBackendNames,
          "How peers exchange data; `grapevine info --transports` lists what works here"),
      boolKey(
          "transport.busy_poll", [](Config & c) -> auto& { return c.transport.busyPoll; },
          "Spin on the transport instead of sleeping on its event descriptor"),
      stringKey(
          "transport.ucx.tls", [](Config & c) -> auto& { return c.transport.ucxTls; },
          "UCX transports (UCX_TLS), e.g. tcp or posix,sysv,cma,self; empty: UCX chooses"),
      intKey(
          "transport.ucx.rndv_thresh",
          [](Config & c) -> auto& { return c.transport.ucxRndvThresh; }, 0, 1ll << 32,
          "Bytes from which UCX uses its rendezvous protocol (UCX_RNDV_THRESH; smaller messages go "
          "eagerly). Rendezvous costs round trips per message, which dominate on links with "
          "latency; 0: UCX's own choice. An UCX_RNDV_THRESH in the environment wins"),
      stringKey(
          "transport.libfabric.provider",
          [](Config & c) -> auto& { return c.transport.libfabricProvider; },
          "libfabric provider, e.g. tcp;ofi_rxm or shm"),
      intKey(
          "transport.max_frame_bytes",
          [](Config & c) -> auto& { return c.transport.maxFrameBytes; }, 4096, (1ll << 32) - 1,
          "Largest frame accepted from a peer; larger ones are refused before allocation"),
      doubleKey(
          "transport.io_timeout", [](Config & c) -> auto& { return c.transport.ioTimeout; }, 0.1,
          3600, "Deadline in seconds of any single network operation"),
  };
}

// algorithm
std::vector<KeyDef> algorithmKeys() {
  return {
      enumKey(
          "algorithm.name", [](Config & c) -> auto& { return c.algorithm.name; },
          choicesOf(algorithms::algorithmKindNames(), algorithms::parseAlgorithmKind),
          "Gossip algorithm: exact D-PSGD, CHOCO-SGD, DeepSqueeze, push-sum, or gt (gradient "
          "tracking: DIGing, or BEER with a compressor); or a baseline without gossip: allreduce "
          "(every round an exact average of the models over a ring all-reduce: with one local "
          "step, data-parallel SGD) or diloco (the same average every algorithm.local_steps "
          "steps, then the outer.* step); docs/algorithms.md"),
      doubleOrAutoKey(
          "algorithm.consensus_step", [](Config & c) -> auto& { return c.algorithm.consensusStep; },
          0.0, 1.0,
          "Consensus step size gamma of CHOCO and DeepSqueeze; auto: CHOCO peers choose it each "
          "round from the measured compressor quality and back off when the public copies lag "
          "(docs/algorithms.md), DeepSqueeze uses 0.2, gt 0.5 uncompressed and 0.4 compressed"),
      boolKey(
          "algorithm.overlap", [](Config & c) -> auto& { return c.algorithm.overlap; },
          "Compute the next gradient while the round's frames are in flight; with push-sum: "
          "overlapped SGP, each share is mixed algorithm.overlap_rounds rounds after it was sent, "
          "and a round waits only for the shares that are due"),
      intKey(
          "algorithm.overlap_rounds", [](Config & c) -> auto& { return c.algorithm.overlapRounds; },
          1, 32,
          "push-sum with algorithm.overlap: tau, the rounds a share stays in flight before it is "
          "mixed (a round waits for the shares sent tau rounds earlier; the last round and "
          "checkpointed ones wait for all). At most 32: a neighbour may run tau + 1 rounds ahead, "
          "and messages more than 64 rounds ahead are dropped (PeerCore::kRoundWindow)"),
      intKey(
          "algorithm.local_steps", [](Config & c) -> auto& { return c.algorithm.localSteps; }, 1,
          1000, "Local optimizer steps per gossip round"),
      intKey(
          "algorithm.check_every", [](Config & c) -> auto& { return c.algorithm.checkEvery; }, 0,
          1e9, "Rounds between replica-hash checks with neighbours (0: never)"),
      enumKey(
          "algorithm.robust", [](Config & c) -> auto& { return c.algorithm.robust; },
          choicesOf(algorithms::robustRuleNames(), algorithms::parseRobustRule),
          "Robust mixing against members that send finite garbage (dsgd, choco; "
          "docs/algorithms.md): clip: each neighbour's difference to the own model clipped to a "
          "radius taken from the round's distances (ClippedGossip); trim: coordinate-wise trimmed "
          "mean (BRIDGE-T); none: plain weighted mixing"),
      intKey(
          "algorithm.robust_byzantine",
          [](Config & c) -> auto& { return c.algorithm.robustByzantine; }, 1, 16,
          "Robust mixing: b, the hostile neighbours one peer's neighbourhood may hold (the "
          "radius is twice the (n - b)-th smallest distance; trim drops b values at each end); "
          "every peer needs more than b neighbours (trim: at least 2b + 1)"),
      doubleKey(
          "algorithm.robust_quarantine",
          [](Config & c) -> auto& { return c.algorithm.robustQuarantine; }, 0.0, 1.0,
          "Robust mixing: the suspicion score (moving average of the fraction of a neighbour's "
          "difference beyond twice the radius) at which it is quarantined, after 32 rounds at the "
          "least; its weight shrinks from half of it on (clip). 0: never"),
      intKey(
          "algorithm.robust_probe", [](Config & c) -> auto& { return c.algorithm.robustProbe; }, 0,
          60000,
          "Robust mixing's loss screening: samples of the own training shard on which each "
          "neighbour's model and the own are evaluated every round; a neighbour's loss beyond "
          "1.5 x the own + 0.05 counts towards its suspicion like a distance beyond the radius "
          "(catches slow drags, e.g. a replayed old model on a ring). Fashion-MNIST workloads. "
          "0: off"),
      doubleKey(
          "algorithm.round_timeout", [](Config & c) -> auto& { return c.algorithm.roundTimeout; },
          0.001, 3600,
          "Seconds to wait for a neighbour's frames before treating it as suspect (a message whose "
          "bytes are still arriving is waited for; tcp)"),
      boolKey(
          "algorithm.adaptive_timeout",
          [](Config & c) -> auto& { return c.algorithm.adaptiveTimeout; },
          "Each neighbour's deadline follows its own arrival times: 2 x the 75th percentile of "
          "its last 32 rounds + 0.25 s, at most round_timeout (after 8 rounds)"),
      intKey(
          "algorithm.staleness", [](Config & c) -> auto& { return c.algorithm.staleness; }, 0, 32,
          "Asynchronous rounds (choco): a round waits for a neighbour only while it is more than "
          "this many rounds behind, mixes the others' replicas as they stand, and takes no local "
          "steps when every neighbour is already ahead. 0: synchronous rounds"),
  };
}

// optimizer
std::vector<KeyDef> optimizerKeys() {
  return {
      enumKey(
          "optimizer.kind", [](Config & c) -> auto& { return c.optimizer.kind; },
          choicesOf(train::optimizerKindNames(), train::parseOptimizerKind),
          "sgd: SGD with (Nesterov) momentum and L2 weight decay; adamw: AdamW, each peer's "
          "moments its own, decoupled weight decay, beta1 = optimizer.momentum"),
      doubleKey(
          "optimizer.lr", [](Config & c) -> auto& { return c.optimizer.lr; }, 0.0, 1e3,
          "Learning rate (peak rate with a schedule)"),
      doubleKey(
          "optimizer.momentum", [](Config & c) -> auto& { return c.optimizer.momentum; }, 0.0,
          0.999999, "Momentum coefficient beta (0: plain SGD; adamw: beta1)"),
      doubleKey(
          "optimizer.beta2", [](Config & c) -> auto& { return c.optimizer.beta2; }, 0.0, 0.999999,
          "adamw: decay of the second-moment estimate"),
      doubleKey(
          "optimizer.eps", [](Config & c) -> auto& { return c.optimizer.eps; }, 1e-30, 1.0,
          "adamw: added to the second moment's square root"),
      boolKey(
          "optimizer.nesterov", [](Config & c) -> auto& { return c.optimizer.nesterov; },
          "Nesterov form of momentum (sgd)"),
      enumKey(
          "optimizer.momentum_kind", [](Config & c) -> auto& { return c.optimizer.momentumKind; },
          choicesOf(train::momentumKindNames(), train::parseMomentumKind),
          "local: momentum of the local gradient; quasi-global: of the model change across mixing"),
      intKey(
          "optimizer.batch_size", [](Config & c) -> auto& { return c.optimizer.batchSize; }, 1,
          65536, "Minibatch size of each local step"),
      enumKey(
          "optimizer.schedule", [](Config & c) -> auto& { return c.optimizer.schedule; },
          choicesOf(train::lrScheduleKindNames(), train::parseLrScheduleKind),
          "Learning-rate schedule over rounds"),
      intKey(
          "optimizer.warmup_rounds", [](Config & c) -> auto& { return c.optimizer.warmupRounds; },
          0, 1e9, "Rounds of linear learning-rate warm-up"),
      doubleKey(
          "optimizer.weight_decay", [](Config & c) -> auto& { return c.optimizer.weightDecay; },
          0.0, 1.0, "L2 weight decay added to the gradient (adamw: decoupled, lr * wd * x)"),
      intListKey(
          "optimizer.step_milestones",
          [](Config & c) -> auto& { return c.optimizer.stepMilestones; }, 1, 1e9,
          "Rounds at which the step schedule multiplies the rate by step_gamma"),
      doubleKey(
          "optimizer.step_gamma", [](Config & c) -> auto& { return c.optimizer.stepGamma; }, 0.0,
          1.0, "Factor of the step schedule"),
      doubleKey(
          "optimizer.min_lr", [](Config & c) -> auto& { return c.optimizer.minLr; }, 0.0, 1e3,
          "Floor of the cosine schedule"),
  };
}

// outer
std::vector<KeyDef> outerKeys() {
  return {
      enumKey(
          "outer.optimizer", [](Config & c) -> auto& { return c.outer.optimizer; },
          choicesOf(train::outerKindNames(), train::parseOuterKind),
          "Outer optimizer over each round's pseudo-gradient (the model the round started from "
          "minus the mixed model), DiLoCo's outer step on a gossip average, each peer's momentum "
          "its own: sgd (heavy ball) or nesterov; none: the mixed model is the next round's "
          "(docs/algorithms.md)"),
      doubleKey(
          "outer.lr", [](Config & c) -> auto& { return c.outer.lr; }, 0.0, 10.0,
          "Outer learning rate eta (1 with momentum 0: no outer step)"),
      doubleKey(
          "outer.momentum", [](Config & c) -> auto& { return c.outer.momentum; }, 0.0, 0.999999,
          "Outer momentum mu"),
  };
}

// compression
std::vector<KeyDef> compressionKeys() {
  return {
      enumKey(
          "compression.method", [](Config & c) -> auto& { return c.compression.method; },
          choicesOf(compress::methodNames()),
          "How each delta is compressed; see docs/compression.md"),
      doubleKey(
          "compression.ratio", [](Config & c) -> auto& { return c.compression.ratio; }, 1e-6, 1.0,
          "Fraction k/n of elements kept by top-k and rand-k"),
      enumKey(
          "compression.selector", [](Config & c) -> auto& { return c.compression.selector; },
          choicesOf(compress::selectorNames()),
          "top-k selection: exact, or approximate (sampled threshold, one pass)"),
      doubleKey(
          "compression.explore", [](Config & c) -> auto& { return c.compression.explore; }, 0.0,
          0.9,
          "top-k: share of the k values sent from positions drawn at random among the rest "
          "(Slim-DP's exploration set; the rest are the largest). 0: plain top-k"),
      boolKey(
          "compression.unbiased", [](Config & c) -> auto& { return c.compression.unbiased; },
          "rand-k: scale kept values by n/k so the estimate is unbiased"),
      intKey(
          "compression.levels", [](Config & c) -> auto& { return c.compression.levels; }, 1, 32767,
          "QSGD quantization levels s"),
      intKey(
          "compression.block_size", [](Config & c) -> auto& { return c.compression.blockSize; }, 64,
          4096, "Elements per scale block of int8, int4 and sign (a multiple of 64)"),
      enumKey(
          "compression.rounding", [](Config & c) -> auto& { return c.compression.rounding; },
          choicesOf(compress::roundingNames()), "Rounding of int8 and int4"),
      intKey(
          "compression.rank", [](Config & c) -> auto& { return c.compression.rank; }, 1, 256,
          "Rank r of low-rank (PowerSGD) approximations"),
      enumKey(
          "compression.fallback", [](Config & c) -> auto& { return c.compression.fallback; },
          choicesOf(compress::methodNames(), compress::isFallbackMethod),
          "low-rank: method for tensors that are not matrices"),
      boolKey(
          "compression.error_feedback",
          [](Config & c) -> auto& { return c.compression.errorFeedback; },
          "Keep the compression residual and add it to the next delta"),
      enumKey(
          "compression.lossless", [](Config & c) -> auto& { return c.compression.lossless; },
          choicesOf(compress::losslessNames()),
          "Lossless stage after the method, used only where it pays for itself"),
      intKey(
          "compression.zstd_level", [](Config & c) -> auto& { return c.compression.zstdLevel; }, 1,
          19, "zstd compression level"),
      intKey(
          "compression.dense_below", [](Config & c) -> auto& { return c.compression.denseBelow; },
          0, 1e12, "Tensors with fewer elements are sent uncompressed (biases)"),
      intKey(
          "compression.chunk_elements",
          [](Config & c) -> auto& { return c.compression.chunkElements; }, 1024, 1ll << 28,
          "Large tensors are cut into frames of at most this many elements"),
  };
}

// workload
std::vector<KeyDef> workloadKeys() {
  return {
      enumKey(
          "workload.name", [](Config & c) -> auto& { return c.workload.name; },
          choicesOf(train::workloadKindNames(), train::parseWorkloadKind), "What each peer trains"),
      intListKey(
          "workload.hidden", [](Config & c) -> auto& { return c.workload.hidden; }, 1, 65536,
          "Hidden layer sizes of the MLP"),
      intListKey(
          "workload.cnn_channels", [](Config & c) -> auto& { return c.workload.cnnChannels; }, 1,
          1024, "Output channels of the CNN's two 5x5 convolutions"),
      intKey(
          "workload.cnn_hidden", [](Config & c) -> auto& { return c.workload.cnnHidden; }, 1, 65536,
          "Width of the CNN's first dense layer"),
      enumKey(
          "workload.partition", [](Config & c) -> auto& { return c.workload.partition; },
          choicesOf(train::partitionKindNames(), train::parsePartitionKind),
          "How the training set is split across peers"),
      doubleKey(
          "workload.alpha", [](Config & c) -> auto& { return c.workload.alpha; }, 1e-4, 1e6,
          "Dirichlet concentration (smaller: more label skew)"),
      stringKey(
          "workload.data_dir", [](Config & c) -> auto& { return c.workload.dataDir; },
          "Fashion-MNIST folder (Debian package dataset-fashion-mnist)"),
      stringKey(
          "workload.data", [](Config & c) -> auto& { return c.workload.data; },
          "quadratic: JSON file {\"a\": [n numbers], \"b\": [n lists of d numbers]}"),
      doubleKey(
          "workload.noise", [](Config & c) -> auto& { return c.workload.noise; }, 0.0, 1e6,
          "quadratic: standard deviation of Gaussian gradient noise"),
      intKey(
          "workload.dim", [](Config & c) -> auto& { return c.workload.dim; }, 1, 1e9,
          "consensus: length of each peer's vector"),
      intKey(
          "workload.eval_every", [](Config & c) -> auto& { return c.workload.evalEvery; }, 0, 1e9,
          "Rounds between test evaluations (0: only at the end)"),
      intKey(
          "workload.eval_samples", [](Config & c) -> auto& { return c.workload.evalSamples; }, 0,
          1e9, "Test examples used by each evaluation (0: the whole test set)"),
  };
}

// output
std::vector<KeyDef> outputKeys() {
  return {
      stringKey(
          "output.dir", [](Config & c) -> auto& { return c.output.dir; },
          "Folder for summary.json and per-peer records"),
      intKey(
          "output.log_every", [](Config & c) -> auto& { return c.output.logEvery; }, 1, 1e9,
          "Rounds between per-peer records"),
  };
}

// monitoring
std::vector<KeyDef> monitoringKeys() {
  return {
      intKey(
          "monitoring.prometheus_port",
          [](Config & c) -> auto& { return c.monitoring.prometheusPort; }, 0, 65535,
          "Prometheus /metrics of peer r on port prometheus_port + r, at "
          "monitoring.prometheus_host (0: off)"),
      stringKey(
          "monitoring.prometheus_host",
          [](Config & c) -> auto& { return c.monitoring.prometheusHost; },
          "Address the /metrics endpoints listen on: 127.0.0.1 (this machine only), peer (the "
          "peer's own control host, where its neighbours reach it) or an IPv4 address (0.0.0.0: "
          "every interface). Outside the key's protection: anyone who reaches it reads the run"),
      boolKey(
          "monitoring.prometheus_build_info",
          [](Config & c) -> auto& { return c.monitoring.prometheusBuildInfo; },
          "grapevine_info carries the version label (the build id a keyed hello keeps from "
          "strangers)"),
  };
}

// checkpoint
std::vector<KeyDef> checkpointKeys() {
  return {
      intKey(
          "checkpoint.every", [](Config & c) -> auto& { return c.checkpoint.every; }, 0, 1e9,
          "Rounds between checkpoints of every peer's state, for --resume (0: off)"),
      stringKey(
          "checkpoint.dir", [](Config & c) -> auto& { return c.checkpoint.dir; },
          "Folder for the checkpoints, one subfolder per rank (empty: <output.dir>/checkpoints)"),
      intKey(
          "checkpoint.keep", [](Config & c) -> auto& { return c.checkpoint.keep; }, 1, 1e6,
          "Newest checkpoints kept per peer (older ones are deleted, except those a restart still "
          "needs: docs/faults.md)"),
      boolKey(
          "checkpoint.background", [](Config & c) -> auto& { return c.checkpoint.background; },
          "Write each checkpoint on a thread of its own while training goes on (false: the round "
          "waits until it is on disk, all of its cost in checkpoint_seconds)"),
  };
}

// network
std::vector<KeyDef> networkKeys() {
  return {
      enumKey(
          "network.emulate", [](Config & c) -> auto& { return c.network.emulate; },
          choicesOf(emulationNames(), parseEmulation),
          "Emulate the links below between local peers (launch)"),
      doubleKey(
          "network.bandwidth_mbit", [](Config & c) -> auto& { return c.network.bandwidthMbit; },
          0.0, 1e6, "Link bandwidth in Mbit/s (0: unlimited)"),
      doubleKey(
          "network.latency_ms", [](Config & c) -> auto& { return c.network.latencyMs; }, 0.0, 1e5,
          "One-way link latency in ms"),
      doubleKey(
          "network.jitter_ms", [](Config & c) -> auto& { return c.network.jitterMs; }, 0.0, 1e5,
          "Extra one-way delay in ms, uniform in [0, jitter_ms], added to latency_ms"),
      doubleKey(
          "network.loss_percent", [](Config & c) -> auto& { return c.network.lossPercent; }, 0.0,
          100.0, "Packet loss in percent"),
      doubleKey(
          "network.node_bandwidth_mbit",
          [](Config & c) -> auto& { return c.network.nodeBandwidthMbit; }, 0.0, 1e6,
          "Each peer's interface in Mbit/s, shared by all of its links, egress and ingress capped "
          "separately (one NIC), on top of each link's bandwidth_mbit (0: no cap)"),
      doubleKey(
          "network.compute_scale", [](Config & c) -> auto& { return c.network.computeScale; }, 1e-3,
          1e3,
          "Multiplier of compute time (heterogeneous peers): grapevine sim scales its clock; a "
          "real peer above 1 sleeps (scale - 1) x the wall time of each of its steps"),
      doubleKey(
          "network.compute_ms", [](Config & c) -> auto& { return c.network.computeMs; }, 0.0, 1e6,
          "Fixed compute time per step in ms for the simulator (0: measured)"),
      customKey("network.peers", ValueType::kNetPeerList,
                "Per-peer overrides: [{rank: R, bandwidth_mbit, latency_ms, jitter_ms, "
                "loss_percent, compute_scale, node_bandwidth_mbit}, ...] (any subset); a link "
                "takes the slower end's values; compute_scale and node_bandwidth_mbit are the "
                "peer's own",
                applyNetworkPeers, showNetworkPeers),
      customKey("network.edges", ValueType::kNetEdgeList,
                "Per-link overrides (both directions; win over network.peers): [{between: [a, b], "
                "bandwidth_mbit, latency_ms, jitter_ms, loss_percent}, ...]",
                applyNetworkEdges, showNetworkEdges),
  };
}

// security (docs/security.md)
std::vector<KeyDef> securityKeys() {
  return {
      stringKey(
          "security.key_file", [](Config & c) -> auto& { return c.security.keyFile; },
          "Pre-shared key (grapevine keygen -o FILE; mode 0600): peers authenticate each other and "
          "every message; relative to the config file. Empty: no authentication"),
      boolKey(
          "security.encrypt", [](Config & c) -> auto& { return c.security.encrypt; },
          "Also encrypt every message (AES-256-GCM where both ends of an edge have AES-NI, else "
          "ChaCha20-Poly1305); needs security.key_file"),
      doubleKey(
          "security.max_delta_ratio", [](Config & c) -> auto& { return c.security.maxDeltaRatio; },
          0, 1e30,
          "Refuse a neighbour's message that changes any value by more than this times max(1, "
          "largest |value| of the model); 0: no bound"),
  };
}

// faults (docs/faults.md). Each section's keys stay together: toYaml writes a section per run.
std::vector<KeyDef> faultsKeys() {
  return {
      customKey("faults.events", ValueType::kFaultList,
                "Fault schedule (also `faults:` as a list; docs/faults.md): [{kind: pause, kill, "
                "restart, link-down or corrupt, or an attack: sign-flip, noise, alie, ipm, "
                "dissensus, bias, replay; peer: R or link: [a, b]; at_round: N (sim) or "
                "at_seconds: S (launch); rounds: N or seconds: S (pause, link-down, corrupt; "
                "restart: time down; an attack: optional, the rest of the run without); scale: "
                "an attack's strength}, ...]",
                applyFaults, showFaults),
  };
}
}  // namespace grapevine::config::rows
