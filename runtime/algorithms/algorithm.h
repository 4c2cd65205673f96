// Gossip algorithms: what a peer sends each round and how it mixes what it receives.
// The engine takes the local optimizer step (x <- x - lr * u, giving x_half), then:
//   prepare(x_half)          -> the round's message (compressed bytes), the same for every
//   neighbour receive(j, w_ij, bytes)  -> for each neighbour message of this round, as it arrives
//   mix(x)                   -> x <- x_half + (the algorithm's consensus term), over the neighbours
//                               whose messages arrived; a missing (suspect) neighbour's weight goes
//                               to the peer's own copy for that round. Neighbours are summed in
//                               increasing rank, whatever order their messages arrived in, so a
//                               real run computes bit for bit what the simulator computes.
// Update rules (docs/algorithms.md):
//   dsgd:        x <- sum_j w_ij x_half_j                          (full models on the wire)
//   choco:       q = C(x_half - xhat_i); xhat_j += q_j for j = i and each neighbour;
//                x <- x_half + gamma * sum_j w_ij (xhat_j - xhat_i)
//   deepsqueeze: v = x_half + e; c = C(v); e <- v - c; x <- x_half + gamma * sum_j w_ij (c_j - c_i)
//   push-sum:    the engine's model is the de-biased z = x / w; the algorithm keeps the push-sum
//                numerator x and weight w. x_half = x + (z_half - z) (the local step, unscaled);
//                with d live out-neighbours it keeps (x_half, w) / (d + 1) and sends the same
//                share to each; x <- kept + sum of every share received since the last mix,
//                w likewise; the engine's model becomes z = x / w. The schedule's w_ij are unused.
//                With overlap (overlapRounds tau > 0) a share sent in round t is mixed in round
//                t + tau (MixWeights::dueRound; the engine waits only for those).
//   gt:          gradient tracking (class Gt in algorithms.cc; docs/algorithms.md). It chooses the
//                step direction itself (tracksDirection(), direction()): the engine's u becomes
//                the tracker y_i, which follows the network-average of u; x and y both travel.
// Thread contract: one Algorithm per peer, used from that peer's training thread only.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "runtime/algorithms/robust.h"
#include "runtime/common/status.h"

