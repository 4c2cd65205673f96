#include "runtime/train/workload.h"

#include <cblas.h>

#include <algorithm>
#include <mutex>
#include <numeric>
#include <string>

#include "runtime/train/network.h"
#include "runtime/train/partition.h"
#include "runtime/train/rng.h"

namespace grapevine::train {
namespace {

// Purpose tags for deriveSeed (see rng.h): one independent stream per use of the seed.
constexpr std::uint64_t kBatchStream = 0xba7c;
constexpr std::uint64_t kEvalTestStream = 0xe7e5;
constexpr std::uint64_t kEvalTrainStream = 0xe7a1;
constexpr std::uint64_t kNoiseStream = 0x9015;
constexpr std::uint64_t kConsensusStream = 0xc095;
constexpr std::uint64_t kProbeStream = 0x960b;

// The first k of a seeded permutation of `items`, sorted (k == 0 or k >= size: all of them).
std::vector<std::uint32_t> subsample(std::vector<std::uint32_t> items, std::int64_t k,
                                     std::uint64_t seed) {
  if (k > 0 && static_cast<std::size_t>(k) < items.size()) {
    Rng rng(seed);
    rng.shuffle(std::span<std::uint32_t>(items));
    items.resize(static_cast<std::size_t>(k));
    std::sort(items.begin(), items.end());
  }
  return items;
}

std::vector<TensorInfo> vectorLayout(std::int64_t dim) {
  return {TensorInfo{"x", {dim}, 0, static_cast<std::size_t>(dim)}};
}

// ---- Fashion-MNIST classifiers --------------------------------------------------------------

class ClassifierWorkload final : public Workload {
 public:
  ClassifierWorkload(const WorkloadOptions& options, int rank, std::uint64_t seed,
                     std::shared_ptr<const SharedData> shared, std::function<Network()> makeNetwork,
                     std::vector<std::uint32_t> shard)
      : kind_(options.kind),
        rank_(rank),
        seed_(seed),
        batch_(options.batchSize),
        shared_(std::move(shared)),
        makeNetwork_(std::move(makeNetwork)),
        network_(makeNetwork_()),
        shard_(std::move(shard)) {
    network_.reserve(batch_);
    labels_.assign(batch_, 0);
    order_.resize(shard_.size());
    std::vector<std::uint32_t> all(shared_->fashion.test.count);
    std::iota(all.begin(), all.end(), 0u);
    testEval_ =
        subsample(std::move(all), options.evalTestSamples, deriveSeed(seed, kEvalTestStream));
    trainEval_ =
        subsample(shard_, options.evalTrainSamples, deriveSeed(seed, kEvalTrainStream, rank));
  }

  std::string_view name() const override { return workloadKindName(kind_); }
  const std::vector<TensorInfo>& layout() const override { return network_.layout(); }
  std::size_t parameterCount() const override { return network_.parameterCount(); }

  void initParameters(std::span<float> x, std::uint64_t seed) const override {
    network_.initParameters(x, seed);
  }

  float gradient(std::span<const float> x, std::span<float> g) override {
    const ImageSet& train = shared_->fashion.train;
    const std::uint64_t first = step_ * static_cast<std::uint64_t>(batch_);
    for (int j = 0; j < batch_; ++j) {
      const std::uint32_t index = shard_[shardPosition(first + j)];
      load(train, index, j);
    }
    const double loss = network_.forward(x, labels_.data(), batch_, nullptr);
    network_.backward(x, g, batch_);
    ++step_;
    return static_cast<float>(loss);
  }

  Eval evaluateTest(std::span<const float> x) const override {
    return evaluate(shared_->fashion.test, testEval_, x);
  }
  Eval evaluateTrain(std::span<const float> x) const override {
    return evaluate(shared_->fashion.train, trainEval_, x);
  }

  // Its own network, with the sample's inputs written once: each call is one forward pass.
  LossProbe makeLossProbe(int samples) const override {
    const auto sample = subsample(shard_, samples, deriveSeed(seed_, kProbeStream, rank_));
    if (sample.empty()) return {};
    auto network = std::make_shared<Network>(makeNetwork_());
    const int n = static_cast<int>(sample.size());
    network->reserve(n);
    auto labels = std::make_shared<std::vector<std::uint8_t>>(sample.size());
    for (int j = 0; j < n; ++j) loadInto(shared_->fashion.train, sample[j], j, *network, *labels);
    return [network, labels, n](std::span<const float> x) {
      return network->forward(x, labels->data(), n, nullptr);
    };
  }

