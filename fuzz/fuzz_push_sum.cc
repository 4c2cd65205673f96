// libFuzzer target: push-sum's messages (runtime/algorithms/algorithms.cc, class PushSum: a share
// of the model followed by the share of the push-sum weight, one codec adapter message whose
// layout ends with the push_sum_weight tensor), received by a push-sum peer with the engine's own
// codec (codec_adapter.cc compiled in), in its round or late, then mixed.
//
// Input: u8 mode | message. Mode bits 0-1: the codec variant (fuzz_engine.h); bit 2: overlapped
// push-sum (algorithm.overlap_rounds 2: a share is mixed two rounds after it was sent); bit 3: the
// message arrives late (receiveLate, a round behind; the engine does that for a suspect neighbour's
// share); bit 4: fix up every frame's CRC32C first (fuzz::fixMessageCrcs).
// Properties beyond "no crash, no sanitizer report": a refused message changes no state (every
// buffer of state() bitwise as before) and says why; an accepted share is mixed exactly once:
// after the mix that takes it the push-sum weight is the peer's own kept share (what a peer that
// received nothing ends with) plus the message's weight share (decoded by a separate codec), once;
// a share not due yet adds nothing; a second peer that receives it ends in the same state.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "fuzz/fuzz_common.h"
#include "fuzz/fuzz_engine.h"

using namespace grapevine;

namespace {

using State = std::vector<std::pair<std::string, std::vector<float>>>;

bool sameState(const State& a, const State& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a[i].first != b[i].first || a[i].second.size() != b[i].second.size()) return false;
    if (!a[i].second.empty() && std::memcmp(a[i].second.data(), b[i].second.data(),
                                            a[i].second.size() * sizeof(float)) != 0) {
      return false;
    }
  }
  return true;
}

const std::vector<float>& buffer(const State& s, const std::string& name) {
  for (const auto& [n, v] : s) {
    if (n == name) return v;
  }
  std::abort();
}

// A push-sum peer after its own prepare() of round kRound (one recipient: it keeps half).
std::unique_ptr<algorithms::Algorithm> pushSumPeer(const config::Config& c, int overlap) {
  algorithms::AlgorithmOptions o;
  o.kind = algorithms::AlgorithmKind::kPushSum;
  o.overlapRounds = overlap;
  const std::vector<int> neighbours = {fuzz::kSender, 2};
  auto a = algorithms::makeAlgorithm(o, fuzz::kEngineModel, neighbours,
                                     fuzz::messageCodec(c, fuzz::kReceiver));
  if (!a.isOk()) std::abort();
  std::vector<float> z(fuzz::kEngineModel);
  for (std::size_t i = 0; i < z.size(); ++i) z[i] = static_cast<float>(i % 5) - 2.0f;
  std::vector<std::uint8_t> out((*a)->maxMessageBytes());
  const int to[] = {fuzz::kSender};
  (*a)->setRecipients(to);
  if (!(*a)->prepare(z, fuzz::kRound, out).isOk()) std::abort();
  return std::move(a).value();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const unsigned variant = data[0] & 3;
  const int overlap = (data[0] & 4) ? 2 : 0;
  const bool late = data[0] & 8;
  const bool fixup = data[0] & 16;
  const config::Config c = fuzz::codecConfig(algorithms::AlgorithmKind::kPushSum, variant);
  static std::unique_ptr<algorithms::MessageCodec> checkers[4];
  auto& checker = checkers[variant];
  if (!checker) checker = fuzz::messageCodec(c, fuzz::kReceiver);

  fuzz::AlignedCopy m(data + 1, size - 1);
  if (fixup) fuzz::fixMessageCrcs(m.bytes());
  const std::span<const std::uint8_t> message(m.data(), m.size);
  const std::uint64_t round = late ? fuzz::kRound - 1 : fuzz::kRound;

  auto peer = pushSumPeer(c, overlap);
  const State before = peer->state();
  const Status st = late ? peer->receiveLate(fuzz::kSender, message, round, 0.0f)
                         : peer->receive(fuzz::kSender, 0.5, message, round, 0.0f);
  if (!st.isOk()) {
    if (st.message().empty()) std::abort();
    if (!sameState(peer->state(), before)) std::abort();
    return 0;
  }
  // The message's share of the weight, decoded apart (the layout's last value).
  std::vector<float> share(fuzz::kEngineModel + 1, 0.0f);
  if (!checker->decodeAccumulate(message, round, fuzz::kSender, 1.0f, share, 0.0f).isOk())
    std::abort();
  auto twin = pushSumPeer(c, overlap);
  if (!(late ? twin->receiveLate(fuzz::kSender, message, round, 0.0f)
             : twin->receive(fuzz::kSender, 0.5, message, round, 0.0f))
           .isOk()) {
    std::abort();
  }
  // The engine's mix of round kRound takes the shares of rounds <= kRound - overlap.
  algorithms::MixWeights due;
  due.dueRound = static_cast<std::int64_t>(fuzz::kRound) - overlap;
  std::vector<float> z(fuzz::kEngineModel, 0.0f);
  peer->mix(z, due);
  twin->mix(z, due);
  const State after = peer->state();
  if (!sameState(after, twin->state())) std::abort();
  // The weight a peer keeps of its own (its share as decoded), from one that received nothing.
  auto alone = pushSumPeer(c, overlap);
  alone->mix(z, due);
  const float kept = buffer(alone->state(), "weight")[0];
  const bool taken = static_cast<std::int64_t>(round) <= due.dueRound;
  const float expected =
      static_cast<float>(static_cast<double>(kept) + (taken ? double{share.back()} : 0.0));
  const float weight = buffer(after, "weight")[0];
  if (std::memcmp(&weight, &expected, sizeof weight) != 0) std::abort();
  return 0;
}
