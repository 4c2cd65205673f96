// The algorithms' MessageCodec over compress::ModelCodec. A message is the sequence of a model's
// frames, each preceded by its length (u32, little-endian); every frame carries its own header and
// CRC32C and is checked in full before anything is accumulated.
//
// Receive once: PeerCore hands this codec only messages whose envelope CRC32C (over exactly these
// bytes) checked out (readEnvelope), so the frames' own CRC is not computed again
// (DecodeLimits::integrityVerified), and each frame is parsed and decompressed once: checkFrame()
// keeps what applyChecked() adds.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "compress/codec.h"
#include "kernels/ops.h"
#include "runtime/common/byte_order.h"
#include "runtime/engine/setup.h"

namespace grapevine::engine {
namespace {

class ModelMessageCodec final : public algorithms::MessageCodec {
 public:
  // `denseBytes`: what the same vector takes as dense fp32 frames (denseMessageBytes below).
  ModelMessageCodec(compress::ModelCodec codec, std::size_t denseBytes, std::uint64_t seed,
                    std::size_t maxFrameBytes)
      : codec_(std::move(codec)),
        seed_(seed),
        maxFrameBytes_(maxFrameBytes),
        denseBytes_(denseBytes) {
    maxBytes_ = codec_.chunkCount() * (4 + codec_.maxFrameBytes());
    exact_ = true;
    for (std::size_t t = 0; t < codec_.tensorCount(); ++t)
      exact_ = exact_ && codec_.methodOf(t) == compress::Method::kNone;
  }

  std::size_t maxMessageBytes() const override { return maxBytes_; }
  std::size_t denseBytes() const override { return denseBytes_; }

  bool exact() const override { return exact_; }

  Result<std::size_t> encodeAccumulate(std::span<const float> v, std::uint64_t round,
                                       std::span<std::uint8_t> out, std::span<float> acc) override {
    GV_ASSIGN_OR_RETURN(const std::size_t pos, encodeOnly(v, round, out));
    // Our own C(v), added exactly as every receiver adds it.
    GV_RETURN_IF_ERROR(applyFrames(out.first(pos), 1.0f, acc));
    return pos;
  }

  Result<std::size_t> encodeOnly(std::span<const float> v, std::uint64_t round,
                                 std::span<std::uint8_t> out) override {
    compress::EncodeContext ctx;
    ctx.round = round;
    ctx.seed = seed_;
    ctx.sequenceStart = sequence_;
    std::size_t pos = 0;
    auto r = codec_.encode(v, ctx, [&](std::span<const std::uint8_t> frame) -> Status {
      if (pos + 4 + frame.size() > out.size()) return internalError("message buffer too small");
      storeLe32(out.data() + pos, static_cast<std::uint32_t>(frame.size()));
      std::memcpy(out.data() + pos + 4, frame.data(), frame.size());
      pos += 4 + frame.size();
      return Status::ok();
    });
    if (!r.isOk()) return r.status();
    sequence_ = r->nextSequence;
    return pos;
  }

