// Shared by the fuzz targets of the algorithms' messages (fuzz_message_codec, fuzz_gt,
// fuzz_push_sum) and by make_corpus, which writes their seeds: a small model, the codec variants a
// mode byte picks, and the engine's own MessageCodec over them (engine::makeMessageCodec, the codec
// adapter: a message is the model's frames, each behind its u32 length).
#pragma once

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <vector>

#include "compress/options.h"
#include "runtime/algorithms/algorithm.h"
#include "runtime/config/config.h"
#include "runtime/engine/setup.h"
#include "runtime/train/tensor_info.h"

namespace grapevine::fuzz {

// A matrix, a bias and a vector; with kChunkElements the vector takes three frames, so a message
// has five (the adapter's split and its overlap check have something to do).
inline std::vector<train::TensorInfo> engineLayout() {
  return {{"w", {8, 6}, 0, 48}, {"b", {6}, 48, 6}, {"v", {300}, 54, 300}};
}
inline constexpr std::size_t kEngineModel = 354;
inline constexpr std::int64_t kChunkElements = 128;

// Who sent the messages, to whom, in which round (the frames carry sender and round, and the
// adapter refuses a frame of another sender or round).
inline constexpr int kSender = 1;
inline constexpr int kReceiver = 0;
inline constexpr std::uint64_t kRound = 7;

// The codec a mode's two low bits pick: exact fp32; top-k with zstd; int8; qsgd with the exponent
// coder... each decoder behind the adapter at least once.
inline config::Config codecConfig(algorithms::AlgorithmKind algorithm, unsigned variant) {
  config::Config c;
  c.algorithm.name = algorithm;
  c.compression.chunkElements = kChunkElements;
  c.compression.denseBelow = 16;
  switch (variant & 3) {
    case 0:
      c.compression.method = compress::Method::kNone;
      break;
    case 1:
      c.compression.method = compress::Method::kTopK;
      c.compression.ratio = 0.1;
      c.compression.lossless = compress::Lossless::kZstd;
      break;
    case 2:
      c.compression.method = compress::Method::kInt8;
      c.compression.blockSize = 64;
      break;
    default:
      c.compression.method = compress::Method::kQsgd;
      c.compression.lossless = compress::Lossless::kExponent;
      break;
  }
  return c;
}

// The codec of peer `rank` (a bug in the harness's config aborts).
inline std::unique_ptr<algorithms::MessageCodec> messageCodec(const config::Config& c, int rank) {
  auto codec = engine::makeMessageCodec(c, engineLayout(), rank);
  if (!codec.isOk()) std::abort();
  return std::move(codec).value();
}

}  // namespace grapevine::fuzz
