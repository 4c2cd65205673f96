#include "compress/codec.h"

#include <algorithm>
#include <numeric>
#include <string>

#include "compress/bytes.h"
#include "kernels/element_math.h"

namespace grapevine::compress {

using detail::corrupt;

uint64_t frameKey(uint64_t seed, uint32_t sender, uint64_t round, uint32_t tensor, uint32_t chunk) {
  using kernels::splitmix64;
  uint64_t k = splitmix64(seed);
  k = splitmix64(k ^ sender);
  k = splitmix64(k ^ round);
  return splitmix64(k ^ ((uint64_t{tensor} << 32) | chunk));
}

namespace {

struct Chunk {
  uint32_t tensor = 0;
  uint32_t index = 0;
  uint32_t count = 0;  // chunks of this tensor
  size_t offset = 0;   // within the tensor
  size_t elements = 0;
  std::unique_ptr<Compressor> compressor;
  Lossless lossless = Lossless::kNone;
  int zstdLevel = 1;
  bool errorFeedback = false;
  float decodeScale = 1.0f;  // 1/(1 + omega) for unbiased methods of a contractive codec, else 1
};

// 8-byte aligned byte storage (payloads hold float arrays at 4-byte aligned offsets).
struct AlignedBuffer {
  std::vector<uint64_t> words;
  uint8_t* data() { return reinterpret_cast<uint8_t*>(words.data()); }
  void reserve(size_t bytes) {
    if (words.size() * 8 < bytes) words.resize((bytes + 7) / 8);
  }
  size_t size() const { return words.size() * 8; }
};

}  // namespace

struct ModelCodec::State {
  std::vector<TensorLayout> layout;
  std::vector<Method> methods;  // per tensor
  std::vector<Chunk> chunks;
  std::vector<size_t> firstChunk;  // per tensor: index of its first chunk in `chunks`
  bool contractive = false;        // Options::contractive (model-wide)
  uint32_t sender = 0;
  size_t elements = 0;
  size_t maxFrame = 0;
  const kernels::Ops* ops = nullptr;
  LosslessCoder lossless;
  AlignedBuffer frame;                    // encode: header + raw payload
  AlignedBuffer packed;                   // encode: header + lossless output
  AlignedBuffer decodeRaw;                // decode: lossless output or an aligned copy
  std::vector<AlignedBuffer> checkSlots;  // checkFrame: the same, one per slot, kept for apply
};

ModelCodec::ModelCodec(std::unique_ptr<State> s) : s_(std::move(s)) {}
ModelCodec::ModelCodec(ModelCodec&&) noexcept = default;
ModelCodec& ModelCodec::operator=(ModelCodec&&) noexcept = default;
ModelCodec::~ModelCodec() = default;

Result<ModelCodec> ModelCodec::create(std::vector<TensorLayout> layout, const Options& options,
                                      uint32_t sender, std::vector<TensorOverride> overrides,
                                      const kernels::Ops& ops) {
  GV_RETURN_IF_ERROR(validate(options));
  for (const auto& o : overrides) {
    Status st = validate(o.options);
    if (!st.isOk()) return invalidArgument("override for '" + o.name + "': " + st.message());
    if (std::none_of(layout.begin(), layout.end(),
                     [&](const TensorLayout& t) { return t.name == o.name; })) {
      return invalidArgument("override for unknown tensor '" + o.name + "'");
    }
  }
  if (layout.size() > 0xFFFFFFFFu) return invalidArgument("too many tensors");
  auto s = std::make_unique<State>();
  s->sender = sender;
  s->contractive = options.contractive;
  s->ops = &ops;
  // Layout: count = product(shape), slices do not overlap.
  std::vector<std::pair<size_t, size_t>> spans;
  for (const auto& t : layout) {
    size_t prod = 1;
    for (size_t d : t.shape) prod *= d;
    if (t.shape.empty()) prod = t.count;
    if (prod != t.count) {
      return invalidArgument("tensor '" + t.name + "': count " + std::to_string(t.count) +
                             " is not the product of its shape");
    }
    spans.emplace_back(t.offset, t.offset + t.count);
    s->elements = std::max(s->elements, t.offset + t.count);
  }
  std::sort(spans.begin(), spans.end());
  for (size_t i = 1; i < spans.size(); ++i) {
    if (spans[i].first < spans[i - 1].second)
      return invalidArgument("tensors overlap in the layout");
  }

  size_t maxPayload = 0;
  for (uint32_t ti = 0; ti < layout.size(); ++ti) {
    const TensorLayout& t = layout[ti];
    Options o = options;
    for (const auto& ov : overrides) {
      if (ov.name == t.name) o = ov.options;
    }
    Method m = t.count < o.denseBelow ? Method::kNone : o.method;
    size_t rows = 0, cols = 0;
    if (m == Method::kLowRank) {
      if (t.shape.size() >= 2) {
        rows = t.shape[0];
        cols = t.count / std::max<size_t>(rows, 1);
      }
      const size_t r = std::min<size_t>({o.rank, rows, cols});
      // Low-rank only where the factors are smaller than the matrix and fit one frame.
      const bool pays = rows > 0 && cols > 0 && r * (rows + cols) < rows * cols;
      if (!pays) m = o.fallback;
    }
    s->methods.push_back(m);
    const size_t chunkElems =
        m == Method::kLowRank ? std::max<size_t>(t.count, 1) : o.chunkElements;
    const size_t nChunks = std::max<size_t>(1, (t.count + chunkElems - 1) / chunkElems);
    s->firstChunk.push_back(s->chunks.size());
    if (nChunks > 0xFFFFFFFFu || chunkElems > 0xFFFFFFFFu) {
      return invalidArgument("tensor '" + t.name + "' is too large for one frame's element count");
    }
    for (size_t c = 0; c < nChunks; ++c) {
      Chunk ch;
      ch.tensor = ti;
      ch.index = static_cast<uint32_t>(c);
      ch.count = static_cast<uint32_t>(nChunks);
      ch.offset = c * chunkElems;
      ch.elements = std::min(chunkElems, t.count - std::min(t.count, ch.offset));
      GV_ASSIGN_OR_RETURN(ch.compressor, makeCompressor(m, o, rows, cols, ops));
      if (o.errorFeedback)
        ch.compressor = makeErrorFeedback(std::move(ch.compressor), ch.elements, ops);
      ch.lossless = o.lossless;
      ch.zstdLevel = o.zstdLevel;
      ch.errorFeedback = o.errorFeedback;
      if (options.contractive) {
        // omega for this chunk's real element count (QSGD's bucket is the chunk).
        const Properties p = ch.compressor->properties(ch.elements);
        if (p.unbiased && p.omega > 0.0) ch.decodeScale = static_cast<float>(1.0 / (1.0 + p.omega));
      }
      const size_t payload = ch.compressor->maxEncodedBytes(ch.elements);
      if (kHeaderBytes + payload > o.maxFrameBytes) {
        return invalidArgument("tensor '" + t.name + "': a frame could reach " +
                               std::to_string(kHeaderBytes + payload) +
                               " bytes, above max_frame_bytes " + std::to_string(o.maxFrameBytes) +
                               " (lower chunk_elements)");
      }
      maxPayload = std::max(maxPayload, payload);
      s->chunks.push_back(std::move(ch));
    }
  }
  s->layout = std::move(layout);
  s->maxFrame = kHeaderBytes + maxPayload;
  s->frame.reserve(s->maxFrame);
  s->packed.reserve(kHeaderBytes + LosslessCoder::maxCompressedBytes(maxPayload));
  return ModelCodec(std::move(s));
}

Result<EncodeSummary> ModelCodec::encode(std::span<const float> delta, const EncodeContext& ctx,
                                         const FrameSink& sink) {
  State& s = *s_;
  if (delta.size() != s.elements) {
    return invalidArgument("encode: delta has " + std::to_string(delta.size()) +
                           " elements, layout " + std::to_string(s.elements));
  }
  EncodeSummary sum;
  sum.nextSequence = ctx.sequenceStart;
  for (Chunk& ch : s.chunks) {
    const TensorLayout& t = s.layout[ch.tensor];
    auto x = delta.subspan(t.offset + ch.offset, ch.elements);
    const uint64_t key = frameKey(ctx.seed, s.sender, ctx.round, ch.tensor, ch.index);
    uint8_t* payload = s.frame.data() + kHeaderBytes;
    GV_ASSIGN_OR_RETURN(size_t raw,
                        ch.compressor->encode(x, key, {payload, s.frame.size() - kHeaderBytes}));
    sum.maxCountError =
        std::max(sum.maxCountError, std::abs(ch.compressor->lastStats().countError));

    FrameHeader h;
    h.method = ch.compressor->method();
    h.flags = static_cast<uint8_t>((ch.errorFeedback ? kFlagErrorFeedback : 0) |
                                   (ch.index + 1 == ch.count ? kFlagLastChunk : 0));
    h.sender = s.sender;
    h.edgeEpoch = ctx.edgeEpoch;
    h.sequence = sum.nextSequence;
    h.round = ctx.round;
    h.tensorId = ch.tensor;
    h.chunkIndex = ch.index;
    h.chunkCount = ch.count;
    h.elementCount = static_cast<uint32_t>(ch.elements);
    h.elementOffset = ch.offset;
    h.rawLength = static_cast<uint32_t>(raw);
    h.payloadLength = static_cast<uint32_t>(raw);
    uint8_t* frame = s.frame.data();
    size_t wire = raw;
    if (ch.lossless != Lossless::kNone) {
      std::span<const uint8_t> rawSpan(payload, raw);
      GV_ASSIGN_OR_RETURN(size_t packed, s.lossless.compress(ch.lossless, ch.zstdLevel, rawSpan,
                                                             ch.compressor->floatRegion(rawSpan),
                                                             {s.packed.data() + kHeaderBytes,
                                                              s.packed.size() - kHeaderBytes}));
      if (packed > 0) {  // it paid for itself
        frame = s.packed.data();
        wire = packed;
        h.payloadLength = static_cast<uint32_t>(packed);
        h.flags |= ch.lossless == Lossless::kZstd ? kFlagZstd : kFlagExponent;
      }
    }
    writeFrameHeader(h, {frame + kHeaderBytes, wire}, frame, *s.ops);
    GV_RETURN_IF_ERROR(sink({frame, kHeaderBytes + wire}));
    ++sum.frames;
    ++sum.nextSequence;
    sum.wireBytes += kHeaderBytes + wire;
    sum.rawBytes += raw;
  }
  return sum;
}

Result<FrameInfo> ModelCodec::decodeAccumulate(std::span<const uint8_t> frame, float weight,
                                               std::span<float> acc, const DecodeLimits& limits) {
  GV_ASSIGN_OR_RETURN(CheckedFrame f, decodeFrame(frame, weight, acc, limits, true, 0));
  return FrameInfo(f);
}

Result<CheckedFrame> ModelCodec::checkFrame(std::span<const uint8_t> frame, std::span<float> acc,
                                            const DecodeLimits& limits, size_t slot) {
  return decodeFrame(frame, 0.0f, acc, limits, false, slot);
}

Status ModelCodec::applyChecked(const CheckedFrame& f, float weight, std::span<float> acc,
                                SparseJournal* journal) {
  if (acc.size() != s_->elements || f.modelOffset + f.header.elementCount > acc.size()) {
    return invalidArgument("applyChecked: acc has " + std::to_string(acc.size()) +
                           " elements, layout " + std::to_string(s_->elements));
  }
  if (s_->contractive) weight *= f.scale;
  const auto slice = acc.subspan(f.modelOffset, f.header.elementCount);
  if (journal != nullptr && isSparseMethod(f.header.method)) {
    journal->base = f.modelOffset;
    return decodeSparseJournaled(f.header.method, f.payload, weight, slice, *journal, *s_->ops);
  }
  return decodePayload(f.header.method, f.payload, weight, slice, *s_->ops);
}

Result<CheckedFrame> ModelCodec::decodeFrame(std::span<const uint8_t> frame, float weight,
                                             std::span<float> acc, const DecodeLimits& limits,
                                             bool apply, size_t slot) {
  State& s = *s_;
  if (acc.size() != s.elements) {
    return invalidArgument("decode: acc has " + std::to_string(acc.size()) + " elements, layout " +
                           std::to_string(s.elements));
  }
  GV_ASSIGN_OR_RETURN(FrameHeader h, parseFrame(frame, limits, *s.ops));
  if (h.tensorId >= s.layout.size()) {
    return corrupt("tensor_id", "tensor " + std::to_string(h.tensorId) + " of " +
                                    std::to_string(s.layout.size()));
  }
  const TensorLayout& t = s.layout[h.tensorId];
  if (h.elementOffset > t.count || h.elementCount > t.count - h.elementOffset) {
    return corrupt("range", "elements [" + std::to_string(h.elementOffset) + ", +" +
                                std::to_string(h.elementCount) + ") outside tensor '" + t.name +
                                "'");
  }
  float scale = 1.0f;
  if (s.contractive) {
    // The scale is this codec's for the chunk, so the frame must be the chunk this layout and
    // these options make (a peer with other options would be scaled wrongly).
    const size_t tensorChunks =
        (h.tensorId + 1 < s.firstChunk.size() ? s.firstChunk[h.tensorId + 1] : s.chunks.size()) -
        s.firstChunk[h.tensorId];
    const Chunk* ch =
        h.chunkIndex < tensorChunks ? &s.chunks[s.firstChunk[h.tensorId] + h.chunkIndex] : nullptr;
    if (!ch || ch->offset != h.elementOffset || ch->elements != h.elementCount ||
        ch->compressor->method() != h.method) {
      return corrupt("chunk", "frame (tensor " + std::to_string(h.tensorId) + ", chunk " +
                                  std::to_string(h.chunkIndex) + ", " +
                                  std::string(methodName(h.method)) +
                                  ") is not a chunk this contractive codec makes");
    }
    scale = ch->decodeScale;
  }
  // Decompressed (or aligned) bytes go to decodeRaw when applied at once, else to the slot, kept
  // for applyChecked().
  if (!apply && s.checkSlots.size() <= slot) s.checkSlots.resize(slot + 1);
  AlignedBuffer& scratch = apply ? s.decodeRaw : s.checkSlots[slot];
  std::span<const uint8_t> payload = frame.subspan(kHeaderBytes, h.payloadLength);
  if (h.flags & (kFlagZstd | kFlagExponent)) {
    scratch.reserve(h.rawLength);  // bounded by limits.maxFrameBytes (parseFrame)
    std::span<uint8_t> raw(scratch.data(), h.rawLength);
    GV_RETURN_IF_ERROR(s.lossless.decompress(
        (h.flags & kFlagZstd) ? Lossless::kZstd : Lossless::kExponent, payload, raw));
    payload = raw;
  } else if ((reinterpret_cast<uintptr_t>(payload.data()) & 3u) != 0) {
    scratch.reserve(payload.size());  // the transport handed us a misaligned frame
    std::copy(payload.begin(), payload.end(), scratch.data());
    payload = {scratch.data(), payload.size()};
  }
  const size_t at = t.offset + h.elementOffset;
  if (apply) {
    GV_RETURN_IF_ERROR(
        decodePayload(h.method, payload, weight * scale, acc.subspan(at, h.elementCount), *s.ops));
  } else {
    GV_RETURN_IF_ERROR(checkPayload(h.method, payload, acc.subspan(at, h.elementCount), *s.ops));
  }
  CheckedFrame info;
  info.header = h;
  info.modelOffset = at;
  info.wireBytes = frame.size();
  info.scale = scale;
  info.payload = payload;
  return info;
}

size_t ModelCodec::elementCount() const { return s_->elements; }
size_t ModelCodec::tensorCount() const { return s_->layout.size(); }
const TensorLayout& ModelCodec::tensor(size_t i) const { return s_->layout.at(i); }
Method ModelCodec::methodOf(size_t i) const { return s_->methods.at(i); }
size_t ModelCodec::chunkCount() const { return s_->chunks.size(); }
size_t ModelCodec::maxFrameBytes() const { return s_->maxFrame; }
void ModelCodec::resetErrorFeedback() {
  for (Chunk& c : s_->chunks) c.compressor->resetState();
}

}  // namespace grapevine::compress
