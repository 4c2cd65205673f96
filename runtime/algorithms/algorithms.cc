#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <iterator>
#include <map>
#include <sstream>
#include <string>

#include "kernels/ops.h"
#include "runtime/algorithms/algorithm.h"
#include "runtime/algorithms/consensus_step.h"
#include "runtime/common/byte_order.h"
#include "runtime/common/enum_names.h"
#include "runtime/common/hash.h"

namespace grapevine::algorithms {
namespace {
// Indexed by AlgorithmKind.
constexpr std::string_view kAlgorithmKindNames[] = {"dsgd", "choco",     "deepsqueeze", "push-sum",
                                                    "gt",   "allreduce", "diloco"};
}  // namespace

std::string_view algorithmKindName(AlgorithmKind kind) {
  return enumName(kAlgorithmKindNames, kind);
}

std::optional<AlgorithmKind> parseAlgorithmKind(std::string_view name) {
  return parseEnum<AlgorithmKind>(kAlgorithmKindNames, name);
}

const std::vector<std::string_view>& algorithmKindNames() {
  static const std::vector<std::string_view> names = enumNameList(kAlgorithmKindNames);
  return names;
}

void Algorithm::putBuffer(std::vector<std::pair<std::string, std::vector<float>>>& out,
                          std::size_t k, std::string_view name, std::span<const float> values) {
  if (out.size() <= k) out.resize(k + 1);
  out[k].first.assign(name);
  out[k].second.assign(values.begin(), values.end());
}

Status Algorithm::loadState(const std::vector<std::pair<std::string, std::vector<float>>>& s) {
  const auto mine = state();
  if (s.size() != mine.size()) {
    return invalidArgument("algorithm state: " + std::to_string(s.size()) + " buffers, expected " +
                           std::to_string(mine.size()) + " (" + std::string(name()) + ")");
  }
  for (std::size_t k = 0; k < s.size(); ++k) {
    if (s[k].first != mine[k].first || s[k].second.size() != mine[k].second.size()) {
      return invalidArgument("algorithm state: '" + s[k].first + "' (" +
                             std::to_string(s[k].second.size()) + " values) where '" +
                             mine[k].first + "' (" + std::to_string(mine[k].second.size()) +
                             " values) was expected");
    }
  }
  return Status::ok();
}

Status Algorithm::loadScalars(std::span<const double> values) {
  if (values.empty()) return Status::ok();
  return invalidArgument("algorithm state: " + std::string(name()) + " has no scalars, got " +
                         std::to_string(values.size()));
}

Status Algorithm::restore(const std::vector<std::pair<std::string, std::vector<float>>>& saved,
                          std::span<const double> savedScalars,
                          const std::function<bool(int)>& deadNow, std::vector<int>& fresh) {
  constexpr std::string_view kReplica = "replica/";
  auto buffers = state();
  std::vector<int> missing;
  for (auto& [name, values] : buffers) {
    // The binding is captured through a reference of its own: clang before 16 cannot capture a
    // structured binding (a C++20 addition), and the fuzz build uses clang.
    const auto it = std::find_if(saved.begin(), saved.end(),
                                 [&n = name](const auto& b) { return b.first == n; });
    if (it == saved.end()) {
      if (!name.starts_with(kReplica)) return invalidArgument("algorithm state: no '" + name + "'");
      missing.push_back(std::stoi(name.substr(kReplica.size())));
      continue;
    }
    GV_RETURN_IF_ERROR(
        checkValueCount("algorithm state '" + name + "'", it->second.size(), values.size()));
    values = it->second;
  }
  for (const auto& [name, values] : saved) {
    if (name.starts_with(kReplica) && deadNow(std::atoi(name.c_str() + kReplica.size()))) continue;
    if (std::none_of(buffers.begin(), buffers.end(),
                     [&n = name](const auto& b) { return b.first == n; }))
      return invalidArgument("algorithm state: '" + name + "' is not a buffer of this peer's " +
                             std::string(this->name()));
  }
  // Checked scalars first, so that a mismatch changes nothing.
  const auto scalarsBefore = scalars();
  GV_RETURN_IF_ERROR(loadScalars(savedScalars));
  if (Status st = loadState(buffers); !st.isOk()) {
    (void)loadScalars(scalarsBefore);
    return st;
  }
  fresh.insert(fresh.end(), missing.begin(), missing.end());
  return Status::ok();
}

std::uint64_t hashFloats(std::span<const float> v) { return fnv1a64(v.data(), v.size_bytes()); }

Status magnitudeRefused(float change, float limit) {
  return dataLoss("magnitude: the message changes a value by " + std::to_string(change) +
                  ", above security.max_delta_ratio's limit " + std::to_string(limit));
}

namespace {

// Each neighbour's decoded message of the current round, kept apart so that mix() sums them in a
// fixed order (increasing neighbour rank), whatever order they arrived in: float sums depend on the
// order, and a real run must compute bit for bit what the simulator computes.
class ReceivedMessages {
 public:
  ReceivedMessages(std::size_t dim, const std::vector<int>& neighbours) {
    for (int j : neighbours) slots_[j].assign(dim, 0.0f);
  }
  // Decodes neighbour j's message into its slot (weight 1). On error the slot holds zeros.
  Status decode(MessageCodec& codec, int j, std::span<const std::uint8_t> m, std::uint64_t round,
                float maxDelta) {
    auto it = slots_.find(j);
    if (it == slots_.end()) return invalidArgument("no slot for peer " + std::to_string(j));
    std::vector<float>& slot = it->second;
    std::fill(slot.begin(), slot.end(), 0.0f);
    // Into zeros, the change a message makes to a value is its decoded value: the bound
    // (security.max_delta_ratio) is one maxAbs pass over the slot after decoding, instead of the
    // codec's keep-add-compare over the whole range (a copy and two more passes); same refusal.
    Status st = codec.decodeAccumulate(m, round, j, 1.0f, slot, 0.0f);
    if (st.isOk() && maxDelta > 0) {
      const float change = kernels::cpuOps().maxAbs(slot.data(), slot.size());
      if (!(change <= maxDelta)) st = magnitudeRefused(change, maxDelta);
    }
    if (!st.isOk()) std::fill(slot.begin(), slot.end(), 0.0f);
    return st;
  }
  // The (slot, w_ij) of the arrived neighbours, by increasing rank.
  std::vector<std::pair<const float*, double>> terms(const MixWeights& arrived) const {
    return weighted(rankedTerms(arrived));
  }
  // The same with each neighbour's rank, for robust mixing.
  std::vector<RobustMixer::Term> rankedTerms(const MixWeights& arrived) const {
    std::vector<std::pair<int, double>> byRank = arrived.neighbours;
    std::sort(byRank.begin(), byRank.end());
    std::vector<RobustMixer::Term> out;
    for (const auto& [j, w] : byRank) {
      const auto it = slots_.find(j);
      if (it != slots_.end()) out.push_back({j, it->second.data(), w});
    }
    return out;
  }
  std::vector<std::span<const float>> views() const {
    std::vector<std::span<const float>> out;
    for (const auto& [j, v] : slots_) out.emplace_back(v);
    return out;
  }
  // (vector, weight) of each term, in their order.
  static std::vector<std::pair<const float*, double>> weighted(
      const std::vector<RobustMixer::Term>& terms) {
    std::vector<std::pair<const float*, double>> out;
    out.reserve(terms.size());
    for (const auto& t : terms) out.emplace_back(t.vector, t.weight);
    return out;
  }
  void drop(int j) { slots_.erase(j); }
  void add(int j, std::size_t dim) { slots_.try_emplace(j, dim, 0.0f); }

