// One source of defaults (issue 37): a library option struct that a config section is copied into
// has the config's defaults as its own, so a unit test that builds `compress::Options{}`,
// `transport::Options{}`, `train::WorkloadOptions{}`, `train::OptimizerOptions{}`,
// `algorithms::AlgorithmOptions{}`, `engine::PeerCoreOptions{}` or `transport::BootstrapOptions{}`
// runs with the values a real run uses. A config of schema defaults goes
// through the real copiers (engine/setup.h, engine/process_options.h), and every field of the
// result is compared with the struct's own `{}` default. The structured bindings name each field in
// declaration order: a field added to one of these structs fails to compile here until it is
// compared too.
#include <catch2/catch.hpp>
#include <sstream>
#include <string>

#include "compress/options.h"
#include "runtime/algorithms/algorithm.h"
#include "runtime/config/loader.h"
#include "runtime/config/schema.h"
#include "runtime/engine/peer_core.h"
#include "runtime/engine/process_options.h"
#include "runtime/engine/setup.h"
#include "runtime/train/optimizer.h"
#include "runtime/train/options.h"
#include "runtime/transport/transport.h"

using namespace grapevine;

namespace {

// Every key at its schema default; peers.count has none (every config sets it).
config::Config defaults() {
  config::LoadOptions o;
  o.useEnvironment = false;
  config::LoadResult r = config::loadString("peers: { count: 2 }\n", "defaults.yaml", o);
  INFO(config::formatDiagnostics(r.diagnostics));
  REQUIRE(r.ok());
  return r.config;
}

}  // namespace

TEST_CASE("compress::Options{} has the compression section's defaults", "[config][defaults]") {
  auto copied = engine::compressOptions(defaults());
  INFO(copied.status().toString());
  REQUIRE(copied.isOk());
  const compress::Options want{};
  const auto& [method, ratio, bits, blockSize, levels, rank, fallback, selector, slack, explore,
               unbiased, rounding, errorFeedback, contractive, lossless, zstdLevel, denseBelow,
               maxFrameBytes, chunkElements] = *copied;
  CHECK(method == want.method);
  CHECK(ratio == want.ratio);
  CHECK(bits == want.bits);
  CHECK(blockSize == want.blockSize);
  CHECK(levels == want.levels);
  CHECK(rank == want.rank);
  CHECK(fallback == want.fallback);
  CHECK(selector == want.selector);
  CHECK(slack == want.slack);
  CHECK(explore == want.explore);
  CHECK(unbiased == want.unbiased);
  CHECK(rounding == want.rounding);
  CHECK(errorFeedback == want.errorFeedback);
  CHECK(contractive == want.contractive);
  CHECK(lossless == want.lossless);
  CHECK(zstdLevel == want.zstdLevel);
  CHECK(denseBelow == want.denseBelow);
  CHECK(maxFrameBytes == want.maxFrameBytes);
  CHECK(chunkElements == want.chunkElements);
}

TEST_CASE("transport::Options{} has the transport section's defaults", "[config][defaults]") {
  // Rank 0, whose host is peers.host; the message limit and the dialer count come from the peer's
  // core, not from the config (process_options.h), and keep their defaults here.
  const transport::Options copied = engine::transportOptions(defaults(), 0);
  const transport::Options want{};
  const auto& [backend, rank, host, dataPort, busyPoll, ucxTls, ucxRndvThresh, libfabricProvider,
               maxMessageBytes, ioTimeoutSeconds, expectedDialers] = copied;
  CHECK(backend == want.backend);
  CHECK(rank == want.rank);
  CHECK(host == want.host);
  CHECK(dataPort == want.dataPort);
  CHECK(busyPoll == want.busyPoll);
  CHECK(ucxTls == want.ucxTls);
  CHECK(ucxRndvThresh == want.ucxRndvThresh);
  CHECK(libfabricProvider == want.libfabricProvider);
  CHECK(maxMessageBytes == want.maxMessageBytes);
  CHECK(ioTimeoutSeconds == want.ioTimeoutSeconds);
  CHECK(expectedDialers == want.expectedDialers);
}

