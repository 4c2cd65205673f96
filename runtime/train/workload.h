// The training workload a peer runs: model + its data shard (or a synthetic objective).
//
// The engine owns the model as ONE flat std::vector<float> (algorithms mix flat vectors); a
// Workload only describes its tensors over that buffer (layout()) and computes on spans of it.
//
// Thread contract: one Workload per peer, called from that peer's training thread only. Methods are
// not re-entrant on one instance (gradient() and the evaluations share preallocated buffers, which
// is why the const evaluations use mutable workspace); distinct instances run concurrently, sharing
// the read-only SharedData. Nothing here allocates per step after construction.
//
// Determinism: the k-th call to gradient() on peer `rank` uses a minibatch (and, for `quadratic`,
// noise) that is a pure function of (seed, rank, k), so a simulated run is bit-reproducible.
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "runtime/common/status.h"
#include "runtime/train/dataset.h"
#include "runtime/train/options.h"
#include "runtime/train/tensor_info.h"

namespace grapevine::train {

class Workload {
 public:
  virtual ~Workload() = default;

  // The config name ("fashion-mnist-mlp", ...).
  virtual std::string_view name() const = 0;
  // The tensors in the flat parameter vector, in offset order, covering [0, parameterCount()).
  virtual const std::vector<TensorInfo>& layout() const = 0;
  virtual std::size_t parameterCount() const = 0;

  // Writes the initial model into x (x.size() == parameterCount()). For every workload but
  // `consensus` it depends on seed only, so every peer starts from the same model. `consensus`
  // starts each rank from its own random vector (that disagreement is the point of the workload).
  virtual void initParameters(std::span<float> x, std::uint64_t seed) const = 0;

  // One minibatch stochastic gradient at x: overwrites g (same size as x) and returns the minibatch
  // loss (before any weight decay, which the optimizer adds). Advances the step counter.
  virtual float gradient(std::span<const float> x, std::span<float> g) = 0;

  struct Eval {
    double loss = 0.0;
    double accuracy = std::numeric_limits<double>::quiet_NaN();  // NaN without a notion of accuracy
  };
  // Held-out test set (the same subset on every peer when workload.eval_test_samples subsamples).
  // For `quadratic`: the global objective (1/n) sum_j f_j(x). For `consensus`: |x - x*|^2.
  virtual Eval evaluateTest(std::span<const float> x) const = 0;
  // This peer's shard (a fixed seeded subset when workload.eval_train_samples subsamples).
  // For `quadratic`: f_rank(x). For `consensus`: |x - x*|^2.
  virtual Eval evaluateTrain(std::span<const float> x) const = 0;

  // The minimiser of the global objective when it is known in closed form (quadratic: sum a_i b_i /
  // sum a_i^2; consensus: the average of all peers' initial vectors), else empty. The engine
  // reports optimum_distance = |mean_i x_i - optimum|^2. May compute lazily on first call
  // (consensus: O(peers * dim)); assumes initParameters() is given the seed passed to
  // makeWorkload().
  virtual std::span<const float> optimum() const { return {}; }

  // Parts of the model the last gradient() has no gradient for (the API's caller passed none for
  // a tensor and asked that it be skipped, as torch skips a parameter whose .grad is None), in
  // ascending offset order: the local step leaves their values and momentum alone. Built-in
  // workloads have a gradient for every value.
  virtual std::span<const ValueRange> skippedRanges() const { return {}; }
  // Parts of the model that are never stepped (the API's buffers: mixed and averaged only), in
  // ascending offset order: the outer step (outer.optimizer) leaves them at their mixed values.
  virtual std::span<const ValueRange> bufferRanges() const { return {}; }

  // The mean loss of any model on a fixed seeded sample of this peer's shard (robust mixing's loss
  // screening, algorithm.robust_probe). It has its own scratch: it may run on another thread than
  // gradient()'s, and it never moves the minibatch stream (a run stays bit-reproducible).
  using LossProbe = std::function<double(std::span<const float>)>;
  // A probe over `samples` training samples of the shard (all of them when it has fewer); empty
  // where the workload has no shard to evaluate on (quadratic, consensus, the API's external).
  virtual LossProbe makeLossProbe(int /*samples*/) const { return {}; }

  // Number of gradient() calls so far; setStep() repositions the minibatch stream (resume).
  std::uint64_t step() const { return step_; }
  void setStep(std::uint64_t step) { step_ = step; }

 protected:
  std::uint64_t step_ = 0;
};

// Builds peer `rank`'s workload (0 <= rank < peers). `shared` is the process's loaded data
// (loadSharedData(options)); null loads it here (fine for one peer per process). Validates options,
// checks that shared holds what options.kind needs (the Fashion-MNIST kinds share one load),
// partitions the data (each peer keeps only its shard's indices), preallocates every buffer for
// options.batchSize, and sets the process-wide BLAS thread count to options.threads.
// Errors: kInvalidArgument (bad options, quadratic n != peers), kNotFound / kDataLoss (data files).
Result<std::unique_ptr<Workload>> makeWorkload(const WorkloadOptions& options, int rank, int peers,
                                               std::uint64_t seed,
                                               std::shared_ptr<const SharedData> shared);

// Sets the BLAS library's thread count for the whole process (OpenBLAS: openblas_set_num_threads).
// Thread-safe; a no-op when the count is already `threads`. Default policy is 1: many peers share
// few cores, and each peer's matrices are small.
void setBlasThreads(int threads);

}  // namespace grapevine::train