 private:
  std::map<int, std::vector<float>> slots_;
};

// x[k] <- wa a[k] + wb b[k] + sum_t w_t r_t[k] (b null: no such term), the sum in double in
// that order, x rounded once (kernels::Ops::weightedSum: tiles of the model, each term streamed
// through in turn while the partial sums stay in L1). x may alias a or b.
void addWeighted(std::span<float> x, const std::vector<std::pair<const float*, double>>& terms,
                 const float* a, double wa, const float* b = nullptr, double wb = 0.0) {
  std::vector<kernels::MixTerm> t;
  t.reserve(terms.size());
  for (const auto& [r, w] : terms) t.push_back({r, w, 0.0});
  kernels::cpuOps().weightedSum(x.data(), a, wa, b, wb, t.data(), t.size(), x.size());
}

// D-PSGD (adapt-then-combine): the message is x_half itself; x <- w_ii x_half + sum_j w_ij
// x_half_j.
class Dsgd final : public Algorithm {
 public:
  Dsgd(std::size_t dim, const std::vector<int>& neighbours, std::unique_ptr<MessageCodec> codec)
      : Algorithm(std::move(codec)), received_(dim, neighbours), dim_(dim) {}
  std::string_view name() const override { return algorithmKindName(AlgorithmKind::kDsgd); }

  void setRecipients(std::span<const int> sendTo) override { recipients_ = sendTo.size(); }
  Result<std::size_t> prepare(std::span<const float> x, std::uint64_t round,
                              std::span<std::uint8_t> out) override {
    if (!selfIsModel()) {
      self_.resize(dim_);
      return codec_->encode(x, round, out, self_);
    }
    // Dense fp32 (always, for D-PSGD) and plain mixing: what receivers decode is x itself (each
    // value as 0 + x[k]: a -0 arrives as +0), so the own term of the mix is the model, which
    // nothing changes between here and mix(): no decoded copy of it (a model-sized buffer and two
    // passes less), and a round nobody receives (no live out-neighbour) encodes nothing. (The one
    // difference from mixing the decoded copy: a coordinate whose every term is zero keeps the
    // model's -0 where the copy's +0 gave +0.) A value that is not finite is refused as decoding
    // the message refused it.
    if (!kernels::cpuOps().allFinite(x.data(), x.size())) {
      return dataLoss("non_finite: fp32 value in the own message");
    }
    if (recipients_ == 0) return std::size_t{0};
    return codec_->encodeOnly(x, round, out);
  }
  Status receive(int j, double, std::span<const std::uint8_t> m, std::uint64_t round,
                 float maxDelta) override {
    return received_.decode(*codec_, j, m, round, maxDelta);
  }
  Status receiveLate(int, std::span<const std::uint8_t>, std::uint64_t, float) override {
    return Status::ok();  // a past round's model is useless now
  }
  void mix(std::span<float> x, const MixWeights& arrived) override {
    if (robust_) {
      mixRobust(x, arrived);
      return;
    }
    // The own term: what receivers decoded of our message (self_), or x itself (exact codec).
    double wsum = 0;
    for (const auto& [j, w] : arrived.neighbours) wsum += w;
    if (!selfIsModel()) self_.resize(dim_);  // (zeros before the first prepare(), as ever)
    addWeighted(x, received_.terms(arrived), selfIsModel() ? x.data() : self_.data(), 1.0 - wsum);
  }
  void dropNeighbour(int j) override { received_.drop(j); }
  void addNeighbour(int j) override { received_.add(j, dim_); }
  std::vector<std::span<const float>> neighbourViews() const override { return received_.views(); }

 private:
  // The own term of the mix is the model itself (prepare()).
  bool selfIsModel() const { return codec_->exact() && !robust_; }

  // algorithm.robust: x <- self + sum_j w_ij clip(x_j - self) (weights scaled by the clip factors;
  // the rest stays with the own copy), or the coordinate-wise trimmed mean of self and the x_j.
  void mixRobust(std::span<float> x, const MixWeights& arrived) {
    auto terms = received_.rankedTerms(arrived);
    robust_->weigh(self_, terms);
    if (robust_->trimming(terms.size())) {
      robust_->trimmedDifference(self_, terms, x);
      for (std::size_t k = 0; k < x.size(); ++k) x[k] += self_[k];
      return;
    }
    double wsum = 0;
    for (const auto& t : terms) wsum += t.weight;
    addWeighted(x, ReceivedMessages::weighted(terms), self_.data(), 1.0 - wsum);
  }

