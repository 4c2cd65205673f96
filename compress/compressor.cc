#include "compress/compressor.h"

#include <algorithm>
#include <string>
#include <vector>

#include "compress/bytes.h"
#include "compress/methods.h"
#include "kernels/element_math.h"

namespace grapevine::compress {
namespace {

// Error feedback (Seide et al. 2014; Karimireddy et al. 2019): e <- (x + e) - C(x + e).
class ErrorFeedback final : public Compressor {
 public:
  ErrorFeedback(std::unique_ptr<Compressor> inner, size_t n, const kernels::Ops& ops)
      : inner_(std::move(inner)), residual_(n, 0.0f), v_(n), ops_(ops) {}
  Method method() const override { return inner_->method(); }
  Properties properties(size_t n) const override { return inner_->properties(n); }
  size_t maxEncodedBytes(size_t n) const override { return inner_->maxEncodedBytes(n); }
  Result<size_t> encode(std::span<const float> x, uint64_t key, std::span<uint8_t> out) override {
    if (x.size() != residual_.size()) return invalidArgument("error feedback: size changed");
    ops_.add(x.data(), residual_.data(), v_.data(), x.size());
    GV_ASSIGN_OR_RETURN(size_t bytes, inner_->encode(v_, key, out));
    // e = v - C(v), with C(v) exactly what every receiver will add.
    std::copy(v_.begin(), v_.end(), residual_.begin());
    Status s = inner_->decodeAccumulate(out.first(bytes), -1.0f, residual_);
    if (!s.isOk()) {
      // Our own payload failed its checks: the input was not finite. Drop the residual so the
      // poison does not persist, and report it.
      std::fill(residual_.begin(), residual_.end(), 0.0f);
      return invalidArgument("error feedback: own payload rejected (" + s.message() + ")");
    }
    return bytes;
  }
  Status decodeAccumulate(std::span<const uint8_t> p, float w,
                          std::span<float> acc) const override {
    return inner_->decodeAccumulate(p, w, acc);
  }
  EncodeStats lastStats() const override { return inner_->lastStats(); }
  void resetState() override {
    std::fill(residual_.begin(), residual_.end(), 0.0f);
    inner_->resetState();
  }

 private:
  std::unique_ptr<Compressor> inner_;
  std::vector<float> residual_, v_;
  const kernels::Ops& ops_;
};

}  // namespace

Result<std::unique_ptr<Compressor>> makeCompressor(Method method, const Options& options,
                                                   size_t rows, size_t cols,
                                                   const kernels::Ops& ops) {
  GV_RETURN_IF_ERROR(validate(options));
  using namespace detail;
  switch (method) {
    case Method::kNone:
    case Method::kFp16:
    case Method::kBf16:
      return makeDense(method, ops);
    case Method::kInt8:
    case Method::kInt4:
      return makeBlockQuant(method, options, ops);
    case Method::kSign:
      return makeSign(options, ops);
    case Method::kTopK:
      return makeTopK(options, ops);
    case Method::kRandK:
      return makeRandK(options, ops);
    case Method::kQsgd:
      return makeQsgd(options, ops);
    case Method::kLowRank:
      if (rows == 0 || cols == 0 || rows > 0xFFFFFFFFu || cols > 0xFFFFFFFFu) {
        return invalidArgument("low-rank needs a rows x cols matrix shape");
      }
      return makeLowRank(options, rows, cols, ops);
  }
  return invalidArgument("unknown method id " + std::to_string(static_cast<int>(method)));
}

std::unique_ptr<Compressor> makeErrorFeedback(std::unique_ptr<Compressor> inner, size_t n,
                                              const kernels::Ops& ops) {
  return std::make_unique<ErrorFeedback>(std::move(inner), n, ops);
}

namespace {
Status decodeOrCheck(Method method, std::span<const uint8_t> payload, float w, std::span<float> acc,
                     const kernels::Ops& ops, bool apply) {
  using namespace detail;
  switch (method) {
    case Method::kNone:
    case Method::kFp16:
    case Method::kBf16:
      return decodeDense(method, payload, w, acc, ops, apply);
    case Method::kInt8:
    case Method::kInt4:
      return decodeBlockQuant(method, payload, w, acc, ops, apply);
    case Method::kSign:
      return decodeSign(payload, w, acc, ops, apply);
    case Method::kTopK:
      return decodeTopK(payload, w, acc, ops, apply);
    case Method::kRandK:
      return decodeRandK(payload, w, acc, ops, apply);
    case Method::kQsgd:
      return decodeQsgd(payload, w, acc, ops, apply);
    case Method::kLowRank:
      return decodeLowRank(payload, w, acc, ops, apply);
  }
  return corrupt("method", "unknown method id " + std::to_string(static_cast<int>(method)));
}
}  // namespace

Status decodePayload(Method method, std::span<const uint8_t> payload, float w, std::span<float> acc,
                     const kernels::Ops& ops) {
  return decodeOrCheck(method, payload, w, acc, ops, true);
}

Status checkPayload(Method method, std::span<const uint8_t> payload, std::span<float> acc,
                    const kernels::Ops& ops) {
  return decodeOrCheck(method, payload, 0.0f, acc, ops, false);
}

float SparseJournal::maxChange() const { return kernels::bitsFloat(maxChangeBits); }

void SparseJournal::clear() {
  before.clear();
  maxChangeBits = 0;
}

bool isSparseMethod(Method method) { return method == Method::kTopK || method == Method::kRandK; }

Status decodeSparseJournaled(Method method, std::span<const uint8_t> payload, float w,
                             std::span<float> acc, SparseJournal& journal,
                             const kernels::Ops& ops) {
  if (method == Method::kTopK) return detail::decodeTopK(payload, w, acc, ops, true, &journal);
  if (method == Method::kRandK) return detail::decodeRandK(payload, w, acc, ops, true, &journal);
  return invalidArgument("decodeSparseJournaled: not a sparse method");
}

FloatRegion payloadFloatRegion(Method method, std::span<const uint8_t> p) {
  switch (method) {
    case Method::kNone:
      return {FloatRegion::Kind::kF32, 0, p.size() / 4};
    case Method::kBf16:
      return {FloatRegion::Kind::kBf16, 0, p.size() / 2};
    case Method::kTopK:
      return detail::topkFloatRegion(p);
    case Method::kRandK:
      return detail::randkFloatRegion(p);
    case Method::kLowRank:
      if (p.size() < 16) return {};
      return {FloatRegion::Kind::kF32, 16, (p.size() - 16) / 4};
    default:
      return {};  // fp16: a 5-bit exponent plane does not pay for splitting; the rest are codes
  }
}

}  // namespace grapevine::compress
