// libFuzzer target: gradient tracking's two-part message (runtime/algorithms/algorithms.cc, class
// Gt: [u32 LE bytes of part 1][part 1: x][part 2: y], each part a codec adapter message), received
// as the engine hands it over (Algorithm::receive) by a gt peer with the engine's own codec
// (codec_adapter.cc compiled in).
//
// Input: u8 mode | message. Mode bits 0-1: the codec variant (fuzz_engine.h); variant 0 (exact
// fp32) is uncompressed gt (DIGing: this round's x_j and y_j replace the neighbour's slot), the
// others compressed gt (BEER: deltas added to the neighbour's replica). Bit 2: fix up the CRC32C
// of every frame in both parts first (the split by part 1's length, then fuzz::fixMessageCrcs), so
// that mutations reach the checks behind the CRCs.
// Properties beyond "no crash, no sanitizer report": receive's verdict is exactly "the length
// prefix fits and both parts decode" by a separate codec; a message refused by its length or its
// first part leaves the (compressed) replica as it was, as gt's class comment promises (a refused
// second part may leave it half-updated: the engine then resyncs it); an accepted message gives
// the same replica and the same mix on a second peer that receives it.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "fuzz/fuzz_common.h"
#include "fuzz/fuzz_engine.h"
#include "runtime/common/byte_order.h"

using namespace grapevine;

namespace {

std::unique_ptr<algorithms::Algorithm> gtPeer(const config::Config& c, bool compressed) {
  algorithms::AlgorithmOptions o;
  o.kind = algorithms::AlgorithmKind::kGt;
  o.consensusStep = 0.4;
  o.compressed = compressed;
  const std::vector<int> neighbours = {fuzz::kSender, 2};
  auto a = algorithms::makeAlgorithm(o, fuzz::kEngineModel, neighbours,
                                     fuzz::messageCodec(c, fuzz::kReceiver));
  if (!a.isOk()) std::abort();
  return std::move(a).value();
}

// x after mixing with the sender at weight 0.5 (what the received message contributes).
std::vector<float> mixed(algorithms::Algorithm& gt) {
  std::vector<float> x(fuzz::kEngineModel, 1.0f);
  algorithms::MixWeights w;
  w.neighbours = {{fuzz::kSender, 0.5}};
  gt.mix(x, w);
  return x;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const unsigned variant = data[0] & 3;
  const bool compressed = variant != 0;
  const bool fixup = data[0] & 4;
  static std::unique_ptr<algorithms::MessageCodec> checkers[4];
  auto& checker = checkers[variant];
  const config::Config c = fuzz::codecConfig(algorithms::AlgorithmKind::kGt, variant);
  if (!checker) checker = fuzz::messageCodec(c, fuzz::kReceiver);

  fuzz::AlignedCopy m(data + 1, size - 1);
  const std::span<const std::uint8_t> message(m.data(), m.size);
  // The split, as Gt::apply makes it.
  const bool lengthOk = m.size >= 4 && loadLe<std::uint32_t>(m.data()) <= m.size - 4;
  const std::size_t n1 = lengthOk ? loadLe<std::uint32_t>(m.data()) : 0;
  if (fixup && lengthOk) {
    fuzz::fixMessageCrcs(m.bytes().subspan(4, n1));
    fuzz::fixMessageCrcs(m.bytes().subspan(4 + n1));
  }

  auto gt = gtPeer(c, compressed);
  const std::uint64_t before = gt->replicaHash(fuzz::kSender);
  const Status st = gt->receive(fuzz::kSender, 0.5, message, fuzz::kRound, 0.0f);

  bool firstOk = false, secondOk = false;
  if (lengthOk) {
    std::vector<float> scratch(fuzz::kEngineModel, 0.0f);
    firstOk = checker
                  ->decodeAccumulate(message.subspan(4, n1), fuzz::kRound, fuzz::kSender, 1.0f,
                                     scratch, 0.0f)
                  .isOk();
    secondOk = firstOk && checker
                              ->decodeAccumulate(message.subspan(4 + n1), fuzz::kRound,
                                                 fuzz::kSender, 1.0f, scratch, 0.0f)
                              .isOk();
  }
  if (st.isOk() != secondOk) std::abort();
  if (!st.isOk()) {
    if (st.message().empty()) std::abort();
    if (!firstOk && gt->replicaHash(fuzz::kSender) != before) std::abort();
    return 0;
  }
  auto twin = gtPeer(c, compressed);
  if (!twin->receive(fuzz::kSender, 0.5, message, fuzz::kRound, 0.0f).isOk()) std::abort();
  if (twin->replicaHash(fuzz::kSender) != gt->replicaHash(fuzz::kSender)) std::abort();
  const auto x = mixed(*gt);
  const auto y = mixed(*twin);
  if (std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) != 0) std::abort();
  return 0;
}