  ReceivedMessages received_;  // x_half_j of this round, per neighbour
  std::size_t dim_;
  // The decoded own message (allocated only when it is not the model itself: a codec that is not
  // exact, or robust mixing, which measures the neighbours against it).
  std::vector<float> self_;
  std::size_t recipients_ = 0;  // of this round's message
};

// CHOCO-SGD (Koloskova et al. 2019). One public-copy replica per neighbour, so weights may change
// per round (time-varying graphs, renormalisation around dead or suspect neighbours) without bias.
// With an automatic step (consensus_step.h) each edge mixes with the smaller of its two ends'
// proposals of the round, which keeps w_ij g_ij symmetric and so the mean of the models.
class Choco final : public Algorithm {
 public:
  Choco(std::size_t dim, double gamma, bool autoStep, const std::vector<int>& neighbours,
        const std::vector<float>& initial, std::unique_ptr<MessageCodec> codec)
      : Algorithm(std::move(codec)), gamma_(gamma), auto_(autoStep), xhat_(dim, 0.0f), diff_(dim) {
    if (!initial.empty()) xhat_ = initial;
    for (int j : neighbours) replicas_.emplace(j, xhat_);
    report_.step = report_.proposed = autoStep ? AutoStep::kMinStep : gamma;
  }
  std::string_view name() const override { return algorithmKindName(AlgorithmKind::kChoco); }

  Result<std::size_t> prepare(std::span<const float> x, std::uint64_t round,
                              std::span<std::uint8_t> out) override {
    // v = x_half - xhat_i; xhat_i += C(v), decoded straight into the public copy as the
    // neighbours decode it into their replicas. Then |v|^2, the residual |x_half - xhat_i|^2 =
    // |v - C(v)|^2 (up to rounding) and |xhat_i|^2 for the compressor's measured quality and the
    // lag of the public copy (kernels::Ops' dense passes: deterministic sums). Four sweeps over
    // the model: the difference, the encoder's read of it, the decode, the norms.
    const kernels::Ops& ops = kernels::cpuOps();
    const double v2 = ops.subtractSquares(x.data(), xhat_.data(), diff_.data(), x.size());
    auto n = codec_->encodeAccumulate(diff_, round, out, xhat_);
    if (!n.isOk()) return n;
    const kernels::DistanceAndNorm r = ops.distanceAndNorm(x.data(), xhat_.data(), x.size());
    const double err2 = r.distance2, xhat2 = r.norm2;
    xhatNorm2_ = xhat2;
    report_.publicLag = xhat2 > 0 ? v2 / xhat2 : v2;
    // A fixed step keeps the controller too, for the compressor quality it reports.
    step_.observeCompression(v2, err2, xhat2);
    if (auto_) proposal_ = static_cast<float>(step_.proposal());  // as neighbours will read it
    return n;
  }
  Status receive(int j, double, std::span<const std::uint8_t> m, std::uint64_t round,
                 float maxDelta) override {
    return receiveLate(j, m, round, maxDelta);
  }
  Status receiveLate(int j, std::span<const std::uint8_t> m, std::uint64_t round,
                     float maxDelta) override {
    auto it = replicas_.find(j);
    if (it == replicas_.end()) return invalidArgument("no replica for peer " + std::to_string(j));
    return codec_->decodeAccumulate(m, round, j, 1.0f, it->second, maxDelta);
  }
  void mix(std::span<float> x, const MixWeights& arrived) override {
    // x <- x_half + sum_j g_ij w_ij (xhat_j - xhat_i). The consensus term is summed in double
    // and added once, so x is rounded once per round (the mean of the models drifts only by that
    // rounding).
    std::vector<kernels::MixTerm> terms;
    std::vector<int> ranks;
    double sumW = 0, sumStep = 0;
    // Fixed order (by neighbour rank), whatever order the messages arrived in.
    std::vector<std::size_t> byRank(arrived.neighbours.size());
    for (std::size_t n = 0; n < byRank.size(); ++n) byRank[n] = n;
    std::sort(byRank.begin(), byRank.end(), [&](std::size_t a, std::size_t b) {
      return arrived.neighbours[a].first < arrived.neighbours[b].first;
    });
    for (const std::size_t n : byRank) {
      const auto& [j, w] = arrived.neighbours[n];
      const auto it = replicas_.find(j);
      if (it == replicas_.end()) continue;
      double g = gamma_;
      if (auto_) {
        // Both ends take the smaller of the two float32 proposals, bit for bit.
        const float theirs = n < arrived.proposedSteps.size() ? arrived.proposedSteps[n] : 0.0f;
        g = theirs > 0.0f ? std::min(proposal_, theirs) : proposal_;
      }
      terms.push_back({it->second.data(), g * w, w});
      ranks.push_back(j);
      sumW += w;
      sumStep += g;
    }
    if (robust_) weighRobust(terms, ranks);
    if (auto_) step_.observeRow(sumW);
    report_.proposed = auto_ ? proposal_ : gamma_;
    report_.step = terms.empty() ? report_.proposed : sumStep / static_cast<double>(terms.size());
    report_.localConsensus = 0.0;
    if (terms.empty()) return;
    if (robust_ && robust_->trimming(terms.size())) {
      mixTrimmed(x, terms, ranks);
      return;
    }
    // One sweep: tiles of the model, each replica streamed through in turn
    // (kernels::Ops::mixDifferences), with spread = sum_j w_ij |xhat_j - xhat_i|^2 alongside.
    const double spread = kernels::cpuOps().mixDifferences(x.data(), xhat_.data(), terms.data(),
                                                           terms.size(), x.size());
    report_.localConsensus = xhatNorm2_ > 0 ? spread / xhatNorm2_ : spread;
  }
  std::uint64_t publicCopyHash() const override { return hashFloats(xhat_); }
  std::uint64_t replicaHash(int j) const override {
    auto it = replicas_.find(j);
    return it == replicas_.end() ? 0 : hashFloats(it->second);
  }
  std::span<const float> publicCopy() const override { return xhat_; }
  Status resetReplica(int j, std::span<const float> copy) override {
    auto it = replicas_.find(j);
    if (it == replicas_.end() || copy.size() != xhat_.size()) {
      return invalidArgument("resync: no replica of that size for peer " + std::to_string(j));
    }
    std::copy(copy.begin(), copy.end(), it->second.begin());
    return Status::ok();
  }
  void dropNeighbour(int j) override { replicas_.erase(j); }
  void addNeighbour(int j) override { replicas_.try_emplace(j, xhat_); }
  std::vector<std::span<const float>> neighbourViews() const override {
    std::vector<std::span<const float>> out;
    for (const auto& [j, r] : replicas_) out.emplace_back(r);
    return out;
  }
  void stateInto(std::vector<std::pair<std::string, std::vector<float>>>& out) const override {
    std::size_t k = 0;
    putBuffer(out, k++, "public_copy", xhat_);
    for (const auto& [j, r] : replicas_) putBuffer(out, k++, "replica/" + std::to_string(j), r);
    out.resize(k);
  }
  Status loadState(const std::vector<std::pair<std::string, std::vector<float>>>& s) override {
    GV_RETURN_IF_ERROR(Algorithm::loadState(s));
    xhat_ = s[0].second;
    for (std::size_t k = 1; k < s.size(); ++k)
      replicas_[std::stoi(s[k].first.substr(8))] = s[k].second;
    return Status::ok();
  }
  std::vector<double> scalars() const override {
    std::vector<double> out = step_.save();
    out.insert(out.end(), {static_cast<double>(proposal_), xhatNorm2_, report_.step,
                           report_.proposed, report_.publicLag, report_.localConsensus});
    return out;
  }
  Status loadScalars(std::span<const double> v) override {
    constexpr std::size_t kOwn = 6;
    if (v.size() != AutoStep::kStateSize + kOwn || !step_.load(v.first(AutoStep::kStateSize))) {
      return invalidArgument("CHOCO state: expected " +
                             std::to_string(AutoStep::kStateSize + kOwn) + " scalars, got " +
                             std::to_string(v.size()));
    }
    const auto own = v.subspan(AutoStep::kStateSize);
    proposal_ = static_cast<float>(own[0]);
    xhatNorm2_ = own[1];
    report_.step = own[2];
    report_.proposed = own[3];
    report_.publicLag = own[4];
    report_.localConsensus = own[5];
    return Status::ok();
  }
  float proposedStep() const override { return auto_ ? proposal_ : 0.0f; }
  std::optional<StepReport> stepReport() const override {
    StepReport r = report_;
    r.compressorQuality = step_.quality();
    r.backoffs = auto_ ? step_.backoffs() : 0;
    return r;
  }

