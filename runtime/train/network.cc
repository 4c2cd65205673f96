#include "runtime/train/network.h"

#include <cblas.h>

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "runtime/train/rng.h"

namespace grapevine::train {

// One layer: per-sample input and output sizes, its parameters at [offset, offset + count) of x.
class Layer {
 public:
  virtual ~Layer() = default;
  int inSize() const { return inSize_; }
  int outSize() const { return outSize_; }
  // Appends this layer's tensors to `layout` starting at *offset (advanced past them).
  virtual void describe(std::vector<TensorInfo>& layout, std::size_t* offset) { offset_ = *offset; }
  virtual void init(float* params, std::uint64_t seed, bool output) const {}
  virtual void reserve(int maxBatch) {}
  virtual void forward(const float* x, const float* in, float* out, int batch) = 0;
  // dIn may be null (first layer: the input's gradient is not needed). gx is the full gradient
  // vector; the layer overwrites its own slice.
  virtual void backward(const float* x, const float* in, const float* out, const float* dOut,
                        float* dIn, float* gx, int batch) = 0;

 protected:
  Layer(int inSize, int outSize) : inSize_(inSize), outSize_(outSize) {}
  int inSize_;
  int outSize_;
  std::size_t offset_ = 0;
};

namespace {

constexpr std::uint64_t kInitStream = 0x1a1f;

void fillUniform(float* p, std::size_t n, double bound, std::uint64_t seed) {
  Rng rng(seed);
  for (std::size_t i = 0; i < n; ++i)
    p[i] = static_cast<float>((2.0 * rng.uniform() - 1.0) * bound);
}

// y[B, out] = x[B, in] W^T + b with W [out, in].
class Dense final : public Layer {
 public:
  Dense(std::string name, int in, int out) : Layer(in, out), name_(std::move(name)) {}

  void describe(std::vector<TensorInfo>& layout, std::size_t* offset) override {
    offset_ = *offset;
    const std::size_t w = static_cast<std::size_t>(inSize_) * outSize_;
    layout.push_back({name_ + ".weight", {outSize_, inSize_}, *offset, w});
    layout.push_back(
        {name_ + ".bias", {outSize_}, *offset + w, static_cast<std::size_t>(outSize_)});
    *offset += w + outSize_;
  }

  void init(float* params, std::uint64_t seed, bool output) const override {
    const double bound = output ? std::sqrt(6.0 / (inSize_ + outSize_)) : std::sqrt(6.0 / inSize_);
    fillUniform(params + offset_, static_cast<std::size_t>(inSize_) * outSize_, bound,
                deriveSeed(seed, kInitStream, offset_));
    std::fill_n(params + offset_ + static_cast<std::size_t>(inSize_) * outSize_, outSize_, 0.0f);
  }

  void forward(const float* x, const float* in, float* out, int batch) override {
    const float* w = x + offset_;
    const float* b = w + static_cast<std::size_t>(inSize_) * outSize_;
    for (int r = 0; r < batch; ++r)
      std::memcpy(out + std::size_t(r) * outSize_, b, sizeof(float) * outSize_);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, batch, outSize_, inSize_, 1.0f, in,
                inSize_, w, inSize_, 1.0f, out, outSize_);
  }

  void backward(const float* x, const float* in, const float* out, const float* dOut, float* dIn,
                float* gx, int batch) override {
    const float* w = x + offset_;
    float* dw = gx + offset_;
    float* db = dw + static_cast<std::size_t>(inSize_) * outSize_;
    // dW[out, in] = dOut^T [out, B] * in [B, in]
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, outSize_, inSize_, batch, 1.0f, dOut,
                outSize_, in, inSize_, 0.0f, dw, inSize_);
    std::fill_n(db, outSize_, 0.0f);
    for (int r = 0; r < batch; ++r) {
      const float* row = dOut + std::size_t(r) * outSize_;
      for (int j = 0; j < outSize_; ++j) db[j] += row[j];
    }
    if (dIn) {
      // dIn[B, in] = dOut[B, out] * W[out, in]
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, batch, inSize_, outSize_, 1.0f, dOut,
                  outSize_, w, inSize_, 0.0f, dIn, inSize_);
    }
  }

 private:
  std::string name_;
};

