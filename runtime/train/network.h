// Small feed-forward networks with hand-written forward and backward passes over a flat parameter
// vector: softmax regression, an MLP (dense + ReLU), and a small CNN (conv 5x5 same-padding + ReLU
// + max-pool 2x2, twice, then dense + ReLU + dense). Matrix products go to BLAS (cblas_sgemm);
// convolutions are im2col + sgemm in NHWC layout, in chunks of samples to bound the im2col buffer.
//
// Memory contract: reserve(maxBatch) allocates and first-touches every activation, gradient and
// scratch buffer once; forward()/backward() never allocate. Not thread-safe: one Network per peer,
// used from one thread at a time; distinct Networks may run concurrently (the parameters are
// passed in, never stored).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "runtime/train/tensor_info.h"

namespace grapevine::train {

class Layer;

class Network {
 public:
  // Multinomial logistic regression: one dense layer, inputs -> classes.
  static Network softmaxRegression(int inputs, int classes);
  // Dense(inputs -> hidden[0]) + ReLU ... Dense(-> classes). Empty `hidden` = softmax regression.
  static Network mlp(int inputs, const std::vector<int>& hidden, int classes);
  // Input rows x cols x 1; conv(channels[0]) + ReLU + pool, conv(channels[1]) + ReLU + pool,
  // dense(hiddenUnits) + ReLU, dense(classes). rows and cols must be divisible by 4.
  static Network cnn(int rows, int cols, const std::vector<int>& channels, int hiddenUnits,
                     int classes);

  Network(Network&&) noexcept;
  Network& operator=(Network&&) noexcept;
  ~Network();

  const std::vector<TensorInfo>& layout() const { return layout_; }
  std::size_t parameterCount() const { return parameterCount_; }
  int inputSize() const { return inputSize_; }
  int classes() const { return classes_; }

  // He-uniform weights (bound sqrt(6/fan_in)) for layers followed by ReLU, Glorot-uniform for the
  // output layer, zero biases; a pure function of seed (identical on every peer and platform).
  void initParameters(std::span<float> x, std::uint64_t seed) const;

  // Allocates all buffers for batches up to maxBatch (idempotent for smaller values).
  void reserve(int maxBatch);
  int maxBatch() const { return maxBatch_; }
  // Where the caller writes the batch's inputs: maxBatch * inputSize floats, sample-major.
  float* input();

  // Forward pass on the first `batch` inputs with their labels. Returns the mean cross-entropy and
  // adds the number of correct argmax predictions to *correct (if non-null). batch <= maxBatch.
  double forward(std::span<const float> x, const std::uint8_t* labels, int batch, int* correct);
  // Gradient of the mean cross-entropy of the last forward() w.r.t. x; overwrites all of g.
  void backward(std::span<const float> x, std::span<float> g, int batch);

 private:
  Network(int inputSize, int classes);
  void add(std::unique_ptr<Layer> layer);

  int inputSize_ = 0;
  int classes_ = 0;
  int maxBatch_ = 0;
  std::size_t parameterCount_ = 0;
  std::vector<TensorInfo> layout_;
  std::vector<std::unique_ptr<Layer>> layers_;
  std::vector<std::vector<float>> activations_;  // [0] input, [k + 1] output of layer k
  std::vector<std::vector<float>> gradients_;    // d loss / d activations_[k]
  std::vector<float> probabilities_;             // softmax of the logits
  std::vector<std::uint8_t> labels_;
};

}  // namespace grapevine::train