 private:
  // algorithm.robust on the public copies: clip scales each edge's coefficient g_ij w_ij by its
  // clip factor (RobustMixer::weigh).
  void weighRobust(std::vector<kernels::MixTerm>& terms, const std::vector<int>& ranks) {
    std::vector<RobustMixer::Term> rt;
    for (std::size_t t = 0; t < terms.size(); ++t)
      rt.push_back({ranks[t], terms[t].replica, terms[t].coefficient});
    robust_->weigh(xhat_, rt);
    for (std::size_t t = 0; t < terms.size(); ++t) terms[t].coefficient = rt[t].weight;
  }
  // trim: x <- x_half + g (trimmed mean of xhat_i and the replicas - xhat_i), g the smallest step
  // of the round's edges (a fixed step: gamma).
  void mixTrimmed(std::span<float> x, const std::vector<kernels::MixTerm>& terms,
                  const std::vector<int>& ranks) {
    double g = std::numeric_limits<double>::infinity();
    std::vector<RobustMixer::Term> rt;
    for (std::size_t t = 0; t < terms.size(); ++t) {
      rt.push_back({ranks[t], terms[t].replica, terms[t].weight});
      g = std::min(g, terms[t].weight > 0 ? terms[t].coefficient / terms[t].weight : gamma_);
    }
    diff_.resize(x.size());
    robust_->trimmedDifference(xhat_, rt, diff_);
    for (std::size_t k = 0; k < x.size(); ++k)
      x[k] = static_cast<float>(static_cast<double>(x[k]) + g * static_cast<double>(diff_[k]));
  }

  double gamma_;
  bool auto_;
  AutoStep step_;
  float proposal_ = static_cast<float>(AutoStep::kMinStep);
  double xhatNorm2_ = 0.0;
  StepReport report_;
  std::vector<float> xhat_;                     // this peer's public copy
  std::vector<float> diff_;                     // v = x_half - xhat_i of this round
  std::map<int, std::vector<float>> replicas_;  // neighbours' public copies
};

// DeepSqueeze (Tang et al. 2019): error-compensated compressed gossip of the model itself.
class DeepSqueeze final : public Algorithm {
 public:
  DeepSqueeze(std::size_t dim, double gamma, const std::vector<int>& neighbours,
              std::unique_ptr<MessageCodec> codec)
      : Algorithm(std::move(codec)),
        gamma_(gamma),
        e_(dim, 0.0f),
        v_(dim),
        c_(dim),
        received_(dim, neighbours) {}
  std::string_view name() const override { return algorithmKindName(AlgorithmKind::kDeepSqueeze); }

  Result<std::size_t> prepare(std::span<const float> x, std::uint64_t round,
                              std::span<std::uint8_t> out) override {
    for (std::size_t k = 0; k < x.size(); ++k) v_[k] = x[k] + e_[k];
    auto n = codec_->encode(v_, round, out, c_);
    if (!n.isOk()) return n;
    for (std::size_t k = 0; k < x.size(); ++k) e_[k] = v_[k] - c_[k];
    return n;
  }
  Status receive(int j, double, std::span<const std::uint8_t> m, std::uint64_t round,
                 float maxDelta) override {
    return received_.decode(*codec_, j, m, round, maxDelta);
  }
  Status receiveLate(int, std::span<const std::uint8_t>, std::uint64_t, float) override {
    return Status::ok();
  }
  std::optional<StepReport> stepReport() const override {
    StepReport r;
    r.step = r.proposed = gamma_;
    return r;
  }
  void mix(std::span<float> x, const MixWeights& arrived) override {
    // x <- x_half + gamma * sum_j w_ij (c_j - c_i), j over arrived neighbours (in rank order).
    double wsum = 0;
    MixWeights scaled;
    for (const auto& [j, w] : arrived.neighbours) {
      wsum += w;
      scaled.neighbours.emplace_back(j, gamma_ * w);
    }
    // (1.0 * x_half[k] is x_half[k] exactly: the base is x_half + selfW c.)
    addWeighted(x, received_.terms(scaled), x.data(), 1.0, c_.data(), -gamma_ * wsum);
  }
  void dropNeighbour(int j) override { received_.drop(j); }
  void addNeighbour(int j) override { received_.add(j, e_.size()); }
  void stateInto(std::vector<std::pair<std::string, std::vector<float>>>& out) const override {
    putBuffer(out, 0, "error", e_);
    out.resize(1);
  }
  Status loadState(const std::vector<std::pair<std::string, std::vector<float>>>& s) override {
    GV_RETURN_IF_ERROR(Algorithm::loadState(s));
    e_ = s[0].second;
    return Status::ok();
  }