class Relu final : public Layer {
 public:
  explicit Relu(int size) : Layer(size, size) {}
  void forward(const float* x, const float* in, float* out, int batch) override {
    const std::size_t n = std::size_t(batch) * inSize_;
    const float* __restrict src = in;
    float* __restrict dst = out;
    for (std::size_t i = 0; i < n; ++i) dst[i] = src[i] > 0.0f ? src[i] : 0.0f;
  }
  void backward(const float* x, const float* in, const float* out, const float* dOut, float* dIn,
                float* gx, int batch) override {
    if (!dIn) return;
    const std::size_t n = std::size_t(batch) * inSize_;
    const float* __restrict src = in;
    const float* __restrict d = dOut;
    float* __restrict dst = dIn;
    for (std::size_t i = 0; i < n; ++i) {
      const float g = d[i];  // loaded unconditionally, so the select vectorises
      dst[i] = src[i] > 0.0f ? g : 0.0f;
    }
  }
};

// NHWC convolution, k x k kernel, stride 1, zero "same" padding k/2. Weight [K, k, k, C], bias [K].
// Samples are processed kChunk at a time so im2col needs kChunk * H * W * k * k * C floats.
class Conv final : public Layer {
 public:
  static constexpr int kChunk = 16;

  Conv(std::string name, int h, int w, int c, int k, int kernel)
      : Layer(h * w * c, h * w * k),
        name_(std::move(name)),
        h_(h),
        w_(w),
        c_(c),
        k_(k),
        kernel_(kernel),
        pad_(kernel / 2),
        patch_(kernel * kernel * c) {}

  void describe(std::vector<TensorInfo>& layout, std::size_t* offset) override {
    offset_ = *offset;
    const std::size_t wc = static_cast<std::size_t>(k_) * patch_;
    layout.push_back({name_ + ".weight", {k_, kernel_, kernel_, c_}, *offset, wc});
    layout.push_back({name_ + ".bias", {k_}, *offset + wc, static_cast<std::size_t>(k_)});
    *offset += wc + k_;
  }

  void init(float* params, std::uint64_t seed, bool output) const override {
    const std::size_t wc = static_cast<std::size_t>(k_) * patch_;
    fillUniform(params + offset_, wc, std::sqrt(6.0 / patch_),
                deriveSeed(seed, kInitStream, offset_));
    std::fill_n(params + offset_ + wc, k_, 0.0f);
  }

  void reserve(int maxBatch) override {
    const std::size_t rows = static_cast<std::size_t>(std::min(maxBatch, kChunk)) * h_ * w_;
    if (col_.size() < rows * patch_) col_.assign(rows * patch_, 0.0f);
  }