TEST_CASE("train::WorkloadOptions{} has the workload section's defaults", "[config][defaults]") {
  const train::WorkloadOptions copied = engine::workloadOptions(defaults());
  const train::WorkloadOptions want{};
  const auto& [kind, hidden, cnnChannels, cnnHidden, partition, alpha, batchSize, dataDir, data,
               noise, dim, evalTestSamples, evalTrainSamples, threads] = copied;
  CHECK(kind == want.kind);
  CHECK(hidden == want.hidden);
  CHECK(cnnChannels == want.cnnChannels);
  CHECK(cnnHidden == want.cnnHidden);
  CHECK(partition == want.partition);
  CHECK(alpha == want.alpha);
  CHECK(batchSize == want.batchSize);
  CHECK(dataDir == want.dataDir);
  CHECK(data == want.data);
  CHECK(noise == want.noise);
  CHECK(dim == want.dim);
  CHECK(evalTestSamples == want.evalTestSamples);
  CHECK(evalTrainSamples == want.evalTrainSamples);
  CHECK(threads == want.threads);
}

TEST_CASE("train::OptimizerOptions{} has the optimizer section's defaults", "[config][defaults]") {
  // The schedule's length is run.rounds'.
  const train::OptimizerOptions copied = engine::optimizerOptions(defaults());
  const train::OptimizerOptions want{};
  const auto& [kind, schedule, momentum, beta2, eps, nesterov, weightDecay, momentumKind] = copied;
  CHECK(kind == want.kind);
  CHECK(momentum == want.momentum);
  CHECK(beta2 == want.beta2);
  CHECK(eps == want.eps);
  CHECK(nesterov == want.nesterov);
  CHECK(weightDecay == want.weightDecay);
  CHECK(momentumKind == want.momentumKind);
  const auto& [scheduleKind, lr, warmupRounds, totalRounds, minLr, milestones, gamma] = schedule;
  CHECK(scheduleKind == want.schedule.kind);
  CHECK(lr == want.schedule.lr);
  CHECK(warmupRounds == want.schedule.warmupRounds);
  CHECK(totalRounds == want.schedule.totalRounds);
  CHECK(minLr == want.schedule.minLr);
  CHECK(milestones == want.schedule.milestones);
  CHECK(gamma == want.schedule.gamma);
  CHECK(want.validate().isOk());
}

TEST_CASE("algorithms::AlgorithmOptions{} has the algorithm section's defaults",
          "[config][defaults]") {
  const algorithms::AlgorithmOptions copied = engine::algorithmOptions(defaults());
  const algorithms::AlgorithmOptions want{};
  const auto& [kind, consensusStep, autoConsensusStep, initialPublicCopy, compressed, overlapRounds,
               robust] = copied;
  CHECK(kind == want.kind);
  CHECK(autoConsensusStep == want.autoConsensusStep);
  // (The fixed step is only read without `auto`; the config has no number then.)
  if (!want.autoConsensusStep) CHECK(consensusStep == want.consensusStep);
  CHECK(initialPublicCopy == want.initialPublicCopy);
  CHECK(compressed == want.compressed);
  CHECK(overlapRounds == want.overlapRounds);
  const auto& [rule, byzantine, quarantineScore, lossProbe] = robust;
  CHECK(rule == want.robust.rule);
  CHECK(byzantine == want.robust.byzantine);
  CHECK(quarantineScore == want.robust.quarantineScore);
  CHECK_FALSE(lossProbe);
  CHECK_FALSE(want.robust.lossProbe);
}

TEST_CASE("engine::PeerCoreOptions{} has the config's defaults", "[config][defaults]") {
  auto plan = engine::makeRunPlan(defaults());
  INFO(plan.status().toString());
  REQUIRE(plan.isOk());
  const engine::PeerCoreOptions copied = engine::peerCoreOptions(**plan, 0, 0, 1000);
  const engine::PeerCoreOptions want{};
  const auto& [rank, incarnation, localSteps, outer, averageEachRound, roundCollectives, roundTree,
               checkEvery, dynamicMetropolis, lazyMixing, sendToAllNeighbours, lossMayBeUnknown,
               collectives, mixDelay, rounds, syncEvery, maxDeltaRatio, quarantineAfter, catchUpLag,
               staleness] = copied;
  CHECK(rank == want.rank);
  CHECK(incarnation == want.incarnation);
  CHECK(localSteps == want.localSteps);
  CHECK(outer.kind == want.outer.kind);
  CHECK(outer.lr == want.outer.lr);
  CHECK(outer.momentum == want.outer.momentum);
  CHECK(averageEachRound == want.averageEachRound);
  CHECK(roundCollectives == want.roundCollectives);
  CHECK(roundTree.parent == want.roundTree.parent);
  CHECK(roundTree.children == want.roundTree.children);
  CHECK(checkEvery == want.checkEvery);
  CHECK(dynamicMetropolis == want.dynamicMetropolis);
  CHECK(lazyMixing == want.lazyMixing);
  CHECK(sendToAllNeighbours == want.sendToAllNeighbours);
  CHECK(lossMayBeUnknown == want.lossMayBeUnknown);
  CHECK(collectives == want.collectives);
  CHECK(mixDelay == want.mixDelay);
  CHECK(rounds == want.rounds);
  CHECK(syncEvery == want.syncEvery);
  CHECK(maxDeltaRatio == want.maxDeltaRatio);
  CHECK(quarantineAfter == want.quarantineAfter);
  CHECK(catchUpLag == want.catchUpLag);
  CHECK(staleness == want.staleness);
}