 private:
  // Sample `position` of this peer's endless stream: epoch e = position / n visits the shard in the
  // order of a permutation seeded by (seed, rank, e), so each epoch sees every sample once.
  std::size_t shardPosition(std::uint64_t position) {
    const std::uint64_t n = shard_.size();
    const std::uint64_t epoch = position / n;
    if (!orderValid_ || epoch != orderEpoch_) {
      std::iota(order_.begin(), order_.end(), 0u);
      Rng rng(deriveSeed(seed_, kBatchStream, static_cast<std::uint64_t>(rank_), epoch));
      rng.shuffle(std::span<std::uint32_t>(order_));
      orderEpoch_ = epoch;
      orderValid_ = true;
    }
    return order_[position % n];
  }

  // Standardised pixels of set[index] into network input row `row`, label into labels_[row].
  void load(const ImageSet& set, std::uint32_t index, int row) const {
    loadInto(set, index, row, network_, labels_);
  }
  // The same into another network's input row and label vector (a loss probe's).
  void loadInto(const ImageSet& set, std::uint32_t index, int row, Network& network,
                std::vector<std::uint8_t>& labels) const {
    const std::int64_t f = set.features();
    const std::uint8_t* src = set.image(index);
    float* dst = network.input() + static_cast<std::size_t>(row) * f;
    const auto& table = shared_->pixelTable;
    for (std::int64_t i = 0; i < f; ++i) dst[i] = table[src[i]];
    labels[row] = set.labels[index];
  }

  Eval evaluate(const ImageSet& set, const std::vector<std::uint32_t>& indices,
                std::span<const float> x) const {
    double lossSum = 0.0;
    int correct = 0;
    for (std::size_t start = 0; start < indices.size(); start += batch_) {
      const int n = static_cast<int>(std::min<std::size_t>(batch_, indices.size() - start));
      for (int j = 0; j < n; ++j) load(set, indices[start + j], j);
      lossSum += network_.forward(x, labels_.data(), n, &correct) * n;
    }
    const double count = static_cast<double>(indices.size());
    return Eval{lossSum / count, correct / count};
  }

  WorkloadKind kind_;
  int rank_;
  std::uint64_t seed_;
  int batch_;
  std::shared_ptr<const SharedData> shared_;
  std::function<Network()> makeNetwork_;  // the model's architecture (probes build their own)
  mutable Network network_;  // activations are scratch shared by gradient() and the evaluations
  mutable std::vector<std::uint8_t> labels_;
  std::vector<std::uint32_t> shard_;
  std::vector<std::uint32_t> order_;
  std::uint64_t orderEpoch_ = 0;
  bool orderValid_ = false;
  std::vector<std::uint32_t> testEval_;
  std::vector<std::uint32_t> trainEval_;
};

// ---- quadratic ------------------------------------------------------------------------------

class QuadraticWorkload final : public Workload {
 public:
  QuadraticWorkload(const WorkloadOptions& options, int rank, std::uint64_t seed,
                    std::shared_ptr<const SharedData> shared)
      : rank_(rank),
        seed_(seed),
        noise_(options.noise),
        shared_(std::move(shared)),
        layout_(vectorLayout(shared_->quadratic.dim)) {
    const QuadraticData& q = shared_->quadratic;
    // x* = sum_i a_i b_i / sum_i a_i^2, accumulated in double.
    std::vector<double> num(q.dim, 0.0);
    double den = 0.0;
    for (std::size_t i = 0; i < q.a.size(); ++i) {
      den += q.a[i] * q.a[i];
      for (std::int64_t k = 0; k < q.dim; ++k) num[k] += q.a[i] * q.b[i][k];
    }
    optimum_.resize(q.dim);
    for (std::int64_t k = 0; k < q.dim; ++k) optimum_[k] = static_cast<float>(num[k] / den);
  }

  std::string_view name() const override { return "quadratic"; }
  const std::vector<TensorInfo>& layout() const override { return layout_; }
  std::size_t parameterCount() const override { return layout_[0].count; }

  // Zeros: identical on every peer, and away from x* unless sum a_i b_i = 0.
  void initParameters(std::span<float> x, std::uint64_t) const override {
    std::fill(x.begin(), x.end(), 0.0f);
  }

