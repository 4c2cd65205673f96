#include "compress/options.h"

#include <array>
#include <string>

namespace grapevine::compress {
namespace {

// In the order configs, docs and "valid: ..." messages list them (dense, then sparse, then
// quantized, then low-rank); the wire ids are the enum's values, not positions here.
constexpr std::array<NamedValue<Method>, kMethodCount> kMethods = {{
    {"none", Method::kNone, "fp32, exact"},
    {"fp16", Method::kFp16, "IEEE half, round to nearest even, saturating"},
    {"bf16", Method::kBf16, "bfloat16, round to nearest even, saturating"},
    {"top-k", Method::kTopK, "k largest magnitudes, indices delta-varint or bitmap"},
    {"rand-k", Method::kRandK, "k positions from a shared seed, values only"},
    {"qsgd", Method::kQsgd, "QSGD with s levels, stochastic rounding, unbiased"},
    {"int8", Method::kInt8, "8-bit block quantization, one scale per block"},
    {"int4", Method::kInt4, "4-bit block quantization, one scale per block"},
    {"sign", Method::kSign, "1 bit per element plus mean |x| per block"},
    {"low-rank", Method::kLowRank, "PowerSGD rank-r for matrices, fallback for the rest"},
}};
constexpr std::array<NamedValue<Lossless>, 3> kLossless = {{
    {"none", Lossless::kNone, "no lossless stage"},
    {"zstd", Lossless::kZstd, "zstd over the payload, when it pays"},
    {"exponent", Lossless::kExponent,
     "entropy-coded exponent plane of float payloads, when it pays"},
}};
constexpr std::array<NamedValue<Selector>, 2> kSelectors = {{
    {"exact", Selector::kExact, "exactly k, ties to the lowest index"},
    {"approx", Selector::kApprox, "sampled threshold, one pass, count within slack of k"},
}};
constexpr std::array<NamedValue<Rounding>, 2> kRoundings = {{
    {"nearest", Rounding::kNearest, "round to nearest even (biased)"},
    {"stochastic", Rounding::kStochastic, "stochastic rounding (unbiased)"},
}};

template <typename E, size_t N>
std::string_view nameOf(const std::array<NamedValue<E>, N>& table, E v) {
  for (const auto& e : table) {
    if (e.value == v) return e.name;
  }
  return "?";
}

template <typename E, size_t N>
Result<E> parse(const std::array<NamedValue<E>, N>& table, std::string_view what,
                std::string_view name) {
  std::string valid;
  for (const auto& e : table) {
    if (e.name == name) return e.value;
    if (!valid.empty()) valid += ", ";
    valid += e.name;
  }
  return invalidArgument("unknown " + std::string(what) + " '" + std::string(name) +
                         "' (valid: " + valid + ")");
}

}  // namespace

std::span<const NamedValue<Method>> methodNames() { return kMethods; }
std::span<const NamedValue<Lossless>> losslessNames() { return kLossless; }
std::span<const NamedValue<Selector>> selectorNames() { return kSelectors; }
std::span<const NamedValue<Rounding>> roundingNames() { return kRoundings; }
std::string_view methodName(Method m) { return nameOf(kMethods, m); }
std::string_view losslessName(Lossless l) { return nameOf(kLossless, l); }
std::string_view selectorName(Selector s) { return nameOf(kSelectors, s); }
std::string_view roundingName(Rounding r) { return nameOf(kRoundings, r); }
Result<Method> parseMethod(std::string_view n) { return parse(kMethods, "method", n); }
Result<Lossless> parseLossless(std::string_view n) { return parse(kLossless, "lossless stage", n); }
Result<Selector> parseSelector(std::string_view n) { return parse(kSelectors, "selector", n); }
Result<Rounding> parseRounding(std::string_view n) { return parse(kRoundings, "rounding", n); }

bool isFallbackMethod(Method m) {
  return m != Method::kLowRank && static_cast<uint8_t>(m) < kMethodCount;
}

int effectiveBits(const Options& o) {
  if (o.method == Method::kInt8) return 8;
  if (o.method == Method::kInt4) return 4;
  return o.bits;
}

Status validate(const Options& o) {
  if (static_cast<uint8_t>(o.method) >= kMethodCount) return invalidArgument("method: unknown id");
  if (!(o.ratio > 0.0 && o.ratio <= 1.0)) {
    return invalidArgument("ratio must be in (0, 1], got " + std::to_string(o.ratio));
  }
  if ((o.method == Method::kInt8 || o.method == Method::kInt4) && o.bits != 0 &&
      o.bits != effectiveBits(o)) {
    return invalidArgument("bits " + std::to_string(o.bits) + " contradicts method " +
                           std::string(methodName(o.method)));
  }
  if (o.bits != 0 && o.bits != 8 && o.bits != 4) {
    return invalidArgument("bits must be 8 or 4 (or 0 for the method's default), got " +
                           std::to_string(o.bits));
  }
  if (o.blockSize < 64 || o.blockSize > 4096 || o.blockSize % 64 != 0) {
    return invalidArgument("block_size must be a multiple of 64 in [64, 4096], got " +
                           std::to_string(o.blockSize));
  }
  if (o.levels < 1 || o.levels > 32767) {
    return invalidArgument("levels (qsgd s) must be in [1, 32767], got " +
                           std::to_string(o.levels));
  }
  if (o.rank < 1 || o.rank > 256) {
    return invalidArgument("rank must be in [1, 256], got " + std::to_string(o.rank));
  }
  if (!isFallbackMethod(o.fallback)) {
    return invalidArgument("fallback must be a method other than low-rank");
  }
  if (!(o.explore >= 0.0 && o.explore <= 0.9)) {
    return invalidArgument("explore must be in [0, 0.9], got " + std::to_string(o.explore));
  }
  if (!(o.slack >= 0.0 && o.slack <= 0.5)) {
    return invalidArgument("slack must be in [0, 0.5], got " + std::to_string(o.slack));
  }
  if (o.zstdLevel < 1 || o.zstdLevel > 19) {
    return invalidArgument("zstd_level must be in [1, 19], got " + std::to_string(o.zstdLevel));
  }
  if (o.chunkElements < 64 || o.chunkElements > (size_t{1} << 30)) {
    return invalidArgument("chunk_elements must be in [64, 2^30], got " +
                           std::to_string(o.chunkElements));
  }
  if (o.maxFrameBytes < 4096 || o.maxFrameBytes > (size_t{1} << 32) - 1) {
    return invalidArgument("max_frame_bytes must be in [4096, 2^32 - 1], got " +
                           std::to_string(o.maxFrameBytes));
  }
  return Status::ok();
}

}  // namespace grapevine::compress
