// libFuzzer target: the whole frame decoder (parseFrame + ModelCodec::decodeAccumulate, lossless
// stages included) on arbitrary bytes. Each input is decoded twice: as it is, and with its header
// CRC32C rewritten to match its bytes (fuzz::fixFrameCrc), so that mutations reach the checks
// behind the CRC (lengths against the layout, flags, method, payload invariants, the lossless
// stages) and not only the seeds do. Properties checked beyond "no crash, no sanitizer report", on
// both: checkFrame agrees with decodeAccumulate and touches nothing, a rejected frame leaves the
// accumulator untouched with a stable reason, and an accepted one decodes the same twice; and an
// input whose CRC already matched is unchanged by the fix-up.
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "compress/codec.h"
#include "compress/wire.h"
#include "fuzz/fuzz_common.h"

using namespace grapevine;

namespace {

// Returns whether the frame was accepted.
bool decodeChecked(compress::ModelCodec& codec, std::span<const uint8_t> frame) {
  compress::DecodeLimits limits;
  limits.maxFrameBytes = 1 << 20;
  limits.maxElements = 1 << 16;
  std::vector<float> acc(fuzz::kFuzzModel, 0.5f);
  // checkFrame (every check, nothing added) must agree with decodeAccumulate and touch nothing.
  auto checked = codec.checkFrame(frame, acc, limits);
  for (float v : acc) {
    if (v != 0.5f) std::abort();
  }
  auto r = codec.decodeAccumulate(frame, 1.0f, acc, limits);
  if (checked.isOk() != r.isOk() ||
      (!r.isOk() && checked.status().toString() != r.status().toString())) {
    std::abort();
  }
  if (!r.isOk()) {
    for (float v : acc) {
      if (v != 0.5f) std::abort();  // a rejected frame must not touch acc
    }
    if (compress::errorReason(r.status()).empty()) std::abort();
    return false;
  }
  std::vector<float> again(fuzz::kFuzzModel, 0.5f);
  if (!codec.decodeAccumulate(frame, 1.0f, again, limits).isOk()) std::abort();
  // Bitwise equal; skipped when empty (an empty vector's data() may be null: UB for memcmp).
  if (acc.size() > 0 && std::memcmp(acc.data(), again.data(), acc.size() * 4) != 0) std::abort();
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static compress::ModelCodec codec = [] {
    auto c = compress::ModelCodec::create(fuzz::fuzzLayout(), compress::Options{}, 0);
    if (!c.isOk()) std::abort();
    return std::move(c).value();
  }();
  fuzz::AlignedCopy frame(data, size);
  const bool accepted = decodeChecked(codec, {frame.data(), size});
  // The CRC fix-up pass (in place: the copy is ours).
  fuzz::fixFrameCrc(frame.bytes());
  const bool same = size == 0 || std::memcmp(frame.data(), data, size) == 0;
  if (accepted && !same) std::abort();  // an accepted frame's CRC matched already
  if (!same) decodeChecked(codec, {frame.data(), size});
  return 0;
}
