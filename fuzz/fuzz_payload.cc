// libFuzzer target for one method's payload decoder, chosen at compile time (GV_FUZZ_METHOD), so
// each method gets its own binary and corpus. Input: see fuzz_common.h. A rejected payload must
// leave the accumulator untouched; an accepted one must be deterministic; checkPayload must agree
// with decodePayload on every input and touch nothing.
#include <cstdlib>
#include <cstring>
#include <vector>

#include "compress/compressor.h"
#include "compress/wire.h"
#include "fuzz/fuzz_common.h"

using namespace grapevine;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < fuzz::kPayloadPrefix) return 0;
  const size_t n = (size_t{data[0]} | (size_t{data[1]} << 8)) % 4097;
  const float w = fuzz::fuzzWeight(data[2]);
  fuzz::AlignedCopy payload(data + fuzz::kPayloadPrefix, size - fuzz::kPayloadPrefix);
  const auto method = static_cast<compress::Method>(GV_FUZZ_METHOD);
  std::vector<float> acc(n, 0.25f);
  // checkPayload (all checks, nothing added) must give exactly decodePayload's verdict.
  const Status checked = compress::checkPayload(method, {payload.data(), payload.size}, acc);
  for (float v : acc) {
    if (v != 0.25f) std::abort();
  }
  Status s = compress::decodePayload(method, {payload.data(), payload.size}, w, acc);
  if (checked.toString() != s.toString()) std::abort();
  if (!s.isOk()) {
    for (float v : acc) {
      if (v != 0.25f) std::abort();
    }
    if (compress::errorReason(s).empty()) std::abort();
    return 0;
  }
  std::vector<float> again(n, 0.25f);
  if (!compress::decodePayload(method, {payload.data(), payload.size}, w, again).isOk())
    std::abort();
  // Bitwise equal; skipped when empty (an empty vector's data() may be null: UB for memcmp).
  if (n > 0 && std::memcmp(acc.data(), again.data(), n * 4) != 0) std::abort();
  return 0;
}