 private:
  double gamma_;
  std::vector<float> e_, v_, c_;
  ReceivedMessages received_;  // c_j of this round, per neighbour
};

// Push-sum / Stochastic Gradient Push (Kempe et al. 2003; Assran et al., ICML 2019). Column
// stochastic: the sender chooses the shares (1/(d+1) with d live out-neighbours, its own share
// included), so no peer needs to know who sends to it, and the graph may be directed or change
// every round. The numerator x and the weight w are mixed alike, so sum_i x_i and sum_i w_i are
// conserved and every z_i = x_i / w_i tends to sum_i x_i / sum_i w_i = the average of the initial
// models (with gradient steps: SGP's average iterate). The engine holds z; this class holds x and
// w. Mass is never dropped here: a share from a neighbour is added at the next mix whenever it
// arrives (current round or late), and a dead out-neighbour is left out of the recipients, so its
// share stays with the sender. What is lost is only what a peer held when it died, and shares in
// flight to it. Overlapped SGP (tau = AlgorithmOptions::overlapRounds > 0): shares are kept by the
// round they were sent in, and mix() takes those of rounds <= MixWeights::dueRound (t - tau, or t
// on the engine's sync rounds), so each is added exactly once, tau rounds after it was sent.
class PushSum final : public Algorithm {
 public:
  PushSum(std::size_t dim, int delay, const std::vector<int>& neighbours,
          std::unique_ptr<MessageCodec> codec)
      : Algorithm(std::move(codec)),
        delay_(delay),
        x_(dim, 0.0f),
        z_(dim, 0.0f),
        m_(dim + 1),
        kept_(dim + 1) {
    for (int j : neighbours) inbox_[j];
  }
  std::string_view name() const override { return algorithmKindName(AlgorithmKind::kPushSum); }

  void setRecipients(std::span<const int> sendTo) override {
    recipients_ = static_cast<int>(sendTo.size());
  }
  Result<std::size_t> prepare(std::span<const float> zHalf, std::uint64_t round,
                              std::span<std::uint8_t> out) override {
    const std::size_t dim = x_.size();
    if (zHalf.size() != dim) return invalidArgument("push-sum: model size changed");
    round_ = static_cast<std::int64_t>(round);
    if (rebase_) {
      // loadState() keyed the shares in flight relative to the next round: this one.
      for (auto& [j, box] : inbox_) {
        std::map<std::int64_t, std::vector<float>> rebased;
        for (auto& [r, share] : box) rebased.emplace(r + round_, std::move(share));
        box = std::move(rebased);
      }
      rebase_ = false;
    }
    if (w_ == 0.0f) {
      // First round (w = 0 marks "not started"): x = z = the initial model, w = 1.
      std::copy(zHalf.begin(), zHalf.end(), x_.begin());
      w_ = 1.0f;
    } else {
      // The local step(s) the engine took on z: x_half = x - lr * u, unscaled by w (SGP).
      for (std::size_t k = 0; k < dim; ++k) x_[k] += zHalf[k] - z_[k];
    }
    const double share = 1.0 / (static_cast<double>(recipients_) + 1.0);
    for (std::size_t k = 0; k < dim; ++k) m_[k] = static_cast<float>(share * x_[k]);
    m_[dim] = static_cast<float>(share * w_);
    // kept_ is what every receiver decodes: the peer keeps exactly one more of the same share.
    return codec_->encode(m_, round, out, kept_);
  }
  Status receive(int j, double, std::span<const std::uint8_t> m, std::uint64_t round,
                 float maxDelta) override {
    return receiveLate(j, m, round, maxDelta);
  }
  // A late share is as good as a punctual one: it is added at the next mix whose dueRound has
  // reached its round (no mass is dropped, none is added twice).
  Status receiveLate(int j, std::span<const std::uint8_t> m, std::uint64_t round,
                     float maxDelta) override {
    auto it = inbox_.find(j);
    if (it == inbox_.end()) return invalidArgument("no inbox for peer " + std::to_string(j));
    auto [slot, fresh] = it->second.try_emplace(static_cast<std::int64_t>(round));
    if (fresh) slot->second.assign(x_.size() + 1, 0.0f);
    Status st = codec_->decodeAccumulate(m, round, j, 1.0f, slot->second, maxDelta);
    if (!st.isOk() && fresh) it->second.erase(slot);
    return st;
  }
  // x <- kept + every share of a round <= arrived.dueRound (by increasing sender rank, then
  // round), in double, rounded once; w alike. Later shares (overlap: still in flight for this
  // round) stay for a later mix. The weights in `arrived` are not needed.
  void mix(std::span<float> z, const MixWeights& arrived) override {
    const std::size_t dim = x_.size();
    std::vector<std::pair<const float*, double>> terms;
    for (const auto& [j, box] : inbox_) {
      for (const auto& [r, share] : box) {
        if (r <= arrived.dueRound) terms.emplace_back(share.data(), 1.0);
      }
    }
    addWeighted(std::span<float>(x_), terms, kept_.data(), 1.0);
    const float* kept = kept_.data();
    double w = kept[dim];
    for (const auto& [share, one] : terms) w += share[dim];
    w_ = static_cast<float>(w);
    for (std::size_t k = 0; k < dim; ++k) z_[k] = z[k] = x_[k] / w_;
    for (auto& [j, box] : inbox_) {
      for (auto it = box.begin(); it != box.end() && it->first <= arrived.dueRound;)
        it = box.erase(it);
    }
  }
  // A dead in-neighbour's inbox is kept: a share of it that arrived still counts at its mix.
  void dropNeighbour(int) override {}
  // A weight far below its start of 1 is why a model ran away: the de-biased step is the gradient
  // over the weight.
  std::string divergenceHint() const override {
    constexpr float kLowWeight = 0.1f;
    if (!(w_ < kLowWeight)) return {};
    std::ostringstream os;
    os << "its push-sum weight fell to " << w_
       << " (from 1): the weight it sends does not come back, as when the live graph is no longer "
          "strongly connected (a peer it sends to has no live out-neighbour) or messages are lost";
    return os.str();
  }
  // "numerator", "weight", "debiased", and per in-neighbour j "inbox/<j>": the shares the next mix
  // takes (rounds <= next - delay, summed), and with overlap_rounds tau >= 2 "inflight/<j>/<k>",
  // k = 1..tau-1: the share of round next - tau + k (zeros when none arrived yet).
  void stateInto(std::vector<std::pair<std::string, std::vector<float>>>& out) const override {
    std::size_t n = 0;
    putBuffer(out, n++, "numerator", x_);
    putBuffer(out, n++, "weight", std::span<const float>(&w_, 1));
    putBuffer(out, n++, "debiased", z_);
    const std::int64_t next = rebase_ ? 0 : round_ + 1;
    const std::vector<float> zeros(x_.size() + 1, 0.0f);
    for (const auto& [j, box] : inbox_) {
      putBuffer(out, n, "inbox/" + std::to_string(j), zeros);
      auto& due = out[n++].second;
      for (const auto& [r, share] : box) {
        if (r > next - delay_) break;
        for (std::size_t k = 0; k < due.size(); ++k) due[k] += share[k];
      }
      for (int k = 1; k < delay_; ++k) {
        const auto it = box.find(next - delay_ + k);
        putBuffer(out, n++, "inflight/" + std::to_string(j) + "/" + std::to_string(k),
                  it != box.end() ? std::span<const float>(it->second) : zeros);
      }
    }
    out.resize(n);
  }
  Status loadState(const std::vector<std::pair<std::string, std::vector<float>>>& s) override {
    GV_RETURN_IF_ERROR(Algorithm::loadState(s));  // same names and sizes as state()
    x_ = s[0].second;
    w_ = s[1].second[0];
    z_ = s[2].second;
    // Keyed relative to the next round (prepare() rebases them); an all-zero slot holds nothing.
    const std::size_t perSender = static_cast<std::size_t>(std::max(delay_, 1));
    auto from = s.begin() + 3;
    for (auto& [j, box] : inbox_) {
      box.clear();
      for (std::size_t k = 0; k < perSender; ++k, ++from) {
        const auto& v = from->second;
        if (std::any_of(v.begin(), v.end(), [](float f) { return f != 0.0f; }))
          box.emplace(static_cast<std::int64_t>(k) - delay_, v);
      }
    }
    rebase_ = true;
    return Status::ok();
  }