TEST_CASE("transport::BootstrapOptions{} has the peers section's defaults", "[config][defaults]") {
  auto plan = engine::makeRunPlan(defaults());
  REQUIRE(plan.isOk());
  auto core = engine::makePeer(**plan, 0, 0);
  INFO(core.status().toString());
  REQUIRE(core.isOk());
  const transport::BootstrapOptions copied = engine::bootstrapOptions(**plan, 0, 0, **core);
  const transport::BootstrapOptions want{};
  // The run's own parts (addresses, neighbours, config hashes, callbacks) have no default to keep.
  const auto& [rank, peers, neighbours, incarnation, configParts, connectTimeoutSeconds,
               heartbeatIntervalSeconds, missedHeartbeats, maxControlFrameBytes, psk, onEvent,
               onMessage, onRejoin, completeAlone, runningRound] = copied;
  CHECK(rank == want.rank);
  CHECK(incarnation == want.incarnation);
  CHECK(connectTimeoutSeconds == want.connectTimeoutSeconds);
  CHECK(heartbeatIntervalSeconds == want.heartbeatIntervalSeconds);
  CHECK(missedHeartbeats == want.missedHeartbeats);
  CHECK(maxControlFrameBytes == want.maxControlFrameBytes);
  CHECK(psk == want.psk);
  CHECK(completeAlone == want.completeAlone);
}

// Every config the schema accepts either works or is refused by `validate`: a compression value
// inside the schema's range must also pass the library's own check (compress::validate, run by
// engine::compressOptions when a peer starts). Each numeric key of the compression section, and
// transport.max_frame_bytes (copied into the same options), at its schema minimum and maximum:
// either the loader refuses it (naming the key) or the copier accepts it. The schema allowed
// levels up to 65535 and rank up to 1024 where the library stops at 32767 and 256, so `validate`
// said ok to configs whose peers then failed at start.
TEST_CASE("the compression keys' schema ranges are the library's", "[config][defaults]") {
  int checked = 0;
  for (const config::KeyDef& k : config::schema()) {
    const bool numeric = k.type == config::ValueType::kInt || k.type == config::ValueType::kDouble;
    if (!numeric || (k.path.rfind("compression.", 0) != 0 && k.path != "transport.max_frame_bytes"))
      continue;
    for (double v : {k.min, k.max}) {
      std::ostringstream value;
      value.precision(17);
      value << v;
      const std::string section = k.path.substr(0, k.path.find('.'));
      const std::string key = k.path.substr(k.path.find('.') + 1);
      const std::string yaml =
          "peers: { count: 2 }\n" + section + ": { " + key + ": " + value.str() + " }\n";
      config::LoadOptions o;
      o.useEnvironment = false;
      config::LoadResult r = config::loadString(yaml, "range.yaml", o);
      INFO(yaml << config::formatDiagnostics(r.diagnostics));
      if (!r.ok()) {
        CHECK(config::formatDiagnostics(r.diagnostics).find(k.path) != std::string::npos);
        continue;
      }
      auto copied = engine::compressOptions(r.config);
      INFO(copied.status().toString());
      CHECK(copied.isOk());
      ++checked;
    }
  }
  CHECK(checked >= 16);  // ratio, levels, block_size, rank, zstd_level, dense_below, ...
}

TEST_CASE("compression.block_size: a multiple of 64, refused by validate otherwise",
          "[config][defaults]") {
  config::LoadOptions o;
  o.useEnvironment = false;
  const auto bad = config::loadString(
      "peers: { count: 2 }\ncompression: { method: int8, block_size: 100 }\n", "b.yaml", o);
  CHECK_FALSE(bad.ok());
  const std::string text = config::formatDiagnostics(bad.diagnostics);
  INFO(text);
  CHECK(text.find("compression.block_size") != std::string::npos);
  CHECK(text.find("multiple of 64") != std::string::npos);
  CHECK(config::loadString("peers: { count: 2 }\ncompression: { method: int8, block_size: 128 }\n",
                           "b.yaml", o)
            .ok());
}