namespace grapevine::algorithms {

// What an algorithm needs from compression: encode a vector into one message, decode-and-accumulate
// a message. Implemented over compress::ModelCodec in runtime/engine/codec_adapter.cc, which
// makeMessageCodec (runtime/engine/setup.h) returns; the algorithms never see the compressor.
// The refusal of a message that would change a value by `change`, above security.max_delta_ratio's
// `limit` (dataLoss, reason "magnitude").
Status magnitudeRefused(float change, float limit);

class MessageCodec {
 public:
  virtual ~MessageCodec() = default;
  // Upper bound of encode()'s output size.
  virtual std::size_t maxMessageBytes() const = 0;
  // Encodes v into out and adds C(v) into acc exactly as a receiver's decodeAccumulate with weight
  // 1 adds it (a sparse message touches only the elements it carries): a public copy updated this
  // way stays bit-identical to the neighbours' replicas of it. An error after encoding (never
  // expected: the frames are our own) may leave part of C(v) added.
  virtual Result<std::size_t> encodeAccumulate(std::span<const float> v, std::uint64_t round,
                                               std::span<std::uint8_t> out,
                                               std::span<float> acc) = 0;
  // The same into a zeroed decodedSelf: C(v), exactly as every receiver will decode it.
  Result<std::size_t> encode(std::span<const float> v, std::uint64_t round,
                             std::span<std::uint8_t> out, std::span<float> decodedSelf) {
    std::fill(decodedSelf.begin(), decodedSelf.end(), 0.0f);
    return encodeAccumulate(v, round, out, decodedSelf);
  }
  // Whether C(v) is v itself for every finite v, each value as `0.0f + v` (a -0 decodes as +0):
  // dense fp32, losslessly compressed or not (D-PSGD's messages). A sender with such a codec
  // knows its C(v) without decoding its own message, and need not encode one nobody receives.
  virtual bool exact() const { return false; }
  // Encodes v into out and adds nothing anywhere: for exact() codecs, whose C(v) the caller has.
  virtual Result<std::size_t> encodeOnly(std::span<const float> v, std::uint64_t round,
                                         std::span<std::uint8_t> out) = 0;
  // acc += weight * decode(message). Checks every frame; on error acc is unchanged. `maxDelta`
  // (security.max_delta_ratio's bound for this message, PeerCore's per round; 0: none): a message
  // that would change any value of acc by more is refused (dataLoss "magnitude"), acc unchanged.
  virtual Status decodeAccumulate(std::span<const std::uint8_t> message, std::uint64_t round,
                                  int sender, float weight, std::span<float> acc,
                                  float maxDelta) = 0;
  // Bytes the same vector would take as dense fp32 frames (for bytes_dense_equivalent).
  virtual std::size_t denseBytes() const = 0;
};

// The weights of the neighbours whose message arrived this round. The peer's own weight is implied
// as 1 - (sum of these), so a suspect's weight goes to the peer's own copy: D-PSGD computes it,
// CHOCO and DeepSqueeze mix differences to their own copy, in which it cancels.
struct MixWeights {
  std::vector<std::pair<int, double>> neighbours;  // (j, w_ij) of this round
  // Parallel to `neighbours` (or empty): the consensus step each neighbour proposed for this
  // round in its envelope (0: none; a fixed step from the config). CHOCO with an automatic step
  // mixes edge (i, j) with min(own proposal, theirs), which both ends compute alike.
  std::vector<float> proposedSteps;
  // Push-sum with algorithm.overlap: mix the shares of rounds <= dueRound only (the later ones
  // are still in flight and stay for a later mix). The default takes every share received.
  std::int64_t dueRound = std::numeric_limits<std::int64_t>::max();
};

// The consensus step in use and what it was chosen from, for the per-peer records and the summary
// (CHOCO; DeepSqueeze reports only its step). NaN where an algorithm has no such quantity.
struct StepReport {
  static constexpr double kNone = std::numeric_limits<double>::quiet_NaN();
  double step = kNone;      // mean over the edges mixed in the last round (the own step when none)
  double proposed = kNone;  // this peer's proposal of the last round (auto), else `step`
  double compressorQuality = kNone;  // smoothed delta = 1 - |C(v) - v|^2 / |v|^2 on the real v
  double publicLag = kNone;          // |x_half - xhat_i|^2 / |xhat_i|^2 of the last round
  double localConsensus = kNone;     // sum_j w_ij |xhat_j - xhat_i|^2 / |xhat_i|^2, last mix
  std::uint64_t backoffs = 0;        // auto: times the lag signal lowered the step
};

class Algorithm {
 public:
  virtual ~Algorithm() = default;
  virtual std::string_view name() const = 0;

  // Starts round `round` with x = x_half; writes the message into `out` (size >=
  // maxMessageBytes()).
  virtual Result<std::size_t> prepare(std::span<const float> x, std::uint64_t round,
                                      std::span<std::uint8_t> out) = 0;
  // Called by the engine right before prepare() with the live peers this round's message goes to
  // (sendTo()). Push-sum splits its mass over them; the others send the same message to any number
  // of neighbours and ignore it. Dead out-neighbours are not in the list, so their share stays
  // with the sender.
  virtual void setRecipients(std::span<const int> sendTo) {}
  // Applies neighbour j's message of the current round (weight w_ij of this round); `maxDelta`:
  // the bound on what it may change (MessageCodec::decodeAccumulate; 0: none).
  virtual Status receive(int neighbour, double weight, std::span<const std::uint8_t> message,
                         std::uint64_t round, float maxDelta) = 0;
  // Applies neighbour j's message of an earlier round that arrived late (the neighbour was
  // suspect). CHOCO applies it to j's public copy (replicas must see every delta in order); the
  // others drop it.
  virtual Status receiveLate(int neighbour, std::span<const std::uint8_t> message,
                             std::uint64_t round, float maxDelta) = 0;
  // Ends the round: x <- mixed model, over the neighbours in `arrived` (with their weights).
  virtual void mix(std::span<float> x, const MixWeights& arrived) = 0;

  // Gradient tracking's hook (false and a no-op for every other algorithm). When true, the engine
  // calls direction() once per local step, after the optimizer turned the stochastic gradient into
  // its direction u (u = g with momentum 0 and no weight decay) and before the step x <- x - lr u:
  // the algorithm replaces u in place by the direction it wants taken (gt: its tracker y_i). `x` is
  // the model the gradient was taken at (x_t, before the step). Requires algorithm.local_steps 1.
  virtual bool tracksDirection() const { return false; }
  virtual void direction(std::span<const float> x, std::span<float> u, std::uint64_t round) {}