  // g = a_i (a_i x - b_i) [+ noise * N(0, 1) per coordinate], loss = f_i(x) (noise-free).
  float gradient(std::span<const float> x, std::span<float> g) override {
    const double a = shared_->quadratic.a[rank_];
    const auto& b = shared_->quadratic.b[rank_];
    double loss = 0.0;
    for (std::size_t k = 0; k < x.size(); ++k) {
      const double r = a * x[k] - b[k];
      loss += 0.5 * r * r;
      g[k] = static_cast<float>(a * r);
    }
    if (noise_ > 0.0) {
      Rng rng(deriveSeed(seed_, kNoiseStream, static_cast<std::uint64_t>(rank_), step_));
      for (float& v : g) v += static_cast<float>(noise_ * rng.normal());
    }
    ++step_;
    return static_cast<float>(loss);
  }

  Eval evaluateTest(std::span<const float> x) const override {
    const std::size_t n = shared_->quadratic.a.size();
    double sum = 0.0;
    for (std::size_t i = 0; i < n; ++i) sum += objective(i, x);
    return Eval{sum / static_cast<double>(n)};
  }
  Eval evaluateTrain(std::span<const float> x) const override {
    return Eval{objective(static_cast<std::size_t>(rank_), x)};
  }
  std::span<const float> optimum() const override { return optimum_; }

 private:
  double objective(std::size_t i, std::span<const float> x) const {
    const double a = shared_->quadratic.a[i];
    const auto& b = shared_->quadratic.b[i];
    double sum = 0.0;
    for (std::size_t k = 0; k < x.size(); ++k) {
      const double r = a * x[k] - b[k];
      sum += r * r;
    }
    return 0.5 * sum;
  }

  int rank_;
  std::uint64_t seed_;
  double noise_;
  std::shared_ptr<const SharedData> shared_;
  std::vector<TensorInfo> layout_;
  std::vector<float> optimum_;
};

// ---- consensus ------------------------------------------------------------------------------

class ConsensusWorkload final : public Workload {
 public:
  ConsensusWorkload(const WorkloadOptions& options, int rank, int peers, std::uint64_t seed)
      : rank_(rank), peers_(peers), seed_(seed), layout_(vectorLayout(options.dim)) {}

  std::string_view name() const override { return "consensus"; }
  const std::vector<TensorInfo>& layout() const override { return layout_; }
  std::size_t parameterCount() const override { return layout_[0].count; }

  // N(0, 1) entries from a stream keyed by (seed, rank): different on every peer.
  void initParameters(std::span<float> x, std::uint64_t seed) const override {
    fillStart(x, seed, rank_);
  }

  float gradient(std::span<const float> x, std::span<float> g) override {
    std::fill(g.begin(), g.end(), 0.0f);
    ++step_;
    return 0.0f;
  }

  Eval evaluateTest(std::span<const float> x) const override { return Eval{distance(x)}; }
  Eval evaluateTrain(std::span<const float> x) const override { return Eval{distance(x)}; }

  std::span<const float> optimum() const override {
    if (average_.empty()) {
      // Block by block, each peer's stream continuing where it left off: the same values as
      // whole-model starts summed in rank order, with one block of scratch instead of three
      // model-sized buffers (a 10M-parameter run's end would otherwise peak 120 MB higher).
      const std::size_t n = layout_[0].count;
      std::vector<Rng> streams;
      streams.reserve(static_cast<std::size_t>(peers_));
      for (int r = 0; r < peers_; ++r) streams.emplace_back(startSeed(seed_, r));
      constexpr std::size_t kBlock = 1 << 14;
      std::vector<double> sum(std::min(n, kBlock));
      average_.resize(n);
      for (std::size_t at = 0; at < n; at += kBlock) {
        const std::size_t len = std::min(kBlock, n - at);
        std::fill(sum.begin(), sum.begin() + static_cast<std::ptrdiff_t>(len), 0.0);
        for (Rng& rng : streams) {
          for (std::size_t k = 0; k < len; ++k) sum[k] += static_cast<float>(rng.normal());
        }
        for (std::size_t k = 0; k < len; ++k)
          average_[at + k] = static_cast<float>(sum[k] / peers_);
      }
    }
    return average_;
  }

 private:
  static std::uint64_t startSeed(std::uint64_t seed, int rank) {
    return deriveSeed(seed, kConsensusStream, static_cast<std::uint64_t>(rank));
  }
  static void fillStart(std::span<float> x, std::uint64_t seed, int rank) {
    Rng rng(startSeed(seed, rank));
    for (float& v : x) v = static_cast<float>(rng.normal());
  }