 private:
  int delay_;                    // overlap_rounds tau (0: no overlap)
  std::vector<float> x_;         // push-sum numerator (x_half between prepare and mix)
  float w_ = 0.0f;               // push-sum weight; 0 until the first prepare()
  std::vector<float> z_;         // the de-biased model the last mix() wrote into the engine
  std::vector<float> m_, kept_;  // this round's share (dim values, then w), as decoded
  // Shares received and not mixed yet, per sender, by the round they were sent in.
  std::map<int, std::map<std::int64_t, std::vector<float>>> inbox_;
  int recipients_ = 0;
  std::int64_t round_ = -1;  // of the last prepare()
  bool rebase_ = false;      // loadState() keyed inbox_ relative to the next round
};

// Gradient tracking (docs/algorithms.md). Peer i, round t; d_t is the optimizer's direction at x_t
// (the stochastic gradient g_t, or with optimizer.momentum the heavy-ball buffer
// m_t = beta m_{t-1} + g_t, which the tracker then follows), gamma the consensus step:
//   y_t        = ytil_t + (d_t - d_{t-1})          direction(); ytil_0 = d_{-1} = 0, so y_0 = d_0
//   x_half     = x_t - lr y_t                      the engine's step, with u = y_t
//   compressed (BEER, Zhao et al. 2022, Algorithm 1, in its order: the copies take x_t and y_t):
//     xhat_i <- xhat_i + C(x_t - xhat_i),  yhat_i <- yhat_i + C(y_t - yhat_i)   (both sent)
//   uncompressed (DIGing, Nedic, Olshevsky and Shi 2017): xhat_i = x_t, yhat_i = y_t (sent as is)
//   x_{t+1}    = x_half + gamma sum_j w_ij (xhat_j - xhat_i)                     mix()
//   ytil_{t+1} = y_t    + gamma sum_j w_ij (yhat_j - yhat_i)
// With symmetric weights the consensus terms sum to zero over the peers, so sum_i y_i = sum_i d_i
// every round: y tracks the network-average direction, and at a fixed point (x_half = x, hence
// y_i = 0 for all i) the average gradient is zero: the exact optimum, whatever the heterogeneity.
// The message is [u32 LE: bytes of part 1][part 1: x][part 2: y], each part the codec's frames.
// Compressed, one replica [xhat_j | yhat_j] per neighbour, updated in order like CHOCO's (late
// messages too); a message whose second part fails after the first was applied leaves the replica
// half-updated: the receive error makes the engine ask for a snapshot, which resets both halves.
class Gt final : public Algorithm {
 public:
  Gt(std::size_t dim, double gamma, bool compressed, const std::vector<int>& neighbours,
     const std::vector<float>& initial, std::unique_ptr<MessageCodec> codec)
      : Algorithm(std::move(codec)),
        dim_(dim),
        gamma_(gamma),
        compressed_(compressed),
        y_(dim, 0.0f),
        dPrev_(dim, 0.0f),
        xt_(dim, 0.0f),
        diff_(dim),
        public_(2 * dim, 0.0f) {
    if (!initial.empty()) std::copy(initial.begin(), initial.end(), public_.begin());
    for (int j : neighbours) replicas_.emplace(j, public_);
  }
  std::string_view name() const override { return algorithmKindName(AlgorithmKind::kGt); }
  std::size_t maxMessageBytes() const override { return 4 + 2 * codec_->maxMessageBytes(); }
  std::size_t denseBytes() const override { return 4 + 2 * codec_->denseBytes(); }