  // CHOCO: hash of this peer's public copy (xhat_i), and of its replica of neighbour j's copy;
  // neighbours compare them to detect drift. 0 for algorithms without replicas. Compressed gt's
  // public copy is [xhat_i | yhat_i] (2 * dim values): hashes, snapshots and resets cover both.
  virtual std::uint64_t publicCopyHash() const { return 0; }
  virtual std::uint64_t replicaHash(int neighbour) const { return 0; }
  // Full-state resync of one edge: the public copy to send, and replacing a neighbour's replica.
  virtual std::span<const float> publicCopy() const { return {}; }
  virtual Status resetReplica(int neighbour, std::span<const float> copy) { return Status::ok(); }
  // A neighbour left (dead): forget its state.
  virtual void dropNeighbour(int neighbour) {}
  // A dropped neighbour is back (it was silent, not gone: PeerCore::revive): its per-neighbour
  // state exists again. A replica starts as a placeholder (this peer's own public copy) that the
  // core never mixes before the neighbour's snapshot replaced it (resetReplica). No-op when the
  // neighbour's state is there.
  virtual void addNeighbour(int neighbour) {}
  // The algorithm's state between rounds, as named dense buffers (the API's state_dict): CHOCO
  // "public_copy" and "replica/<j>" per live neighbour, DeepSqueeze "error". loadState() takes the
  // same names and sizes (kInvalidArgument naming the first that differs) and replaces them.
  std::vector<std::pair<std::string, std::vector<float>>> state() const {
    std::vector<std::pair<std::string, std::vector<float>>> out;
    stateInto(out);
    return out;
  }
  // The same into `out`, reusing the memory of the buffers it holds: a checkpoint every N rounds
  // copies tens of MB, and fresh pages cost about 3 ms per MB on first touch.
  virtual void stateInto(std::vector<std::pair<std::string, std::vector<float>>>& out) const {
    out.clear();
  }
  virtual Status loadState(const std::vector<std::pair<std::string, std::vector<float>>>& state);
  // Scalar state between rounds that state() does not hold (CHOCO's consensus-step controller and
  // last proposal), in double so a checkpoint restores it exactly. loadScalars() takes what
  // scalars() gave (kInvalidArgument when the count differs, the state unchanged).
  virtual std::vector<double> scalars() const { return {}; }
  virtual Status loadScalars(std::span<const double> values);
  // A checkpoint's state (the engine's PeerState::algorithm and ::algorithmScalars), all or
  // nothing: the saved buffers by name, in any order; a neighbour's replica the checkpoint lacks
  // (the neighbour was dead when it was taken) stays as it starts and its rank is added to `fresh`
  // (its edge must resync); a saved replica of a neighbour for which `deadNow` is true is left out.
  // Any other missing or extra name, another size or other scalars are kInvalidArgument (another
  // config), the state unchanged.
  Status restore(const std::vector<std::pair<std::string, std::vector<float>>>& saved,
                 std::span<const double> savedScalars, const std::function<bool(int)>& deadNow,
                 std::vector<int>& fresh);

  // The consensus step this peer proposes for the current round (after prepare), carried in its
  // envelopes; 0 when the step is fixed by the config (or the algorithm has none).
  virtual float proposedStep() const { return 0.0f; }
  // The step in use and its inputs; nullopt for algorithms without a consensus step (dsgd).
  virtual std::optional<StepReport> stepReport() const { return std::nullopt; }

  // Upper bound of prepare()'s output, and what the message would take as dense fp32 frames
  // (gt sends two vectors: twice the codec's).
  virtual std::size_t maxMessageBytes() const { return codec_->maxMessageBytes(); }
  virtual std::size_t denseBytes() const { return codec_->denseBytes(); }

  // The latest vector held of each neighbour (D-PSGD: its last decoded model; CHOCO: the replica of
  // its public copy), by increasing rank: what an attacking peer (a behavioural fault) crafts its
  // message from. Empty for the other algorithms.
  virtual std::vector<std::span<const float>> neighbourViews() const { return {}; }
  // What the algorithm's own state says of why the model diverged, for the divergence's reason
  // (push-sum: a weight that drained away); empty when it says nothing.
  virtual std::string divergenceHint() const { return {}; }
  // Robust mixing (algorithm.robust; D-PSGD and CHOCO): its per-neighbour trust, nullptr without.
  const RobustMixer* robustMixer() const { return robust_ ? &*robust_ : nullptr; }
  // Neighbours robust mixing distrusts since the last call (the engine quarantines them).
  std::vector<NeighbourTrust> takeDistrusted() {
    return robust_ ? robust_->takeDistrusted() : std::vector<NeighbourTrust>{};
  }
  // A restarted peer's robust mixing trust (PeerState::trust; nothing without robust mixing).
  void restoreTrust(const std::vector<NeighbourTrust>& trust) {
    if (robust_) robust_->restoreTrust(trust);
  }
  void setRobust(const RobustOptions& options) {
    if (options.rule != RobustRule::kNone) robust_.emplace(options);
  }