  void forward(const float* x, const float* in, float* out, int batch) override {
    const float* wt = x + offset_;
    const float* bias = wt + static_cast<std::size_t>(k_) * patch_;
    for (int s = 0; s < batch; s += kChunk) {
      const int n = std::min(kChunk, batch - s);
      const int rows = n * h_ * w_;
      im2col(in + std::size_t(s) * inSize_, n);
      float* o = out + std::size_t(s) * outSize_;
      for (int r = 0; r < rows; ++r) {
        float* orow = o + std::size_t(r) * k_;
        for (int j = 0; j < k_; ++j) orow[j] = bias[j];
      }
      // out[rows, K] = col[rows, patch] * W^T
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, k_, patch_, 1.0f, col_.data(),
                  patch_, wt, patch_, 1.0f, o, k_);
    }
  }

  void backward(const float* x, const float* in, const float* out, const float* dOut, float* dIn,
                float* gx, int batch) override {
    const float* wt = x + offset_;
    float* dw = gx + offset_;
    float* db = dw + static_cast<std::size_t>(k_) * patch_;
    std::fill_n(db, k_, 0.0f);
    for (int s = 0; s < batch; s += kChunk) {
      const int n = std::min(kChunk, batch - s);
      const int rows = n * h_ * w_;
      const float* d = dOut + std::size_t(s) * outSize_;
      im2col(in + std::size_t(s) * inSize_, n);  // recomputed: cheaper than keeping every chunk
      // dW[K, patch] (+)= dOut^T [K, rows] * col[rows, patch]
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, k_, patch_, rows, 1.0f, d, k_,
                  col_.data(), patch_, s == 0 ? 0.0f : 1.0f, dw, patch_);
      for (int r = 0; r < rows; ++r) {
        const float* row = d + std::size_t(r) * k_;
        for (int j = 0; j < k_; ++j) db[j] += row[j];
      }
      if (dIn) {
        // dcol[rows, patch] = dOut[rows, K] * W[K, patch], then scatter-add back (col2im).
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, patch_, k_, 1.0f, d, k_, wt,
                    patch_, 0.0f, col_.data(), patch_);
        col2im(dIn + std::size_t(s) * inSize_, n);
      }
    }
  }

 private:
  // col row (b, y, x) = the k x k x C patch around (y, x), zero outside the image. In NHWC a patch
  // row (fixed ky) is kernel * C contiguous input floats, so each is one clipped span copy.
  void im2col(const float* in, int n) {
    float* col = col_.data();
    const int span = kernel_ * c_;
    for (int b = 0; b < n; ++b) {
      const float* img = in + std::size_t(b) * inSize_;
      for (int y = 0; y < h_; ++y) {
        for (int xx = 0; xx < w_; ++xx) {
          float* dst = col + ((std::size_t(b) * h_ + y) * w_ + xx) * patch_;
          const int x0 = xx - pad_;
          const int kxBegin = std::max(0, -x0);
          const int kxEnd = std::min(kernel_, w_ - x0);
          for (int ky = 0; ky < kernel_; ++ky) {
            float* row = dst + ky * span;
            const int sy = y + ky - pad_;
            if (sy < 0 || sy >= h_) {
              for (int i = 0; i < span; ++i) row[i] = 0.0f;
              continue;
            }
            for (int i = 0; i < kxBegin * c_; ++i) row[i] = 0.0f;
            const float* src = img + (std::size_t(sy) * w_ + (x0 + kxBegin)) * c_;
            float* inside = row + kxBegin * c_;
            const int count = (kxEnd - kxBegin) * c_;
            for (int i = 0; i < count; ++i) inside[i] = src[i];
            for (int i = kxEnd * c_; i < span; ++i) row[i] = 0.0f;
          }
        }
      }
    }
  }

  // dIn (n samples) = the sum of the col_ cells that read each input element (im2col's adjoint).
  void col2im(float* dIn, int n) {
    std::fill_n(dIn, std::size_t(n) * inSize_, 0.0f);
    const float* col = col_.data();
    const int span = kernel_ * c_;
    for (int b = 0; b < n; ++b) {
      float* img = dIn + std::size_t(b) * inSize_;
      for (int y = 0; y < h_; ++y) {
        for (int xx = 0; xx < w_; ++xx) {
          const float* src = col + ((std::size_t(b) * h_ + y) * w_ + xx) * patch_;
          const int x0 = xx - pad_;
          const int kxBegin = std::max(0, -x0);
          const int count = (std::min(kernel_, w_ - x0) - kxBegin) * c_;
          for (int ky = 0; ky < kernel_; ++ky) {
            const int sy = y + ky - pad_;
            if (sy < 0 || sy >= h_) continue;
            const float* row = src + ky * span + kxBegin * c_;
            float* target = img + (std::size_t(sy) * w_ + (x0 + kxBegin)) * c_;
            for (int i = 0; i < count; ++i) target[i] += row[i];
          }
        }
      }
    }
  }

  std::string name_;
  int h_, w_, c_, k_, kernel_, pad_, patch_;
  std::vector<float> col_;
};

// 2x2 max pooling, stride 2, NHWC. Remembers the argmax of each output for backward.
class MaxPool final : public Layer {
 public:
  MaxPool(int h, int w, int c) : Layer(h * w * c, (h / 2) * (w / 2) * c), h_(h), w_(w), c_(c) {}