  bool tracksDirection() const override { return true; }
  void direction(std::span<const float> x, std::span<float> u, std::uint64_t) override {
    for (std::size_t k = 0; k < dim_; ++k) {
      y_[k] += u[k] - dPrev_[k];
      dPrev_[k] = u[k];
      u[k] = y_[k];
    }
    std::copy(x.begin(), x.end(), xt_.begin());
    haveXt_ = true;
  }

  Result<std::size_t> prepare(std::span<const float> x, std::uint64_t round,
                              std::span<std::uint8_t> out) override {
    // Without direction() this round (it is always called when the engine steps), x_half stands
    // in for x_t.
    const std::span<const float> xt = haveXt_ ? std::span<const float>(xt_) : x;
    haveXt_ = false;
    if (out.size() < 4) return internalError("gt: message buffer too small");
    const std::span<float> xhat(public_.data(), dim_), yhat(public_.data() + dim_, dim_);
    std::size_t n1 = 0, n2 = 0;
    if (!compressed_) {
      GV_ASSIGN_OR_RETURN(n1, codec_->encode(xt, round, out.subspan(4), xhat));
      GV_ASSIGN_OR_RETURN(n2, codec_->encode(y_, round, out.subspan(4 + n1), yhat));
    } else {
      // Each copy takes C(diff) decoded straight into it, as the neighbours' replicas do.
      kernels::cpuOps().subtractSquares(xt.data(), xhat.data(), diff_.data(), xt.size());
      GV_ASSIGN_OR_RETURN(n1, codec_->encodeAccumulate(diff_, round, out.subspan(4), xhat));
      kernels::cpuOps().subtractSquares(y_.data(), yhat.data(), diff_.data(), y_.size());
      GV_ASSIGN_OR_RETURN(n2, codec_->encodeAccumulate(diff_, round, out.subspan(4 + n1), yhat));
    }
    storeLe32(out.data(), static_cast<std::uint32_t>(n1));
    return 4 + n1 + n2;
  }
  Status receive(int j, double, std::span<const std::uint8_t> m, std::uint64_t round,
                 float maxDelta) override {
    auto it = replicas_.find(j);
    if (it == replicas_.end()) return invalidArgument("no replica for peer " + std::to_string(j));
    // Uncompressed: this round's x_j and y_j replace the slot; compressed: deltas add to it.
    if (!compressed_) std::fill(it->second.begin(), it->second.end(), 0.0f);
    return apply(j, it->second, m, round, maxDelta);
  }
  Status receiveLate(int j, std::span<const std::uint8_t> m, std::uint64_t round,
                     float maxDelta) override {
    if (!compressed_) return Status::ok();  // a past round's x_j, y_j are useless now
    auto it = replicas_.find(j);
    if (it == replicas_.end()) return invalidArgument("no replica for peer " + std::to_string(j));
    return apply(j, it->second, m, round, maxDelta);
  }
  void mix(std::span<float> x, const MixWeights& arrived) override {
    std::vector<std::pair<int, double>> byRank = arrived.neighbours;
    std::sort(byRank.begin(), byRank.end());
    // target[k] <- target[k] + sum_j gamma w_ij (r_j[off + k] - public_i[off + k]), in double in
    // rank order, rounded once (kernels::Ops::mixDifferences; gt reports no spread: weight 0).
    auto consensus = [&](std::span<float> target, std::size_t off) {
      std::vector<kernels::MixTerm> terms;
      for (const auto& [j, w] : byRank) {
        const auto it = replicas_.find(j);
        if (it != replicas_.end()) terms.push_back({it->second.data() + off, gamma_ * w, 0.0});
      }
      kernels::cpuOps().mixDifferences(target.data(), public_.data() + off, terms.data(),
                                       terms.size(), dim_);
    };
    consensus(x, 0);
    consensus(y_, dim_);
  }
  std::uint64_t publicCopyHash() const override { return compressed_ ? hashFloats(public_) : 0; }
  std::uint64_t replicaHash(int j) const override {
    auto it = replicas_.find(j);
    return !compressed_ || it == replicas_.end() ? 0 : hashFloats(it->second);
  }
  std::span<const float> publicCopy() const override {
    return compressed_ ? std::span<const float>(public_) : std::span<const float>();
  }
  Status resetReplica(int j, std::span<const float> copy) override {
    auto it = replicas_.find(j);
    if (!compressed_ || it == replicas_.end() || copy.size() != public_.size()) {
      return invalidArgument("resync: no gt replica of that size for peer " + std::to_string(j));
    }
    std::copy(copy.begin(), copy.end(), it->second.begin());
    return Status::ok();
  }
  void dropNeighbour(int j) override { replicas_.erase(j); }
  void addNeighbour(int j) override { replicas_.try_emplace(j, public_); }
  // "tracker" (y between rounds), "previous_direction" (d_{t-1}); compressed also
  // "public_model", "public_tracker" and "replica/<j>/model", "replica/<j>/tracker".
  void stateInto(std::vector<std::pair<std::string, std::vector<float>>>& out) const override {
    std::size_t k = 0;
    putBuffer(out, k++, "tracker", y_);
    putBuffer(out, k++, "previous_direction", dPrev_);
    if (compressed_) {
      auto half = [&](const std::vector<float>& v, int h) {
        return std::span<const float>(v).subspan(static_cast<std::size_t>(h) * dim_, dim_);
      };
      putBuffer(out, k++, "public_model", half(public_, 0));
      putBuffer(out, k++, "public_tracker", half(public_, 1));
      for (const auto& [j, r] : replicas_) {
        putBuffer(out, k++, "replica/" + std::to_string(j) + "/model", half(r, 0));
        putBuffer(out, k++, "replica/" + std::to_string(j) + "/tracker", half(r, 1));
      }
    }
    out.resize(k);
  }
  Status loadState(const std::vector<std::pair<std::string, std::vector<float>>>& s) override {
    GV_RETURN_IF_ERROR(Algorithm::loadState(s));  // same names and sizes as state()
    y_ = s[0].second;
    dPrev_ = s[1].second;
    if (!compressed_) return Status::ok();
    std::copy(s[2].second.begin(), s[2].second.end(), public_.begin());
    std::copy(s[3].second.begin(), s[3].second.end(), public_.begin() + dim_);
    auto r = replicas_.begin();
    for (std::size_t k = 4; k + 1 < s.size(); k += 2, ++r) {
      std::copy(s[k].second.begin(), s[k].second.end(), r->second.begin());
      std::copy(s[k + 1].second.begin(), s[k + 1].second.end(), r->second.begin() + dim_);
    }
    return Status::ok();
  }
  std::optional<StepReport> stepReport() const override {
    StepReport r;
    r.step = r.proposed = gamma_;
    return r;
  }

