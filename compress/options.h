// Compression options: one plain struct the engine fills from the config, the name tables the
// config schema and the CLI print, and validate() with readable messages.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "kernels/ops.h"
#include "runtime/common/status.h"

namespace grapevine::compress {

using kernels::Rounding;
using kernels::Selector;

// Wire method ids: stable, part of the frame format (docs/wire-format.md). Append only.
enum class Method : uint8_t {
  kNone = 0,  // fp32, exact
  kFp16 = 1,
  kBf16 = 2,
  kInt8 = 3,  // block quantization, 8 bits
  kInt4 = 4,  // block quantization, 4 bits
  kSign = 5,  // 1 bit + mean |x| per block
  kTopK = 6,
  kRandK = 7,
  kQsgd = 8,
  kLowRank = 9,  // PowerSGD rank-r, matrices only (others use Options::fallback)
};
inline constexpr uint8_t kMethodCount = 10;

enum class Lossless : uint8_t { kNone = 0, kZstd = 1, kExponent = 2 };

template <typename E>
struct NamedValue {
  std::string_view name;
  E value;
  std::string_view doc;
};

std::span<const NamedValue<Method>> methodNames();
std::span<const NamedValue<Lossless>> losslessNames();
std::span<const NamedValue<Selector>> selectorNames();
std::span<const NamedValue<Rounding>> roundingNames();

std::string_view methodName(Method m);  // "?" for an unknown id
std::string_view losslessName(Lossless l);
std::string_view selectorName(Selector s);
std::string_view roundingName(Rounding r);

// Parse a name from the tables above; the error message lists the valid names.
Result<Method> parseMethod(std::string_view name);
Result<Lossless> parseLossless(std::string_view name);
Result<Selector> parseSelector(std::string_view name);
Result<Rounding> parseRounding(std::string_view name);

// The defaults are the config's (compression.*, runtime/config/config.h; max_frame_bytes is
// transport.max_frame_bytes), so a test built from Options{} runs with what a real run uses;
// tests/config/library_defaults_test.cc fails when they differ. bits, slack and contractive are not
// config keys.
struct Options {
  Method method = Method::kNone;
  double ratio = 0.05;     // top-k / rand-k: k = max(1, round(ratio * n)) per chunk
  int bits = 0;            // block quantization width: 0 = from method (int8 -> 8, int4 -> 4)
  size_t blockSize = 256;  // int8/int4/sign: elements per scale, multiple of 64 in [64, 4096]
  uint32_t levels = 16;    // qsgd s (levels per sign), 1..32767
  uint32_t rank = 2;       // low-rank r
  Method fallback = Method::kTopK;        // low-rank: method for tensors that are not matrices
  Selector selector = Selector::kApprox;  // top-k
  double slack = 0.05;                    // top-k approx: accepted |count - k| / k
  // top-k: the share of the k values spent on positions drawn at random among the others
  // (Slim-DP's exploration set, Zhu et al. 2018): round(explore * k) random, the rest the largest.
  // Same bytes as plain top-k; the receiver decodes it as any top-k payload. 0: plain top-k.
  double explore = 0.0;
  bool unbiased = false;                   // rand-k: scale kept values by n/k (per stratum)
  Rounding rounding = Rounding::kNearest;  // int8/int4
  bool errorFeedback = false;
  // Decode an unbiased method's C(x) (qsgd, rand-k with unbiased, int8/int4 stochastic) as
  // C(x) / (1 + omega), omega its variance factor for the chunk's element count
  // (Compressor::properties): the scaled operator is a contraction with delta = 1/(1 + omega),
  // which CHOCO needs (Koloskova et al. 2019; unscaled, a method with omega >= 1 makes the public
  // copies diverge). Not a config key: the engine sets it for algorithm.name choco. The sender's
  // self-decode and every receiver derive the same factor from their (identical) layout and
  // options; the wire format is unchanged. Biased methods are decoded as before.
  bool contractive = false;
  Lossless lossless = Lossless::kNone;
  int zstdLevel = 3;                        // 1..19 (zstd and the exponent coder's exponent plane)
  size_t denseBelow = 1024;                 // tensors with fewer elements are sent `none`
  size_t maxFrameBytes = size_t{64} << 20;  // encoder refuses layouts whose frames could exceed it
  size_t chunkElements = size_t{1} << 20;   // tensors are cut into chunks of at most this many
};

// Whether low-rank may use `m` for tensors that are not matrices (Options::fallback): any method
// but low-rank itself.
bool isFallbackMethod(Method m);

// Checks ranges and combinations; the message names the field and the allowed range.
Status validate(const Options& options);

// The block-quantization width implied by options (8 for int8, 4 for int4, else `bits`).
int effectiveBits(const Options& options);

}  // namespace grapevine::compress