  Status decodeAccumulate(std::span<const std::uint8_t> message, std::uint64_t round, int sender,
                          float weight, std::span<float> acc, float maxDelta) override {
    // Check every frame completely first (checkFrame: header, CRC, layout, payload invariants;
    // nothing added), then add them all: a bad frame anywhere leaves acc unchanged, and the work
    // stays proportional to the payload (a top-1% message touches 1% of acc, no dense scratch).
    std::size_t pos = 0;
    std::size_t frames = 0;
    ranges_.clear();
    checked_.clear();
    compress::DecodeLimits verified = limits();
    verified.integrityVerified = true;
    while (pos < message.size()) {
      if (message.size() - pos < 4) return dataLoss("truncated: frame length");
      const std::uint32_t n = loadLe32(message.data() + pos);
      if (n > message.size() - pos - 4 || n > maxFrameBytes_)
        return dataLoss("truncated: frame of " + std::to_string(n) + " bytes");
      auto info = codec_.checkFrame(message.subspan(pos + 4, n), acc, verified, frames);
      if (!info.isOk()) return info.status();
      const compress::FrameHeader* header = &info->header;
      if (header->sender != static_cast<std::uint32_t>(sender) || header->round != round) {
        return dataLoss("mismatch: frame of sender " + std::to_string(header->sender) + " round " +
                        std::to_string(header->round) + " in a message of sender " +
                        std::to_string(sender) + " round " + std::to_string(round));
      }
      ranges_.emplace_back(info->modelOffset, header->elementCount);
      checked_.push_back(std::move(*info));
      pos += 4 + n;
      ++frames;
    }
    if (frames != codec_.chunkCount()) {
      return dataLoss("count: message has " + std::to_string(frames) + " frames, the model needs " +
                      std::to_string(codec_.chunkCount()));
    }
    // The right number of frames is not enough: one chunk sent twice (and another left out) must
    // not add twice into the same elements.
    std::sort(ranges_.begin(), ranges_.end());
    for (std::size_t i = 1; i < ranges_.size(); ++i) {
      if (ranges_[i].first < ranges_[i - 1].first + ranges_[i - 1].second) {
        return dataLoss("repeated: frames for elements " + std::to_string(ranges_[i - 1].first) +
                        ".." + std::to_string(ranges_[i - 1].first + ranges_[i - 1].second) +
                        " and " + std::to_string(ranges_[i].first) + ".. overlap");
      }
    }
    const float limit = maxDelta;
    if (!(limit > 0)) return applyChecked(weight, acc);
    // security.max_delta_ratio: add, measure the change, take it back when it is above the limit
    // (the sum is computed exactly as without the bound). A sparse frame (top-k, rand-k) records
    // the few elements it touches and their change as it adds (compress::SparseJournal); a dense
    // one keeps its range before and compares after.
    kept_.clear();
    dense_.clear();
    journal_.clear();
    Status st = Status::ok();
    float change = 0.0f;
    for (const auto& f : checked_) {
      if (compress::isSparseMethod(f.header.method)) {
        st = codec_.applyChecked(f, weight, acc, &journal_);
      } else {
        const std::size_t at = f.modelOffset, count = f.header.elementCount;
        dense_.emplace_back(at, count);
        kept_.insert(kept_.end(), acc.begin() + at, acc.begin() + at + count);
        st = codec_.applyChecked(f, weight, acc);
        // The change, max |now - was| in one pass (kernels' maxAbsDiff: NaN, from inf - inf,
        // propagates and refuses).
        const float m = kernels::cpuOps().maxAbsDiff(acc.data() + at,
                                                     kept_.data() + kept_.size() - count, count);
        if (!(m <= change)) change = m;
      }
      if (!st.isOk()) break;
    }
    const float sparse = journal_.maxChange();
    if (!(sparse <= change)) change = sparse;
    if (st.isOk() && !(change <= limit)) st = algorithms::magnitudeRefused(change, limit);
    if (!st.isOk()) {
      std::size_t k = 0;
      for (const auto& [at, count] : dense_) {
        std::copy(kept_.begin() + k, kept_.begin() + k + count, acc.begin() + at);
        k += count;
      }
      for (auto it = journal_.before.rbegin(); it != journal_.before.rend(); ++it)
        acc[it->first] = it->second;
    }
    return st;
  }

 private:
  compress::DecodeLimits limits() const {
    compress::DecodeLimits l;
    l.maxFrameBytes = maxFrameBytes_;
    l.maxElements = codec_.elementCount();
    return l;
  }

  // Adds every frame decodeAccumulate checked (checked_), in message order.
  Status applyChecked(float weight, std::span<float> acc) {
    for (const auto& f : checked_) GV_RETURN_IF_ERROR(codec_.applyChecked(f, weight, acc));
    return Status::ok();
  }

  // Adds every frame of our own message (checked and decoded in one pass). The frames were
  // written here a moment ago: their CRC is not computed again (it would be a second pass over
  // the whole message every round, for bytes that never left this memory).
  Status applyFrames(std::span<const std::uint8_t> message, float weight, std::span<float> acc) {
    compress::DecodeLimits own = limits();
    own.integrityVerified = true;
    std::size_t pos = 0;
    while (pos < message.size()) {
      const std::uint32_t n = loadLe32(message.data() + pos);
      GV_RETURN_IF_ERROR(
          codec_.decodeAccumulate(message.subspan(pos + 4, n), weight, acc, own).status());
      pos += 4 + n;
    }
    return Status::ok();
  }

