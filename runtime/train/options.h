// What a config's `workload:` section asks for, as plain typed data. Each field names the config
// key it mirrors (docs/workloads.md lists them with defaults). validate() returns kInvalidArgument
// with a message that names the key ("workload.batch_size must be >= 1, got 0").
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/common/status.h"

namespace grapevine::train {

enum class WorkloadKind {
  kFashionMnistSoftmax,  // "fashion-mnist-softmax": multinomial logistic regression
  kFashionMnistMlp,      // "fashion-mnist-mlp": dense + ReLU layers of `hidden` sizes
  kFashionMnistCnn,      // "fashion-mnist-cnn": 2 x (conv 5x5 + ReLU + max-pool 2) + 2 dense
  kQuadratic,            // "quadratic": f_i(x) = 1/2 |a_i x - b_i|^2 from a JSON file
  kConsensus,            // "consensus": zero gradient, peers start from different random vectors
  kExternal,  // "external": the caller's own model, driven through the API (include/grapevine/)
};

enum class PartitionKind {
  kIid,        // "iid": seeded shuffle, equal split
  kDirichlet,  // "dirichlet": per-class proportions ~ Dir(alpha) over peers (label skew)
};

std::string_view workloadKindName(WorkloadKind kind);
std::optional<WorkloadKind> parseWorkloadKind(std::string_view name);
const std::vector<std::string_view>& workloadKindNames();
std::string_view partitionKindName(PartitionKind kind);
std::optional<PartitionKind> parsePartitionKind(std::string_view name);
const std::vector<std::string_view>& partitionKindNames();

inline constexpr const char* kDefaultFashionMnistDir = "/usr/share/datasets/fashion-mnist";

// The Fashion-MNIST classifiers (softmax, MLP, CNN): the workloads with a data shard per peer.
bool isFashionMnist(WorkloadKind kind);

struct WorkloadOptions {
  WorkloadKind kind = WorkloadKind::kFashionMnistMlp;  // workload.name
  std::vector<int> hidden = {128};         // workload.hidden: MLP hidden layer sizes (>= 0 layers)
  std::vector<int> cnnChannels = {8, 16};  // workload.cnn_channels: the two conv layers' outputs
  int cnnHidden = 64;                      // workload.cnn_hidden: the CNN's first dense layer
  PartitionKind partition = PartitionKind::kIid;  // workload.partition
  double alpha = 0.5;                             // workload.alpha (dirichlet concentration, > 0)
  int batchSize = 64;                             // workload.batch_size
  std::string dataDir = kDefaultFashionMnistDir;  // workload.data_dir
  std::string data;                               // workload.data: quadratic JSON path
  double noise = 0.0;                             // workload.noise: quadratic gradient noise stddev
  std::int64_t dim = 1000;                        // workload.dim: consensus vector length
  std::int64_t evalTestSamples = 0;               // workload.eval_test_samples (0 = whole test set)
  std::int64_t evalTrainSamples = 0;              // workload.eval_train_samples (0 = whole shard)
  int threads = 1;                                // workload.threads: BLAS threads (process-wide)

  bool isFashionMnist() const { return train::isFashionMnist(kind); }
  Status validate() const;
};

}  // namespace grapevine::train
