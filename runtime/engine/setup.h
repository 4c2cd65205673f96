// From a Config to running peers: the schedule, the shared data, and one PeerCore per rank with its
// workload, optimizer, compressor and algorithm. Shared by `grapevine peer`, `launch` and `sim`.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "compress/options.h"
#include "runtime/algorithms/algorithm.h"
#include "runtime/config/config.h"
#include "runtime/engine/peer_core.h"
#include "runtime/train/tensor_info.h"
#include "runtime/train/workload.h"
#include "topology/topology.h"

namespace grapevine::engine {

// What every peer of a run shares (read-only after construction).
struct RunPlan {
  config::Config config;
  topology::Spec spec;
  std::unique_ptr<topology::Schedule> schedule;
  std::shared_ptr<const train::SharedData> data;
};

Result<std::shared_ptr<RunPlan>> makeRunPlan(const config::Config& config);

train::WorkloadOptions workloadOptions(const config::Config& config);
train::OptimizerOptions optimizerOptions(const config::Config& config);
// The algorithm section's part of algorithms::AlgorithmOptions (not the runtime parts: the initial
// public copy and robust mixing's loss probe, which makePeerAlgorithm adds).
algorithms::AlgorithmOptions algorithmOptions(const config::Config& config);
// PeerCore's options for peer `rank` of a model of `dim` values.
PeerCoreOptions peerCoreOptions(const RunPlan& plan, int rank, std::uint32_t incarnation,
                                std::size_t dim);

// The compression options a config asks for (validated by the compression library).
Result<compress::Options> compressOptions(const config::Config& config);

// The compressor + wire codec of one peer, behind the algorithm's MessageCodec interface. Its
// decode refuses a message with two frames for the same (or overlapping) elements, and one that
// changes any value of its buffer by more than the bound its caller passes (maxDelta above 0).
Result<std::unique_ptr<algorithms::MessageCodec>> makeMessageCodec(
    const config::Config& config, const std::vector<train::TensorInfo>& layout, int rank);

// Peer `rank` of a built-in workload (workload.name, initial model from run.seed).
Result<std::unique_ptr<PeerCore>> makePeer(const RunPlan& plan, int rank,
                                           std::uint32_t incarnation);
// Peer `rank` with the given workload and initial model x (the API's external workload).
Result<std::unique_ptr<PeerCore>> makePeerWith(const RunPlan& plan, int rank,
                                               std::uint32_t incarnation,
                                               std::unique_ptr<train::Workload> workload,
                                               std::vector<float> x);
// The algorithm of peer `rank` for a model laid out as `layout` starting at x0 (its public copies
// start there); lossProbe: the workload's, for robust mixing's loss screening (empty: none).
Result<std::unique_ptr<algorithms::Algorithm>> makePeerAlgorithm(
    const RunPlan& plan, int rank, const std::vector<train::TensorInfo>& layout,
    std::span<const float> x0, train::Workload::LossProbe lossProbe = {});

// algorithm.name push-sum with algorithm.overlap: overlapped SGP (shares mixed
// algorithm.overlap_rounds rounds late, PeerCoreOptions::mixDelay); the next gradient is not
// precomputed then, there is no wait to hide it behind.
bool overlappedPushSum(const config::Config& config);

// Whether the config key at `path` is one both ends of an edge must agree on (the graph,
// algorithm, compression, model shape, transport.max_frame_bytes, security.encrypt, run.seed).
bool mustAgreeKey(std::string_view path);

// One (key path, hash of its value) per config key both ends of an edge must agree on (the graph,
// algorithm, compression, model shape, transport.max_frame_bytes, security.encrypt, run.seed):
// peers compare them in the handshake and name the key that differs.
std::vector<std::pair<std::string, std::uint64_t>> configParts(const RunPlan& plan);

}  // namespace grapevine::engine