  void reserve(int maxBatch) override {
    const std::size_t n = std::size_t(maxBatch) * outSize_;
    if (argmax_.size() < n) argmax_.assign(n, 0);
  }

  // Max first, then which cell holds it (the first in row-major window order on ties), both as
  // same-width selects over the channel-innermost loop so the compiler vectorises them
  // (data-dependent branches here mispredict about half the time).
  void forward(const float* x, const float* in, float* out, int batch) override {
    // Members copied to locals: the int32 argmax stores could alias them and block vectorising.
    const int oh = h_ / 2, ow = w_ / 2, w = w_, c = c_, inSize = inSize_, outSize = outSize_;
    const std::int32_t rowStride = w * c;
    for (int b = 0; b < batch; ++b) {
      const float* img = in + std::size_t(b) * inSize;
      float* o = out + std::size_t(b) * outSize;
      std::int32_t* am = argmax_.data() + std::size_t(b) * outSize;
      for (int y = 0; y < oh; ++y) {
        for (int xx = 0; xx < ow; ++xx) {
          const std::int32_t i00 = ((2 * y) * w + 2 * xx) * c;
          const float* __restrict p00 = img + i00;
          const float* __restrict p01 = p00 + c;
          const float* __restrict p10 = p00 + rowStride;
          const float* __restrict p11 = p10 + c;
          float* __restrict oc = o + (y * ow + xx) * c;
          std::int32_t* __restrict ac = am + (y * ow + xx) * c;
          for (int ch = 0; ch < c; ++ch) {
            const float m = std::max(std::max(p00[ch], p01[ch]), std::max(p10[ch], p11[ch]));
            std::int32_t k = rowStride + c;
            k = p10[ch] == m ? rowStride : k;
            k = p01[ch] == m ? c : k;
            k = p00[ch] == m ? 0 : k;
            oc[ch] = m;
            ac[ch] = i00 + ch + k;
          }
        }
      }
    }
  }

  void backward(const float* x, const float* in, const float* out, const float* dOut, float* dIn,
                float* gx, int batch) override {
    if (!dIn) return;
    std::fill_n(dIn, std::size_t(batch) * inSize_, 0.0f);
    for (int b = 0; b < batch; ++b) {
      const float* d = dOut + std::size_t(b) * outSize_;
      const std::int32_t* am = argmax_.data() + std::size_t(b) * outSize_;
      float* di = dIn + std::size_t(b) * inSize_;
      for (int i = 0; i < outSize_; ++i) di[am[i]] += d[i];
    }
  }

 private:
  int h_, w_, c_;
  std::vector<std::int32_t> argmax_;
};

}  // namespace

Network::Network(int inputSize, int classes) : inputSize_(inputSize), classes_(classes) {}
Network::Network(Network&&) noexcept = default;
Network& Network::operator=(Network&&) noexcept = default;
Network::~Network() = default;

void Network::add(std::unique_ptr<Layer> layer) {
  assert(layers_.empty() ? layer->inSize() == inputSize_
                         : layer->inSize() == layers_.back()->outSize());
  layer->describe(layout_, &parameterCount_);
  layers_.push_back(std::move(layer));
}

Network Network::softmaxRegression(int inputs, int classes) {
  Network net(inputs, classes);
  net.add(std::make_unique<Dense>("dense1", inputs, classes));
  return net;
}

Network Network::mlp(int inputs, const std::vector<int>& hidden, int classes) {
  Network net(inputs, classes);
  int width = inputs;
  int index = 1;
  for (int h : hidden) {
    net.add(std::make_unique<Dense>("dense" + std::to_string(index++), width, h));
    net.add(std::make_unique<Relu>(h));
    width = h;
  }
  net.add(std::make_unique<Dense>("dense" + std::to_string(index), width, classes));
  return net;
}

