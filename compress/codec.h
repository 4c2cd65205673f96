// ModelCodec: a model (a flat float buffer cut into named tensors) to frames and back.
//
// Sender: encode(delta, context, sink) compresses every tensor (method chosen per tensor), cuts
// large tensors into chunks of at most Options::chunkElements, and hands each finished frame to
// the sink. Receiver: decodeAccumulate(frame, w, acc) checks the frame and adds w * C(delta) into
// the right slice of acc. A sender gets its own C(delta) by decodeAccumulate'ing its own frames
// with weight 1: decoding is deterministic, so that is bit-identical to what every receiver adds.
//
// Random choices (rand-k positions, stochastic rounding, top-k sampling, the PowerSGD start)
// derive from (seed, sender, round, tensor, chunk) (frameKey()), so runs are reproducible.
// Error-feedback residuals and PowerSGD warm starts live here, per tensor chunk.
//
// Thread safety: none; one thread at a time per codec. encode() and decodeAccumulate() use
// separate scratch, so a sender may also decode, but not concurrently. After the first encode and
// the first decode of the largest frame, neither allocates.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "compress/compressor.h"
#include "compress/lossless.h"
#include "compress/options.h"
#include "compress/wire.h"
#include "kernels/ops.h"
#include "runtime/common/status.h"

namespace grapevine::compress {

// A named, shaped slice [offset, offset + count) of the model buffer; count = product(shape).
struct TensorLayout {
  std::string name;
  std::vector<size_t> shape;
  size_t offset = 0;
  size_t count = 0;
};

// Options for the tensors called `name` (instead of the model-wide ones).
struct TensorOverride {
  std::string name;
  Options options;
};

struct EncodeContext {
  uint64_t round = 0;
  uint64_t seed = 0;  // the run's compression seed (same on every peer)
  uint32_t edgeEpoch = 0;
  uint64_t sequenceStart = 0;  // the first frame gets this sequence number, the next +1, ...
};

// Called once per finished frame, in order; the bytes are valid only during the call (the codec
// reuses its buffer). An error stops encode() and is returned from it.
using FrameSink = std::function<Status(std::span<const uint8_t> frame)>;

struct EncodeSummary {
  size_t frames = 0;
  size_t wireBytes = 0;  // sum of frame sizes
  size_t rawBytes = 0;   // payload bytes before the lossless stage
  uint64_t nextSequence = 0;
  double maxCountError = 0.0;  // top-k approx: largest |count - k| / k over chunks
};

struct FrameInfo {
  FrameHeader header;
  size_t modelOffset = 0;  // where the chunk starts in the model buffer
  size_t wireBytes = 0;
};

// A frame that passed every check of decodeAccumulate (checkFrame): what applyChecked() needs to
// add it without parsing, checksumming or decompressing its bytes again. `payload` is the raw
// payload (decompressed, 4-byte aligned): inside the frame, or in the codec's decode slot the
// check used; valid while the frame's bytes are unchanged and until that slot is used again.
struct CheckedFrame : FrameInfo {
  float scale = 1.0f;  // a contractive codec's decode scale for the chunk (else 1)
  std::span<const uint8_t> payload;
};

class ModelCodec {
 public:
  // Validates the layout (non-overlapping, count = product(shape), every tensor's frames within
  // options.maxFrameBytes) and the options. Tensors with fewer than denseBelow elements go
  // `none`; low-rank applies to tensors with at least 2 dimensions (rows = shape[0]) where it
  // shrinks the payload, the others use options.fallback.
  static Result<ModelCodec> create(std::vector<TensorLayout> layout, const Options& options,
                                   uint32_t sender, std::vector<TensorOverride> overrides = {},
                                   const kernels::Ops& ops = kernels::cpuOps());

  ModelCodec(ModelCodec&&) noexcept;
  ModelCodec& operator=(ModelCodec&&) noexcept;
  ~ModelCodec();

  // Encodes one message: every tensor of `delta` (size == elementCount()).
  Result<EncodeSummary> encode(std::span<const float> delta, const EncodeContext& context,
                               const FrameSink& sink);

  // Checks `frame` completely (parseFrame, tensor id and range against this layout, lossless
  // stage, payload invariants) and only then adds weight * C into acc (size == elementCount()).
  // On error acc is unchanged. Any sender's frames decode (parameters travel in the payload).
  Result<FrameInfo> decodeAccumulate(std::span<const uint8_t> frame, float weight,
                                     std::span<float> acc, const DecodeLimits& limits = {});
  // Every check of decodeAccumulate, with the same result, adding nothing (acc is not touched; it
  // gives the sizes). A receiver of a multi-frame message checks all frames (each in its own
  // `slot`: a lossless frame is decompressed there once and kept), then applies them with
  // applyChecked(): every received byte is parsed, checksummed and decompressed once.
  Result<CheckedFrame> checkFrame(std::span<const uint8_t> frame, std::span<float> acc,
                                  const DecodeLimits& limits = {}, size_t slot = 0);
  // Adds weight * C of a frame checkFrame() passed into acc, exactly as decodeAccumulate() would
  // (the same float operations in the same order). With a journal, a sparse frame
  // (isSparseMethod) records every element it touches and its change there (SparseJournal,
  // indices into acc); other frames ignore it.
  Status applyChecked(const CheckedFrame& frame, float weight, std::span<float> acc,
                      SparseJournal* journal = nullptr);

  size_t elementCount() const;
  size_t tensorCount() const;
  const TensorLayout& tensor(size_t i) const;
  Method methodOf(size_t tensor) const;  // the method this codec sends tensor i with
  size_t chunkCount() const;             // frames per message
  size_t maxFrameBytes() const;          // largest frame encode() can produce
  void resetErrorFeedback();             // zero every residual (e.g. after a resync)

 private:
  struct State;
  explicit ModelCodec(std::unique_ptr<State> state);
  // Every check; with `apply` also adds (decodeAccumulate), else keeps the payload in `slot`.
  Result<CheckedFrame> decodeFrame(std::span<const uint8_t> frame, float weight,
                                   std::span<float> acc, const DecodeLimits& limits, bool apply,
                                   size_t slot);
  std::unique_ptr<State> s_;
};

// The key seeding random choices for one chunk.
uint64_t frameKey(uint64_t seed, uint32_t sender, uint64_t round, uint32_t tensor, uint32_t chunk);

}  // namespace grapevine::compress
