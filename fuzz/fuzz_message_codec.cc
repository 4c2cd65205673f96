// libFuzzer target: the codec adapter's decode (runtime/engine/codec_adapter.cc,
// MessageCodec::decodeAccumulate): the split of a message into its length-prefixed frames, every
// frame checked (ModelCodec::checkFrame) and matched against the message's sender and round, the
// frame count, the overlap check, then all frames added, and with security.max_delta_ratio the
// bound on the change (restored when above it). codec_adapter.cc is compiled in, not all of
// grapevine_engine.
//
// Input: u8 mode | message. Mode bits 0-1: the codec variant (fuzz_engine.h); bit 2: a delta
// limit of 0.5; bit 3: fix up every frame's CRC32C first (fuzz::fixMessageCrcs), so mutations of a
// frame's header reach the checks behind the CRC: the sender and round match, the count, overlaps.
// Properties beyond "no crash, no sanitizer report": a refused message leaves the accumulator
// bitwise unchanged (the delta limit's restore included) and says why; an accepted one is a whole
// sequence of frames, decodes the same twice, and with the limit changes no value by more than
// the limit. (The adapter does not check the frames' own CRC32C: PeerCore hands it only messages
// whose envelope CRC over the same bytes matched, DecodeLimits::integrityVerified. So a frame
// with a wrong CRC may be accepted here; every other check still holds it.)
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "fuzz/fuzz_common.h"
#include "fuzz/fuzz_engine.h"

using namespace grapevine;

namespace {

constexpr float kLimit = 0.5f;

std::vector<float> startingValues() {
  std::vector<float> v(fuzz::kEngineModel);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = 0.25f * static_cast<float>(i % 7) - 0.5f;
  return v;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  static std::unique_ptr<algorithms::MessageCodec> codecs[2][4];
  const unsigned variant = data[0] & 3;
  const bool bounded = data[0] & 4;
  const bool fixup = data[0] & 8;
  auto& codec = codecs[bounded][variant];
  if (!codec) {
    codec = fuzz::messageCodec(fuzz::codecConfig(algorithms::AlgorithmKind::kChoco, variant),
                               fuzz::kReceiver);
  }
  fuzz::AlignedCopy message(data + 1, size - 1);
  if (fixup) fuzz::fixMessageCrcs(message.bytes());

  static const std::vector<float> start = startingValues();
  std::vector<float> acc = start;
  const float limit = bounded ? kLimit : 0.0f;
  const Status st = codec->decodeAccumulate({message.data(), message.size}, fuzz::kRound,
                                            fuzz::kSender, 1.0f, acc, limit);
  if (!st.isOk()) {
    if (st.message().empty()) std::abort();
    if (std::memcmp(acc.data(), start.data(), acc.size() * sizeof(float)) != 0) std::abort();
    return 0;
  }
  // Accepted: whole frames (their CRCs are the envelope's business, see above).
  fuzz::AlignedCopy fixed(message.data(), message.size);
  if (fuzz::fixMessageCrcs(fixed.bytes()) != message.size) std::abort();
  std::vector<float> again = start;
  if (!codec
           ->decodeAccumulate({message.data(), message.size}, fuzz::kRound, fuzz::kSender, 1.0f,
                              again, limit)
           .isOk() ||
      std::memcmp(acc.data(), again.data(), acc.size() * sizeof(float)) != 0) {
    std::abort();
  }
  if (bounded) {
    for (std::size_t i = 0; i < acc.size(); ++i) {
      if (!(std::fabs(acc[i] - start[i]) <= kLimit)) std::abort();
    }
  }
  return 0;
}
