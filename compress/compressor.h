// The Compressor interface: one method (or a wrapper such as error feedback) applied to one flat
// float span. Query the maximum encoded size, encode into the caller's buffer, and on the other
// side decode-and-accumulate `acc += w * decode(payload)` without a dense temporary.
//
// A payload is the method-specific part of a frame (compress/wire.h adds the header); its layouts
// are documented in docs/wire-format.md. Payload decoding is a pure function of the payload bytes,
// the element count and the weight, so every receiver (and the sender decoding its own payload)
// reconstructs the same C(x) bit for bit.
//
// Thread safety: a Compressor instance may carry state (error-feedback residual, PowerSGD warm
// start, scratch) and must be used by one thread at a time. decodePayload() is stateless.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "compress/options.h"
#include "kernels/ops.h"
#include "runtime/common/status.h"

namespace grapevine::compress {

// The statistical contract of a method for an input of n elements (each method's doc comment
// states the same numbers). For biased methods: E||C(x) - x||^2 <= (1 - delta) ||x||^2. For
// unbiased ones: E[C(x)] = x and E||C(x) - x||^2 <= omega ||x||^2; the scaled C/(1 + omega) is then
// a contraction with delta = 1/(1 + omega), which is the `delta` reported.
struct Properties {
  bool unbiased = false;
  double delta = 1.0;  // 0 means "no worst-case contraction" (e.g. low-rank: a projection)
  double omega = 0.0;  // variance factor of unbiased methods; 0 for biased ones
};

// How a payload's bytes split for the exponent coder: one contiguous array of floats (or bf16).
struct FloatRegion {
  enum class Kind : uint8_t { kNone = 0, kF32 = 1, kBf16 = 2 };
  Kind kind = Kind::kNone;
  size_t offset = 0;  // bytes from the payload start
  size_t count = 0;   // elements
};

// What the last encode() did (for metrics and the benchmark).
struct EncodeStats {
  size_t selected = 0;      // top-k: indices sent
  double countError = 0.0;  // top-k approx: (selected - k) / k
  int passes = 0;           // top-k: passes over the input
};

class Compressor {
 public:
  virtual ~Compressor() = default;

  virtual Method method() const = 0;
  virtual Properties properties(size_t n) const = 0;

  // Upper bound of encode()'s output for an input of n elements.
  virtual size_t maxEncodedBytes(size_t n) const = 0;

  // Encodes x into out (out.size() >= maxEncodedBytes(x.size())); returns the bytes written.
  // `key` seeds every random choice (rand-k positions, stochastic rounding, top-k samples): the
  // same key and input give the same bytes. x should be finite: a non-finite input produces a
  // payload that receivers reject as "non_finite" (or, for fp16/bf16, saturates).
  // Blocking, no allocation once warmed up (the first call may size scratch).
  virtual Result<size_t> encode(std::span<const float> x, uint64_t key, std::span<uint8_t> out) = 0;

  // acc += w * decode(payload), acc.size() being the element count. Checks every invariant first
  // and leaves acc untouched on error. `payload` must be 4-byte aligned.
  virtual Status decodeAccumulate(std::span<const uint8_t> payload, float w,
                                  std::span<float> acc) const = 0;

  // Where the payload's float array lies (for the exponent coder): payloadFloatRegion(method()).
  FloatRegion floatRegion(std::span<const uint8_t> payload) const;
  virtual EncodeStats lastStats() const { return {}; }
  // Forgets carried state that depends on past inputs (the error-feedback residual).
  virtual void resetState() {}
};

// Builds the compressor for `method` with the options' parameters. `rows` x `cols` is the matrix
// view used by low-rank (rows * cols == n); other methods ignore it. Error feedback is not applied
// here (see makeErrorFeedback). `ops` must outlive the compressor.
Result<std::unique_ptr<Compressor>> makeCompressor(Method method, const Options& options,
                                                   size_t rows, size_t cols,
                                                   const kernels::Ops& ops = kernels::cpuOps());

// Wraps any compressor with error feedback: keeps a residual e (n elements, starts at 0), encodes
// v = x + e, then e <- v - C(v) computed by decoding its own payload (so e is exact with respect
// to what receivers apply). Same payload format and decoder as the inner method. Properties are the
// inner method's (EF makes biased contractive methods converge; it does not change one round).
std::unique_ptr<Compressor> makeErrorFeedback(std::unique_ptr<Compressor> inner, size_t n,
                                              const kernels::Ops& ops = kernels::cpuOps());

// Stateless decoding of a payload of `method` (what a receiver uses: no Options needed, every
// parameter travels in the payload). Errors are kDataLoss with a stable reason prefix
// ("payload_size: ...", "params: ...", "index_order: ...", "non_finite: ...").
Status decodePayload(Method method, std::span<const uint8_t> payload, float w, std::span<float> acc,
                     const kernels::Ops& ops = kernels::cpuOps());
// Every check decodePayload makes, with the same result, without adding anything: acc (the
// slice the payload would go to; only its size is used) is never read or written.
Status checkPayload(Method method, std::span<const uint8_t> payload, std::span<float> acc,
                    const kernels::Ops& ops = kernels::cpuOps());

// What adding a sparse payload changed, for a caller that bounds the change and may take it back
// (the engine's security.max_delta_ratio): each touched element's index (from `base`, the acc
// slice's offset in the caller's vector) and value before, and the largest |new - old| (NaN when
// one is NaN). Top-k and rand-k touch each element at most once, so restoring the old values
// undoes the add exactly and the change of an element is its one step.
struct SparseJournal {
  size_t base = 0;
  std::vector<std::pair<size_t, float>> before;
  uint32_t maxChangeBits = 0;  // |change| as float bits (compared as integers, as Ops::maxAbs)
  float maxChange() const;
  void clear();
};

// Whether decodeSparseJournaled() takes payloads of `method` (top-k, rand-k).
bool isSparseMethod(Method method);
// decodePayload() of a sparse method (isSparseMethod), every touched element recorded in
// `journal` (appended) with its change; the same float operations in the same order.
Status decodeSparseJournaled(Method method, std::span<const uint8_t> payload, float w,
                             std::span<float> acc, SparseJournal& journal,
                             const kernels::Ops& ops = kernels::cpuOps());

// The float region of a payload of `method` (for the exponent coder); kind kNone when none.
FloatRegion payloadFloatRegion(Method method, std::span<const uint8_t> payload);

inline FloatRegion Compressor::floatRegion(std::span<const uint8_t> payload) const {
  return payloadFloatRegion(method(), payload);
}

}  // namespace grapevine::compress
