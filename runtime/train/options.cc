#include "runtime/train/options.h"

#include <cmath>
#include <sstream>

namespace grapevine::train {
namespace {

struct KindRow {
  WorkloadKind kind;
  std::string_view name;
};
constexpr KindRow kWorkloadKinds[] = {
    {WorkloadKind::kFashionMnistSoftmax, "fashion-mnist-softmax"},
    {WorkloadKind::kFashionMnistMlp, "fashion-mnist-mlp"},
    {WorkloadKind::kFashionMnistCnn, "fashion-mnist-cnn"},
    {WorkloadKind::kQuadratic, "quadratic"},
    {WorkloadKind::kConsensus, "consensus"},
    {WorkloadKind::kExternal, "external"},
};

struct PartitionRow {
  PartitionKind kind;
  std::string_view name;
};
constexpr PartitionRow kPartitionKinds[] = {
    {PartitionKind::kIid, "iid"},
    {PartitionKind::kDirichlet, "dirichlet"},
};

std::string joined(const std::vector<std::string_view>& names) {
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) {
    if (i) out += ", ";
    out += names[i];
  }
  return out;
}

}  // namespace

std::string_view workloadKindName(WorkloadKind kind) {
  for (const auto& row : kWorkloadKinds) {
    if (row.kind == kind) return row.name;
  }
  return "unknown";
}

std::optional<WorkloadKind> parseWorkloadKind(std::string_view name) {
  for (const auto& row : kWorkloadKinds) {
    if (row.name == name) return row.kind;
  }
  return std::nullopt;
}

const std::vector<std::string_view>& workloadKindNames() {
  static const std::vector<std::string_view> names = [] {
    std::vector<std::string_view> v;
    for (const auto& row : kWorkloadKinds) v.push_back(row.name);
    return v;
  }();
  return names;
}

std::string_view partitionKindName(PartitionKind kind) {
  for (const auto& row : kPartitionKinds) {
    if (row.kind == kind) return row.name;
  }
  return "unknown";
}

std::optional<PartitionKind> parsePartitionKind(std::string_view name) {
  for (const auto& row : kPartitionKinds) {
    if (row.name == name) return row.kind;
  }
  return std::nullopt;
}

const std::vector<std::string_view>& partitionKindNames() {
  static const std::vector<std::string_view> names = [] {
    std::vector<std::string_view> v;
    for (const auto& row : kPartitionKinds) v.push_back(row.name);
    return v;
  }();
  return names;
}

bool isFashionMnist(WorkloadKind kind) {
  return kind == WorkloadKind::kFashionMnistSoftmax || kind == WorkloadKind::kFashionMnistMlp ||
         kind == WorkloadKind::kFashionMnistCnn;
}

Status WorkloadOptions::validate() const {
  auto bad = [](auto&&... parts) {
    std::ostringstream os;
    (os << ... << parts);
    return invalidArgument(os.str());
  };
  if (workloadKindName(kind) == "unknown") {
    return bad("workload.name must be one of ", joined(workloadKindNames()));
  }
  if (batchSize < 1 || batchSize > 65536) {
    return bad("workload.batch_size must be in [1, 65536], got ", batchSize);
  }
  if (threads < 1 || threads > 256) {
    return bad("workload.threads must be in [1, 256], got ", threads);
  }
  if (evalTestSamples < 0) {
    return bad("workload.eval_test_samples must be >= 0 (0 = all), got ", evalTestSamples);
  }
  if (evalTrainSamples < 0) {
    return bad("workload.eval_train_samples must be >= 0 (0 = all), got ", evalTrainSamples);
  }
  if (kind == WorkloadKind::kFashionMnistMlp) {
    if (hidden.size() > 8) {
      return bad("workload.hidden has ", hidden.size(), " layers; at most 8 are supported");
    }
    for (size_t i = 0; i < hidden.size(); ++i) {
      if (hidden[i] < 1 || hidden[i] > 65536) {
        return bad("workload.hidden[", i, "] must be in [1, 65536], got ", hidden[i]);
      }
    }
  }
  if (kind == WorkloadKind::kFashionMnistCnn) {
    if (cnnChannels.size() != 2) {
      return bad("workload.cnn_channels must list 2 sizes (one per conv layer), got ",
                 cnnChannels.size());
    }
    for (size_t i = 0; i < 2; ++i) {
      if (cnnChannels[i] < 1 || cnnChannels[i] > 1024) {
        return bad("workload.cnn_channels[", i, "] must be in [1, 1024], got ", cnnChannels[i]);
      }
    }
    if (cnnHidden < 1 || cnnHidden > 65536) {
      return bad("workload.cnn_hidden must be in [1, 65536], got ", cnnHidden);
    }
  }
  if (isFashionMnist()) {
    if (partitionKindName(partition) == "unknown") {
      return bad("workload.partition must be one of ", joined(partitionKindNames()));
    }
    if (partition == PartitionKind::kDirichlet && !(alpha > 0.0 && std::isfinite(alpha))) {
      return bad("workload.alpha must be a finite number > 0 for the dirichlet partition, got ",
                 alpha);
    }
    if (dataDir.empty()) return bad("workload.data_dir must not be empty");
  }
  if (kind == WorkloadKind::kQuadratic) {
    if (data.empty()) {
      return bad(
          "workload.data must name the quadratic JSON file "
          "({\"a\": [n numbers], \"b\": [n lists of d numbers]})");
    }
  }
  if (!(noise >= 0.0 && std::isfinite(noise))) {
    return bad("workload.noise must be a finite number >= 0, got ", noise);
  }
  if (kind == WorkloadKind::kConsensus && (dim < 1 || dim > (std::int64_t{1} << 31))) {
    return bad("workload.dim must be in [1, 2^31], got ", dim);
  }
  return Status::ok();
}

}  // namespace grapevine::train