 protected:
  explicit Algorithm(std::unique_ptr<MessageCodec> codec) : codec_(std::move(codec)) {}
  // stateInto()'s building block: sets out[k] to (name, values), growing `out` when it is shorter.
  static void putBuffer(std::vector<std::pair<std::string, std::vector<float>>>& out, std::size_t k,
                        std::string_view name, std::span<const float> values);
  std::unique_ptr<MessageCodec> codec_;
  std::optional<RobustMixer> robust_;
};

// Which gossip algorithm a peer runs (`algorithm.name`). kAllreduce and kDiloco are the baselines
// (issue 40): no gossip message; every round ends with an exact average of the models over a ring
// (or tree) collective, which the engine runs (PeerCoreOptions::averageEachRound); kDiloco adds
// its outer optimizer (outer.*) on top.
enum class AlgorithmKind { kDsgd, kChoco, kDeepSqueeze, kPushSum, kGt, kAllreduce, kDiloco };

// Names as configs spell them: "dsgd", "choco", "deepsqueeze", "push-sum", "gt", "allreduce",
// "diloco".
// algorithmKindNames(), in enum order, is the one table; the config schema takes its allowed values
// from it.
std::string_view algorithmKindName(AlgorithmKind kind);
std::optional<AlgorithmKind> parseAlgorithmKind(std::string_view name);
const std::vector<std::string_view>& algorithmKindNames();
// allreduce and diloco: the models are averaged exactly each round, no gossip.
inline bool averagesEachRound(AlgorithmKind kind) {
  return kind == AlgorithmKind::kAllreduce || kind == AlgorithmKind::kDiloco;
}

struct AlgorithmOptions {
  AlgorithmKind kind = AlgorithmKind::kChoco;
  double consensusStep = 0.5;  // the fixed step (algorithm.consensus_step), without auto
  // `algorithm.consensus_step: auto`: CHOCO proposes its step each round (consensus_step.h) and
  // consensusStep is unused; DeepSqueeze, whose peers cannot agree per edge, uses
  // kDeepSqueezeAutoStep.
  bool autoConsensusStep = true;
  // Initial public copies (CHOCO): all peers start x_hat at this common model (or 0 when empty).
  std::vector<float> initialPublicCopy;
  // gt: the codec compresses (compression.method is not none): public copies for x and y (BEER);
  // false: DIGing, this round's x_j and y_j themselves are mixed.
  bool compressed = false;
  // push-sum with algorithm.overlap: tau = algorithm.overlap_rounds, the rounds a share stays in
  // flight before it is mixed (0: no overlap). Sizes its state (PushSum::state()).
  int overlapRounds = 0;
  // algorithm.robust: D-PSGD and CHOCO only (makeAlgorithm refuses the others).
  RobustOptions robust;
};

// gt's consensus step under `auto`. Uncompressed: 0.5, DIGing with the lazy matrix (I + W) / 2,
// whose eigenvalues are >= 0; with W itself (1) stochastic gradients made it diverge on the 4x4
// torus (Metropolis weights, lambda_min = -0.6) and lose 2 points on the ring (Fashion-MNIST,
// docs/algorithms.md). Compressed: 0.4 (BEER's gamma; biased low-bit compressors need less).
inline constexpr double kGtAutoStepUncompressed = 0.5;
inline constexpr double kGtAutoStep = 0.4;

// DeepSqueeze's step under `auto` (see AlgorithmOptions::autoConsensusStep).
inline constexpr double kDeepSqueezeAutoStep = 0.2;

// `neighbours`: every peer this one ever exchanges with (the union over the schedule's rounds).
Result<std::unique_ptr<Algorithm>> makeAlgorithm(const AlgorithmOptions& options, std::size_t dim,
                                                 const std::vector<int>& neighbours,
                                                 std::unique_ptr<MessageCodec> codec);

// Push-sum messages are the model's share followed by one more value, the push-sum weight's share:
// its codec's layout ends with this tensor (shape [1]) after the model's tensors.
inline constexpr std::string_view kPushSumWeightTensor = "push_sum_weight";

// 64-bit FNV-1a over the float bytes (replica hashes; deterministic, platform independent).
std::uint64_t hashFloats(std::span<const float> v);

}  // namespace grapevine::algorithms