  compress::ModelCodec codec_;
  std::uint64_t seed_;
  std::size_t maxFrameBytes_;
  std::size_t maxBytes_ = 0;
  std::size_t denseBytes_ = 0;
  bool exact_ = false;  // every tensor dense fp32 (MessageCodec::exact)
  std::uint64_t sequence_ = 0;
  std::vector<std::pair<std::size_t, std::size_t>> ranges_;  // (offset, count) of each frame
  std::vector<compress::CheckedFrame> checked_;              // the frames of the message, checked
  // A bounded decode (maxDelta): acc's values in the dense frames' ranges (dense_) before, and
  // what the sparse frames touched.
  std::vector<float> kept_;
  std::vector<std::pair<std::size_t, std::size_t>> dense_;  // (offset, count)
  compress::SparseJournal journal_;
};

// Bytes a message of the same layout takes as dense fp32 frames (with their length prefixes): the
// reference for bytes_dense_equivalent. Measured by encoding zeros once.
Result<std::size_t> denseMessageBytes(const std::vector<compress::TensorLayout>& layout,
                                      const compress::Options& options, int rank) {
  compress::Options dense;
  dense.method = compress::Method::kNone;
  dense.chunkElements = options.chunkElements;
  dense.maxFrameBytes = options.maxFrameBytes;
  GV_ASSIGN_OR_RETURN(
      auto codec, compress::ModelCodec::create(layout, dense, static_cast<std::uint32_t>(rank)));
  std::vector<float> zeros(codec.elementCount(), 0.0f);
  compress::EncodeContext ctx;
  GV_ASSIGN_OR_RETURN(
      const auto summary,
      codec.encode(zeros, ctx, [](std::span<const std::uint8_t>) { return Status::ok(); }));
  return codec.chunkCount() * 4 + summary.wireBytes;
}

}  // namespace

Result<compress::Options> compressOptions(const config::Config& c) {
  compress::Options o;
  o.method = c.compression.method;
  o.fallback = c.compression.fallback;
  o.selector = c.compression.selector;
  o.explore = c.compression.explore;
  o.rounding = c.compression.rounding;
  o.lossless = c.compression.lossless;
  o.ratio = c.compression.ratio;
  o.levels = static_cast<std::uint32_t>(c.compression.levels);
  o.rank = static_cast<std::uint32_t>(c.compression.rank);
  o.blockSize = static_cast<std::size_t>(c.compression.blockSize);
  o.unbiased = c.compression.unbiased;
  o.errorFeedback = c.compression.errorFeedback;
  o.zstdLevel = c.compression.zstdLevel;
  o.denseBelow = static_cast<std::size_t>(c.compression.denseBelow);
  o.chunkElements = static_cast<std::size_t>(c.compression.chunkElements);
  o.maxFrameBytes = static_cast<std::size_t>(c.transport.maxFrameBytes);
  GV_RETURN_IF_ERROR(compress::validate(o));
  return o;
}

Result<std::unique_ptr<algorithms::MessageCodec>> makeMessageCodec(
    const config::Config& c, const std::vector<train::TensorInfo>& layout, int rank) {
  std::vector<compress::TensorLayout> tl;
  for (const auto& t : layout) {
    compress::TensorLayout x;
    x.name = t.name;
    for (auto d : t.shape) x.shape.push_back(static_cast<std::size_t>(d));
    x.offset = t.offset;
    x.count = t.count;
    tl.push_back(std::move(x));
  }
  // Push-sum sends (x, w) shares: one more value after the model (algorithms::PushSum).
  if (c.algorithm.name == algorithms::AlgorithmKind::kPushSum && !tl.empty()) {
    compress::TensorLayout w;
    w.name = std::string(algorithms::kPushSumWeightTensor);
    w.shape = {1};
    for (const auto& t : tl) w.offset = std::max(w.offset, t.offset + t.count);
    w.count = 1;
    tl.push_back(std::move(w));
  }
  GV_ASSIGN_OR_RETURN(auto o, compressOptions(c));
  // D-PSGD exchanges full models: always exact fp32 (the config validator refuses other methods).
  if (c.algorithm.name == algorithms::AlgorithmKind::kDsgd) o.method = compress::Method::kNone;
  // CHOCO's public copies, and DeepSqueeze's error e <- v - C(v), stay bounded only under a
  // contractive compressor: unbiased methods (qsgd, unbiased rand-k, stochastic int8/int4) are
  // decoded as C/(1 + omega) (compress::Options::contractive; every peer derives the same factor
  // from the same config, nothing on the wire). Unscaled, qsgd diverges with both.
  if (c.algorithm.name != algorithms::AlgorithmKind::kDsgd) o.contractive = true;
  GV_ASSIGN_OR_RETURN(auto codec,
                      compress::ModelCodec::create(tl, o, static_cast<std::uint32_t>(rank)));
  GV_ASSIGN_OR_RETURN(const std::size_t denseBytes, denseMessageBytes(tl, o, rank));
  return std::unique_ptr<algorithms::MessageCodec>(
      new ModelMessageCodec(std::move(codec), denseBytes, c.run.seed, o.maxFrameBytes));
}

}  // namespace grapevine::engine