Network Network::cnn(int rows, int cols, const std::vector<int>& channels, int hiddenUnits,
                     int classes) {
  assert(channels.size() == 2 && rows % 4 == 0 && cols % 4 == 0);
  Network net(rows * cols, classes);
  constexpr int kKernel = 5;
  net.add(std::make_unique<Conv>("conv1", rows, cols, 1, channels[0], kKernel));
  net.add(std::make_unique<Relu>(rows * cols * channels[0]));
  net.add(std::make_unique<MaxPool>(rows, cols, channels[0]));
  const int r2 = rows / 2, c2 = cols / 2;
  net.add(std::make_unique<Conv>("conv2", r2, c2, channels[0], channels[1], kKernel));
  net.add(std::make_unique<Relu>(r2 * c2 * channels[1]));
  net.add(std::make_unique<MaxPool>(r2, c2, channels[1]));
  const int flat = (r2 / 2) * (c2 / 2) * channels[1];
  net.add(std::make_unique<Dense>("dense1", flat, hiddenUnits));
  net.add(std::make_unique<Relu>(hiddenUnits));
  net.add(std::make_unique<Dense>("dense2", hiddenUnits, classes));
  return net;
}

void Network::initParameters(std::span<float> x, std::uint64_t seed) const {
  assert(x.size() == parameterCount_);
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    layers_[i]->init(x.data(), seed, i + 1 == layers_.size());
  }
}

void Network::reserve(int maxBatch) {
  if (maxBatch <= maxBatch_) return;
  maxBatch_ = maxBatch;
  // assign() writes every element, so the pages are touched now rather than on the first step.
  activations_.resize(layers_.size() + 1);
  gradients_.resize(layers_.size() + 1);
  activations_[0].assign(std::size_t(maxBatch) * inputSize_, 0.0f);
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    const std::size_t n = std::size_t(maxBatch) * layers_[i]->outSize();
    activations_[i + 1].assign(n, 0.0f);
    gradients_[i + 1].assign(n, 0.0f);
    layers_[i]->reserve(maxBatch);
  }
  probabilities_.assign(std::size_t(maxBatch) * classes_, 0.0f);
  labels_.assign(maxBatch, 0);
}

float* Network::input() { return activations_.empty() ? nullptr : activations_[0].data(); }

double Network::forward(std::span<const float> x, const std::uint8_t* labels, int batch,
                        int* correct) {
  assert(batch >= 1 && batch <= maxBatch_ && x.size() == parameterCount_);
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    layers_[i]->forward(x.data(), activations_[i].data(), activations_[i + 1].data(), batch);
  }
  // Softmax cross-entropy, numerically stable (log-sum-exp around the row max), in double.
  const float* logits = activations_.back().data();
  double lossSum = 0.0;
  int right = 0;
  for (int r = 0; r < batch; ++r) {
    const float* z = logits + std::size_t(r) * classes_;
    float* p = probabilities_.data() + std::size_t(r) * classes_;
    int best = 0;
    for (int c = 1; c < classes_; ++c) {
      if (z[c] > z[best]) best = c;
    }
    const double zmax = z[best];
    double sum = 0.0;
    for (int c = 0; c < classes_; ++c) sum += std::exp(double(z[c]) - zmax);
    for (int c = 0; c < classes_; ++c)
      p[c] = static_cast<float>(std::exp(double(z[c]) - zmax) / sum);
    lossSum += std::log(sum) + zmax - z[labels[r]];
    if (best == labels[r]) ++right;
    labels_[r] = labels[r];
  }
  if (correct) *correct += right;
  return lossSum / batch;
}

void Network::backward(std::span<const float> x, std::span<float> g, int batch) {
  assert(batch >= 1 && batch <= maxBatch_ && g.size() == parameterCount_);
  float* dLogits = gradients_.back().data();
  const float scale = 1.0f / static_cast<float>(batch);
  for (int r = 0; r < batch; ++r) {
    const float* p = probabilities_.data() + std::size_t(r) * classes_;
    float* d = dLogits + std::size_t(r) * classes_;
    for (int c = 0; c < classes_; ++c) d[c] = p[c] * scale;
    d[labels_[r]] -= scale;
  }
  for (std::size_t i = layers_.size(); i-- > 0;) {
    float* dIn = i == 0 ? nullptr : gradients_[i].data();
    layers_[i]->backward(x.data(), activations_[i].data(), activations_[i + 1].data(),
                         gradients_[i + 1].data(), dIn, g.data(), batch);
  }
}

}  // namespace grapevine::train