  double distance(std::span<const float> x) const {
    const auto target = optimum();
    double sum = 0.0;
    for (std::size_t k = 0; k < x.size(); ++k) {
      const double d = double(x[k]) - target[k];
      sum += d * d;
    }
    return sum;
  }

  int rank_;
  int peers_;
  std::uint64_t seed_;
  std::vector<TensorInfo> layout_;
  mutable std::vector<float> average_;  // lazily computed optimum
};

}  // namespace

void setBlasThreads(int threads) {
  static std::mutex mutex;
  std::lock_guard<std::mutex> lock(mutex);
#ifdef OPENBLAS_VERSION
  if (openblas_get_num_threads() != threads) openblas_set_num_threads(threads);
#else
  (void)threads;  // another BLAS: its own environment variables decide
#endif
}

Result<std::unique_ptr<Workload>> makeWorkload(const WorkloadOptions& options, int rank, int peers,
                                               std::uint64_t seed,
                                               std::shared_ptr<const SharedData> shared) {
  GV_RETURN_IF_ERROR(options.validate());
  if (peers < 1)
    return invalidArgument("workload: peers must be >= 1, got " + std::to_string(peers));
  if (rank < 0 || rank >= peers) {
    return invalidArgument("workload: rank " + std::to_string(rank) + " is not in [0, " +
                           std::to_string(peers) + ")");
  }
  if (!shared) {
    GV_ASSIGN_OR_RETURN(shared, loadSharedData(options));
  }
  // The three Fashion-MNIST kinds share one load; quadratic needs its JSON data.
  const bool compatible = options.isFashionMnist()
                              ? shared->fashion.train.count > 0 && shared->fashion.test.count > 0
                          : options.kind == WorkloadKind::kQuadratic ? !shared->quadratic.a.empty()
                                                                     : true;
  if (!compatible) {
    return invalidArgument(std::string("workload: the shared data was loaded for '") +
                           std::string(workloadKindName(shared->kind)) + "' and lacks what '" +
                           std::string(workloadKindName(options.kind)) + "' needs");
  }
  setBlasThreads(options.threads);

  switch (options.kind) {
    case WorkloadKind::kFashionMnistSoftmax:
    case WorkloadKind::kFashionMnistMlp:
    case WorkloadKind::kFashionMnistCnn: {
      const ImageSet& train = shared->fashion.train;
      Result<Shards> shards =
          options.partition == PartitionKind::kIid
              ? iidPartition(static_cast<std::size_t>(train.count), peers, seed)
              : dirichletPartition(train.labels, shared->classes, peers, options.alpha, seed);
      if (!shards.isOk()) return shards.status();
      std::vector<std::uint32_t> mine = std::move(shards.value()[rank]);
      const int inputs = static_cast<int>(train.features());
      const int classes = shared->classes;
      auto makeNetwork = [options, inputs, classes, rows = static_cast<int>(train.rows),
                          cols = static_cast<int>(train.cols)] {
        return options.kind == WorkloadKind::kFashionMnistSoftmax
                   ? Network::softmaxRegression(inputs, classes)
               : options.kind == WorkloadKind::kFashionMnistMlp
                   ? Network::mlp(inputs, options.hidden, classes)
                   : Network::cnn(rows, cols, options.cnnChannels, options.cnnHidden, classes);
      };
      return std::unique_ptr<Workload>(std::make_unique<ClassifierWorkload>(
          options, rank, seed, std::move(shared), std::move(makeNetwork), std::move(mine)));
    }
    case WorkloadKind::kQuadratic: {
      const auto n = static_cast<int>(shared->quadratic.a.size());
      if (n != peers) {
        return invalidArgument("quadratic data " + options.data + " has n = " + std::to_string(n) +
                               " functions but there are " + std::to_string(peers) +
                               " peers (need one f_i per peer)");
      }
      return std::unique_ptr<Workload>(
          std::make_unique<QuadraticWorkload>(options, rank, seed, std::move(shared)));
    }
    case WorkloadKind::kConsensus:
      return std::unique_ptr<Workload>(
          std::make_unique<ConsensusWorkload>(options, rank, peers, seed));
    case WorkloadKind::kExternal:
      return invalidArgument(
          "workload.name is 'external': the model is the caller's, trained through the API "
          "(docs/api.md); start the program with `grapevine launch CONFIG -- COMMAND ...`");
  }
  return internalError("workload: unhandled kind");
}

}  // namespace grapevine::train
