// libFuzzer target: the whole frame decoder (parseFrame + ModelCodec::decodeAccumulate, lossless
// stages included) on arbitrary bytes. Properties checked beyond "no crash, no sanitizer report":
// a rejected frame leaves the accumulator untouched, and an accepted one decodes the same twice.
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "compress/codec.h"
#include "compress/wire.h"
#include "fuzz/fuzz_common.h"

using namespace grapevine;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static compress::ModelCodec codec = [] {
    auto c = compress::ModelCodec::create(fuzz::fuzzLayout(), compress::Options{}, 0);
    if (!c.isOk()) std::abort();
    return std::move(c).value();
  }();
  compress::DecodeLimits limits;
  limits.max_frame_bytes = 1 << 20;
  limits.max_elements = 1 << 16;
  fuzz::AlignedCopy frame(data, size);
  std::vector<float> acc(fuzz::kFuzzModel, 0.5f);
  // checkFrame (every check, nothing added) must agree with decodeAccumulate and touch nothing.
  auto checked = codec.checkFrame({frame.data(), size}, acc, limits);
  for (float v : acc) {
    if (v != 0.5f) std::abort();
  }
  auto r = codec.decodeAccumulate({frame.data(), size}, 1.0f, acc, limits);
  if (checked.isOk() != r.isOk() ||
      (!r.isOk() && checked.status().toString() != r.status().toString())) {
    std::abort();
  }
  if (!r.isOk()) {
    for (float v : acc) {
      if (v != 0.5f) std::abort();  // a rejected frame must not touch acc
    }
    if (compress::errorReason(r.status()).empty()) std::abort();
    return 0;
  }
  std::vector<float> again(fuzz::kFuzzModel, 0.5f);
  if (!codec.decodeAccumulate({frame.data(), size}, 1.0f, again, limits).isOk()) std::abort();
  // Bitwise equal; skipped when empty (an empty vector's data() may be null: UB for memcmp).
  if (acc.size() > 0 && std::memcmp(acc.data(), again.data(), acc.size() * 4) != 0) std::abort();
  return 0;
}