 private:
  // Adds (compressed) or writes (uncompressed, into a zeroed slot) both parts of j's message.
  Status apply(int j, std::vector<float>& slot, std::span<const std::uint8_t> m,
               std::uint64_t round, float maxDelta) {
    if (m.size() < 4) return dataLoss("gt: message of " + std::to_string(m.size()) + " bytes");
    const std::uint32_t n1 = loadLe32(m.data());
    if (n1 > m.size() - 4) return dataLoss("gt: first part of " + std::to_string(n1) + " bytes");
    const std::span<float> xs(slot.data(), dim_), ys(slot.data() + dim_, dim_);
    GV_RETURN_IF_ERROR(codec_->decodeAccumulate(m.subspan(4, n1), round, j, 1.0f, xs, maxDelta));
    return codec_->decodeAccumulate(m.subspan(4 + n1), round, j, 1.0f, ys, maxDelta);
  }

  std::size_t dim_;
  double gamma_;
  bool compressed_;
  std::vector<float> y_;      // the tracker: y_t within a round, ytil_{t+1} after mix()
  std::vector<float> dPrev_;  // d_{t-1}
  std::vector<float> xt_;     // x_t of this round (direction())
  bool haveXt_ = false;
  std::vector<float> diff_;
  std::vector<float> public_;                   // [xhat_i | yhat_i]
  std::map<int, std::vector<float>> replicas_;  // [xhat_j | yhat_j] per neighbour
};

// allreduce and diloco: nothing to gossip. The engine averages the models exactly after the round
// (a ring or tree collective: PeerCoreOptions::averageEachRound); the round's message is empty and
// goes to nobody.
class Averaged final : public Algorithm {
 public:
  Averaged(AlgorithmKind kind, std::unique_ptr<MessageCodec> codec)
      : Algorithm(std::move(codec)), kind_(kind) {}
  std::string_view name() const override { return algorithmKindName(kind_); }
  std::size_t maxMessageBytes() const override { return 0; }
  Result<std::size_t> prepare(std::span<const float>, std::uint64_t,
                              std::span<std::uint8_t>) override {
    return std::size_t{0};
  }
  Status receive(int j, double, std::span<const std::uint8_t>, std::uint64_t, float) override {
    return invalidArgument("a round message from " + std::to_string(j) + " under " +
                           std::string(name()) + ", which sends none");
  }
  Status receiveLate(int, std::span<const std::uint8_t>, std::uint64_t, float) override {
    return Status::ok();
  }
  void mix(std::span<float>, const MixWeights&) override {}

 private:
  AlgorithmKind kind_;
};

}  // namespace

Result<std::unique_ptr<Algorithm>> makeAlgorithm(const AlgorithmOptions& o, std::size_t dim,
                                                 const std::vector<int>& neighbours,
                                                 std::unique_ptr<MessageCodec> codec) {
  if (!codec) return invalidArgument("algorithm needs a codec");
  if (!o.initialPublicCopy.empty() && o.initialPublicCopy.size() != dim) {
    return invalidArgument("initial public copy has the wrong size");
  }
  const bool robust = o.robust.rule != RobustRule::kNone;
  if (robust && o.kind != AlgorithmKind::kDsgd && o.kind != AlgorithmKind::kChoco) {
    return invalidArgument("algorithm.robust works with dsgd and choco only, not " +
                           std::string(algorithmKindName(o.kind)));
  }
  switch (o.kind) {
    case AlgorithmKind::kDsgd: {
      std::unique_ptr<Algorithm> a(new Dsgd(dim, neighbours, std::move(codec)));
      a->setRobust(o.robust);
      return a;
    }
    case AlgorithmKind::kChoco: {
      std::unique_ptr<Algorithm> a(new Choco(dim, o.consensusStep, o.autoConsensusStep, neighbours,
                                             o.initialPublicCopy, std::move(codec)));
      a->setRobust(o.robust);
      return a;
    }
    case AlgorithmKind::kDeepSqueeze:
      return std::unique_ptr<Algorithm>(
          new DeepSqueeze(dim, o.autoConsensusStep ? kDeepSqueezeAutoStep : o.consensusStep,
                          neighbours, std::move(codec)));
    case AlgorithmKind::kPushSum:
      return std::unique_ptr<Algorithm>(
          new PushSum(dim, o.overlapRounds, neighbours, std::move(codec)));
    case AlgorithmKind::kGt:
      return std::unique_ptr<Algorithm>(
          new Gt(dim,
                 o.autoConsensusStep ? (o.compressed ? kGtAutoStep : kGtAutoStepUncompressed)
                                     : o.consensusStep,
                 o.compressed, neighbours, o.initialPublicCopy, std::move(codec)));
    case AlgorithmKind::kAllreduce:
    case AlgorithmKind::kDiloco:
      return std::unique_ptr<Algorithm>(new Averaged(o.kind, std::move(codec)));
  }
  return invalidArgument("unknown algorithm kind " + std::to_string(static_cast<int>(o.kind)));
}

}  // namespace grapevine::algorithms
