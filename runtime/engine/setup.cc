#include "runtime/engine/setup.h"

#include <filesystem>

#include "runtime/common/hash.h"
#include "runtime/config/loader.h"
#include "runtime/config/schema.h"

namespace grapevine::engine {

train::WorkloadOptions workloadOptions(const config::Config& c) {
  train::WorkloadOptions o;
  o.kind = c.workload.name;
  o.hidden = c.workload.hidden;
  o.cnnChannels = c.workload.cnnChannels;
  o.cnnHidden = c.workload.cnnHidden;
  o.partition = c.workload.partition;
  o.alpha = c.workload.alpha;
  o.batchSize = c.optimizer.batchSize;
  o.dataDir = c.workload.dataDir;
  o.data = c.workload.data;
  if (!o.data.empty() && o.data[0] != '/' && !c.sourcePath.empty()) {
    // Paths in a config are relative to the config file's folder.
    o.data = (std::filesystem::path(c.sourcePath).parent_path() / o.data).string();
  }
  o.noise = c.workload.noise;
  o.dim = c.workload.dim;
  o.evalTestSamples = c.workload.evalSamples;
  o.threads = 1;
  return o;
}

train::OptimizerOptions optimizerOptions(const config::Config& c) {
  train::OptimizerOptions o;
  o.kind = c.optimizer.kind;
  o.beta2 = c.optimizer.beta2;
  o.eps = c.optimizer.eps;
  o.schedule.kind = c.optimizer.schedule;
  o.schedule.lr = c.optimizer.lr;
  o.schedule.warmupRounds = c.optimizer.warmupRounds;
  o.schedule.totalRounds = c.run.rounds;
  o.schedule.milestones.assign(c.optimizer.stepMilestones.begin(),
                               c.optimizer.stepMilestones.end());
  o.schedule.gamma = c.optimizer.stepGamma;
  o.schedule.minLr = c.optimizer.minLr;
  o.momentum = c.optimizer.momentum;
  // nesterov is on by default; with momentum 0 it has no effect (validate warns), it is not an
  // error.
  // adamw has no Nesterov form: the default (true) does not apply to it; set explicitly, validate
  // refuses it.
  o.nesterov = c.optimizer.nesterov && c.optimizer.momentum > 0.0 &&
               c.optimizer.kind == train::OptimizerKind::kSgd;
  o.weightDecay = c.optimizer.weightDecay;
  o.momentumKind = c.optimizer.momentumKind;
  return o;
}

Result<std::shared_ptr<RunPlan>> makeRunPlan(const config::Config& config) {
  auto plan = std::make_shared<RunPlan>();
  plan->config = config;
  plan->spec = config.topologySpec();
  GV_ASSIGN_OR_RETURN(plan->schedule, topology::makeSchedule(plan->spec));
  const auto wo = workloadOptions(config);
  GV_RETURN_IF_ERROR(wo.validate());
  GV_ASSIGN_OR_RETURN(plan->data, train::loadSharedData(wo));
  return plan;
}

Result<std::unique_ptr<PeerCore>> makePeer(const RunPlan& plan, int rank,
                                           std::uint32_t incarnation) {
  const config::Config& c = plan.config;
  GV_ASSIGN_OR_RETURN(auto workload, train::makeWorkload(workloadOptions(c), rank, c.peers.count,
                                                         c.run.seed, plan.data));
  std::vector<float> x(workload->parameterCount());
  workload->initParameters(x, c.run.seed);
  return makePeerWith(plan, rank, incarnation, std::move(workload), std::move(x));
}

bool overlappedPushSum(const config::Config& c) {
  return c.algorithm.overlap && c.algorithm.name == algorithms::AlgorithmKind::kPushSum;
}

algorithms::AlgorithmOptions algorithmOptions(const config::Config& c) {
  algorithms::AlgorithmOptions ao;
  ao.kind = c.algorithm.name;
  ao.autoConsensusStep = !c.algorithm.consensusStep.has_value();
  if (c.algorithm.consensusStep) ao.consensusStep = *c.algorithm.consensusStep;
  ao.compressed = c.compression.method != compress::Method::kNone;
  ao.overlapRounds = overlappedPushSum(c) ? c.algorithm.overlapRounds : 0;
  ao.robust = {c.algorithm.robust, c.algorithm.robustByzantine, c.algorithm.robustQuarantine, {}};
  return ao;
}

Result<std::unique_ptr<algorithms::Algorithm>> makePeerAlgorithm(
    const RunPlan& plan, int rank, const std::vector<train::TensorInfo>& layout,
    std::span<const float> x0, train::Workload::LossProbe lossProbe) {
  const config::Config& c = plan.config;
  GV_ASSIGN_OR_RETURN(auto codec, makeMessageCodec(c, layout, rank));
  algorithms::AlgorithmOptions ao = algorithmOptions(c);
  ao.robust.lossProbe = std::move(lossProbe);
  // Public copies start at the common initial model (the consensus workload starts peers apart, so
  // there they start at 0).
  if (c.workload.name != train::WorkloadKind::kConsensus)
    ao.initialPublicCopy.assign(x0.begin(), x0.end());
  return algorithms::makeAlgorithm(ao, x0.size(), plan.schedule->allNeighbours(rank),
                                   std::move(codec));
}

PeerCoreOptions peerCoreOptions(const RunPlan& plan, int rank, std::uint32_t incarnation,
                                std::size_t dim) {
  const config::Config& c = plan.config;
  PeerCoreOptions po;
  po.maxDeltaRatio = c.security.maxDeltaRatio;
  po.rank = rank;
  po.incarnation = incarnation;
  po.localSteps = c.algorithm.localSteps;
  po.outer = {c.outer.optimizer, c.outer.lr, c.outer.momentum};
  po.averageEachRound = algorithms::averagesEachRound(c.algorithm.name);
  if (po.averageEachRound) {
    po.roundCollectives = roundAveragingCollectives(plan, dim);
    po.roundTree = collectiveTree(plan, rank, dim, /*roundRing=*/true);
  }
  po.checkEvery = c.algorithm.checkEvery;
  po.staleness = c.algorithm.staleness;
  po.dynamicMetropolis = plan.schedule->period() == 1 &&
                         (c.topology.weights == topology::WeightsKind::kMetropolis ||
                          c.topology.weights == topology::WeightsKind::kLazyMetropolis);
  po.lazyMixing = c.topology.weights == topology::WeightsKind::kLazyMetropolis;
  po.sendToAllNeighbours = c.algorithm.name == algorithms::AlgorithmKind::kChoco ||
                           c.algorithm.name == algorithms::AlgorithmKind::kGt;
  po.mixDelay = overlappedPushSum(c) ? c.algorithm.overlapRounds : 0;
  po.rounds = c.run.rounds;
  po.syncEvery = c.checkpoint.every;
  // The API's caller may not report its loss, and its finalize() averages over collectives.
  po.lossMayBeUnknown = c.workload.name == train::WorkloadKind::kExternal;
  // run.final_average: the collectives carry the model in double.
  po.collectives = po.lossMayBeUnknown || c.run.finalAverage || po.averageEachRound;
  // How far a neighbour may be ahead in a run where nobody was away: on an undirected graph a round
  // or two; on a directed one up to the directed distance back to this peer (< peers), per round of
  // a time-varying schedule's period. A peer further behind was away (a pause, a partition).
  po.catchUpLag = std::max<std::int64_t>(
      po.catchUpLag, static_cast<std::int64_t>(c.peers.count) * plan.schedule->period());
  return po;
}

Result<std::unique_ptr<PeerCore>> makePeerWith(const RunPlan& plan, int rank,
                                               std::uint32_t incarnation,
                                               std::unique_ptr<train::Workload> workload,
                                               std::vector<float> x) {
  const config::Config& c = plan.config;
  const auto oo = optimizerOptions(c);
  GV_RETURN_IF_ERROR(oo.validate());
  auto optimizer = std::make_unique<train::Optimizer>(oo, workload->parameterCount());
  auto lossProbe =
      c.algorithm.robust != algorithms::RobustRule::kNone && c.algorithm.robustProbe > 0
          ? workload->makeLossProbe(c.algorithm.robustProbe)
          : train::Workload::LossProbe{};
  GV_ASSIGN_OR_RETURN(auto algorithm,
                      makePeerAlgorithm(plan, rank, workload->layout(), x, std::move(lossProbe)));
  const PeerCoreOptions po = peerCoreOptions(plan, rank, incarnation, x.size());
  return std::make_unique<PeerCore>(po, *plan.schedule, std::move(workload), std::move(optimizer),
                                    std::move(algorithm), std::move(x));
}

bool mustAgreeKey(std::string_view path) {
  // Deployment details (addresses, ports, timeouts, data folders, evaluation cadence, output) may
  // differ between peers; these may not: the graph, the algorithm and its step, when shares are
  // mixed (overlapped push-sum mixes them overlap_rounds late), the compressor and its shared
  // seed, the model's shape, the frame size limit and the message seal.
  static const std::vector<std::string_view> kMustAgree = {
      "peers.count",
      "topology.",
      "algorithm.name",
      "algorithm.consensus_step",
      "algorithm.local_steps",
      "algorithm.overlap",
      "algorithm.overlap_rounds",
      "compression.",
      "workload.name",
      "workload.hidden",
      "workload.dim",
      "workload.cnn_channels",
      "workload.cnn_hidden",
      "transport.max_frame_bytes",
      "security.encrypt",
      "run.seed",
      "run.final_average",
  };
  for (const auto& p : kMustAgree) {
    if (path == p || (p.back() == '.' && path.starts_with(p))) return true;
  }
  return false;
}

std::vector<std::pair<std::string, std::uint64_t>> configParts(const RunPlan& plan) {
  // One part per key both ends of an edge must agree on (mustAgreeKey), named by its path so that a
  // mismatch names the key; hashed over its effective value (through the schema table, so every
  // such key added later under the prefixes is covered).
  std::vector<std::pair<std::string, std::uint64_t>> parts;
  for (const auto& k : config::schema()) {
    if (mustAgreeKey(k.path)) parts.emplace_back(k.path, fnv1a64(k.show(plan.config)));
  }
  return parts;
}

}  // namespace grapevine::engine
