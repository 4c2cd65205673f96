// grapevine::Peer (include/grapevine/grapevine.hpp) over the engine's PeerSession: the same
// PeerCore, algorithms, transports, records and fault handling as `grapevine launch`, with the
// caller's model as an `external` workload whose gradients the caller hands in.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <grapevine/grapevine.hpp>
#include <limits>
#include <map>
#include <set>

#include "runtime/algorithms/algorithm.h"
#include "runtime/common/hash.h"
#include "runtime/common/log.h"
#include "runtime/config/diagnostics.h"
#include "runtime/config/loader.h"
#include "runtime/engine/checkpoint.h"
#include "runtime/engine/driver.h"
#include "runtime/engine/setup.h"

namespace grapevine {
namespace {

// The caller's model as a Workload: the layout is the registered tensors; gradient() returns the
// gradient the caller handed to step() (the engine calls it exactly once per round, at the model
// the caller computed it at); the evaluations are the caller's reported test metrics.
class ExternalWorkload final : public train::Workload {
 public:
  // `buffers[k]`: tensor k is a buffer (Peer::addBuffer): never stepped, no gradient.
  ExternalWorkload(std::vector<train::TensorInfo> layout, std::vector<bool> buffers)
      : layout_(std::move(layout)), buffers_(std::move(buffers)) {
    for (std::size_t k = 0; k < layout_.size(); ++k) {
      count_ += layout_[k].count;
      if (buffers_[k]) bufferRanges_.push_back({layout_[k].offset, layout_[k].count});
    }
  }
  std::string_view name() const override { return "external"; }
  const std::vector<train::TensorInfo>& layout() const override { return layout_; }
  std::size_t parameterCount() const override { return count_; }
  void initParameters(std::span<float>, std::uint64_t) const override {}
  float gradient(std::span<const float>, std::span<float> g) override {
    for (std::size_t k = 0; k < layout_.size(); ++k) {
      const auto& t = layout_[k];
      float* out = g.data() + t.offset;
      if (grads_[k] && !buffers_[k])
        std::memcpy(out, grads_[k], t.count * sizeof(float));
      else
        std::fill(out, out + t.count, 0.0f);
    }
    ++step_;
    return static_cast<float>(loss_);
  }
  Eval evaluateTest(std::span<const float>) const override { return test_; }
  Eval evaluateTrain(std::span<const float>) const override {
    return {std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::quiet_NaN()};
  }

  // `skipMissing`: a null gradient leaves its tensor out of the step (skippedRanges()) instead of
  // being a zero gradient.
  void setGradients(const std::vector<const float*>& grads, double loss, bool skipMissing) {
    grads_ = grads;
    loss_ = loss;
    skipped_.clear();  // keeps its capacity: no allocation once every tensor was skipped once
    for (std::size_t k = 0; k < layout_.size(); ++k) {
      if (buffers_[k] || (skipMissing && grads_[k] == nullptr))
        skipped_.push_back({layout_[k].offset, layout_[k].count});
    }
  }
  std::span<const train::ValueRange> skippedRanges() const override { return skipped_; }
  std::span<const train::ValueRange> bufferRanges() const override { return bufferRanges_; }
  void setTest(const std::optional<double>& accuracy, const std::optional<double>& loss) {
    if (accuracy) test_.accuracy = *accuracy;
    if (loss) test_.loss = *loss;
  }

 private:
  std::vector<train::TensorInfo> layout_;
  std::vector<bool> buffers_;
  std::size_t count_ = 0;
  std::vector<const float*> grads_;
  std::vector<train::ValueRange> skipped_;
  std::vector<train::ValueRange> bufferRanges_;
  double loss_ = std::numeric_limits<double>::quiet_NaN();
  Eval test_{std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::quiet_NaN()};
};

using Code = Error::Code;

// GRAPEVINE_RESUME=1: `grapevine launch --resume` (or a --max-restarts restart) started this
// program to continue from its checkpoints.
bool resumeFromEnvironment() {
  const char* env = std::getenv("GRAPEVINE_RESUME");
  return env != nullptr && std::string_view(env) == "1";
}

[[noreturn]] void fail(const Status& st) {
  Code code = Code::kInternal;
  switch (st.code()) {
    case grapevine::ErrorCode::kInvalidArgument:
    case grapevine::ErrorCode::kResourceExhausted:
      code = Code::kInvalidArgument;
      break;
    case grapevine::ErrorCode::kNotFound:
      code = Code::kNotFound;
      break;
    case grapevine::ErrorCode::kFailedPrecondition:
      code = Code::kFailedPrecondition;
      break;
    case grapevine::ErrorCode::kUnavailable:
    case grapevine::ErrorCode::kDeadlineExceeded:
    case grapevine::ErrorCode::kCancelled:
    case grapevine::ErrorCode::kDataLoss:
      code = Code::kUnavailable;
      break;
    case grapevine::ErrorCode::kAborted:
      code = Code::kAborted;
      break;
    default:
      break;
  }
  throw Error(code, st.message());
}

void check(const Status& st) {
  if (!st.isOk()) fail(st);
}

[[noreturn]] void failState(const std::string& message) {
  throw Error(Code::kFailedPrecondition, message);
}

}  // namespace

struct Peer::Impl {
  enum class State { kCreated, kStarted, kRoundOpen, kFinalized };
  struct Tensor {
    std::string name;
    float* data = nullptr;
    std::size_t count = 0;
    std::size_t offset = 0;
    bool bound = false;   // lives in the engine's buffer (bind())
    bool buffer = false;  // addBuffer(): mixed and averaged, never stepped
  };

  Options options;
  int rank = 0;
  std::string outDir;
  std::shared_ptr<engine::RunPlan> plan;
  std::vector<Tensor> tensors;
  std::size_t count = 0;
  ExternalWorkload* workload = nullptr;  // owned by the core
  std::unique_ptr<engine::PeerSession> session;
  double lr = std::numeric_limits<double>::quiet_NaN();  // setLr(): NaN is the schedule
  State state = State::kCreated;
  std::vector<Event> events;

  engine::PeerCore& core() { return session->core(); }

  void collectEvents() {
    if (!session) return;
    for (auto& e : session->takeEvents()) {
      Event out;
      switch (e.kind) {
        case engine::SessionEvent::Kind::kSuspect:
          out.kind = EventKind::kSuspect;
          break;
        case engine::SessionEvent::Kind::kDead:
          out.kind = EventKind::kDead;
          break;
        case engine::SessionEvent::Kind::kDiverged:
          out.kind = EventKind::kDiverged;
          break;
        case engine::SessionEvent::Kind::kRevived:
          out.kind = EventKind::kRevived;
          break;
      }
      out.peer = e.peer;
      out.round = e.round;
      out.message = std::move(e.message);
      events.push_back(std::move(out));
    }
  }

  // The caller's values into the engine's buffer (tensors not bound).
  void gather() {
    auto x = core().mutableModel();
    for (const auto& t : tensors) {
      if (!t.bound) std::memcpy(x.data() + t.offset, t.data, t.count * sizeof(float));
    }
  }
  // And back.
  void scatter() {
    const auto x = core().model();
    for (const auto& t : tensors) {
      if (!t.bound) std::memcpy(t.data, x.data() + t.offset, t.count * sizeof(float));
    }
  }

  void add(const std::string& call, const std::string& name, float* data, std::size_t count,
           bool buffer) {
    if (state != State::kCreated) failState(call + "('" + name + "') after start()");
    if (name.empty()) throw Error(Code::kInvalidArgument, call + ": the name is empty");
    if (!data) throw Error(Code::kInvalidArgument, call + "('" + name + "'): data is null");
    if (count == 0) throw Error(Code::kInvalidArgument, call + "('" + name + "'): count is 0");
    for (const auto& t : tensors) {
      if (t.name == name) {
        throw Error(Code::kInvalidArgument,
                    call + ": a tensor named '" + name + "' is registered already");
      }
    }
    tensors.push_back({name, data, count, this->count, false, buffer});
    this->count += count;
  }

  void requireStarted(const char* call) {
    if (state == State::kCreated) failState(std::string(call) + " before start()");
    if (state == State::kFinalized) failState(std::string(call) + " after finalize()");
    if (state == State::kRoundOpen) {
      failState(std::string(call) + " while a round is open: call wait() first");
    }
  }

  void startRound(const engine::RoundInput& input, const char* call) {
    requireStarted(call);
    gather();
    const Status st = session->startRound(input);
    collectEvents();
    check(st);
    // The caller computes its next gradient at these values (x_half) while messages fly.
    scatter();
    state = State::kRoundOpen;
  }
};

Peer::Peer(const Options& options) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.options = options;
  config::LoadOptions lo;
  lo.overrides = options.overrides;
  // Neither a path nor a text: the config `grapevine launch ... -- COMMAND` resolved for us.
  std::string path = options.configPath;
  if (path.empty() && options.configText.empty()) {
    const char* env = std::getenv("GRAPEVINE_CONFIG");
    if (!env || !*env) {
      throw Error(Code::kInvalidArgument,
                  "no config: set Options::configPath or configText, or run under `grapevine "
                  "launch CONFIG -- COMMAND` (GRAPEVINE_CONFIG)");
    }
    path = env;
  }
  config::LoadResult r = path.empty() ? config::loadString(options.configText, "<config text>", lo)
                                      : config::loadFile(path, lo);
  if (!r.ok()) {
    throw Error(Code::kInvalidArgument,
                "the config has errors:\n" + config::formatDiagnostics(r.diagnostics));
  }
  const config::Config& c = r.config;
  if (c.workload.name != train::WorkloadKind::kExternal) {
    throw Error(Code::kInvalidArgument,
                "workload.name is '" + std::string(train::workloadKindName(c.workload.name)) +
                    "': a program that trains its own model through the API needs "
                    "workload.name: external");
  }
  if (c.algorithm.localSteps != 1) {
    throw Error(Code::kInvalidArgument,
                "algorithm.local_steps is " + std::to_string(c.algorithm.localSteps) +
                    ": with workload.name external every step() is one round (local_steps 1); "
                    "take extra local steps with your own optimizer and call mix()");
  }
  m.rank = options.rank;
  if (m.rank < 0) {
    auto fromEnv = config::rankFromEnvironment();
    if (!fromEnv.isOk()) throw Error(Code::kInvalidArgument, fromEnv.status().message());
    m.rank = *fromEnv;
  }
  if (m.rank < 0) {
    throw Error(Code::kInvalidArgument,
                "no rank: pass one, or set GRAPEVINE_RANK (grapevine launch ... -- COMMAND does), "
                "or run under srun (SLURM_PROCID) or mpirun (OMPI_COMM_WORLD_RANK, PMIX_RANK)");
  }
  if (m.rank >= c.peers.count) {
    throw Error(Code::kInvalidArgument, "rank " + std::to_string(m.rank) +
                                            " is out of range: the config has " +
                                            std::to_string(c.peers.count) + " peers (ranks 0-" +
                                            std::to_string(c.peers.count - 1) + ")");
  }
  m.outDir = options.outDir;
  if (m.outDir.empty()) {
    const char* env = std::getenv("GRAPEVINE_OUT");
    m.outDir = env && *env ? env : c.output.dir;
  }
  log::setLevel(c.run.logLevel);
  log::setPrefix("peer " + std::to_string(m.rank));
  auto plan = engine::makeRunPlan(c);
  check(plan.status());
  m.plan = std::move(*plan);
}

Peer::~Peer() {
  try {
    finalize(false);
  } catch (...) {
    // A destructor must not throw; finalize() already logged what went wrong.
  }
}

int Peer::rank() const { return impl_->rank; }
int Peer::worldSize() const { return impl_->plan->config.peers.count; }
std::int64_t Peer::plannedRounds() const { return impl_->plan->config.run.rounds; }
std::string Peer::outDir() const { return impl_->outDir; }
std::string Peer::checkpointFolder() const {
  return engine::checkpointFolder(impl_->plan->config, impl_->outDir, impl_->rank);
}
std::string Peer::configYaml() const { return config::toYaml(impl_->plan->config); }
std::size_t Peer::parameterCount() const { return impl_->count; }

void Peer::addTensor(const std::string& name, float* data, std::size_t count) {
  impl_->add("addTensor", name, data, count, /*buffer=*/false);
}

void Peer::addBuffer(const std::string& name, float* data, std::size_t count) {
  impl_->add("addBuffer", name, data, count, /*buffer=*/true);
}

void Peer::start() {
  Impl& m = *impl_;
  if (m.state != Impl::State::kCreated) failState("start() called twice");
  if (m.tensors.empty()) failState("start() before any addTensor()");
  std::vector<train::TensorInfo> layout;
  std::vector<bool> buffers;
  std::vector<float> x0(m.count);
  for (const auto& t : m.tensors) {
    layout.push_back({t.name, {static_cast<std::int64_t>(t.count)}, t.offset, t.count});
    buffers.push_back(t.buffer);
    std::memcpy(x0.data() + t.offset, t.data, t.count * sizeof(float));
  }
  auto workload = std::make_unique<ExternalWorkload>(layout, buffers);
  m.workload = workload.get();
  const bool resume = m.options.resume || resumeFromEnvironment();
  // A restart (resume) is a new incarnation, as `grapevine peer --resume` makes it.
  const std::uint32_t incarnation =
      resume && m.options.incarnation == 0 ? engine::freshIncarnation() : m.options.incarnation;
  auto core =
      engine::makePeerWith(*m.plan, m.rank, incarnation, std::move(workload), std::move(x0));
  check(core.status());
  if ((*core)->algorithm().tracksDirection() &&
      std::find(buffers.begin(), buffers.end(), true) != buffers.end()) {
    // Its tracker takes every value's gradient: a buffer would be stepped along with it.
    throw Error(Code::kInvalidArgument,
                "addBuffer: algorithm.name " +
                    std::string(algorithms::algorithmKindName(m.plan->config.algorithm.name)) +
                    " tracks gradients over the whole model, so it cannot carry buffers; keep "
                    "them local (grapevine.torch: buffers=\"local\")");
  }
  engine::PeerRunOptions ro;
  ro.rank = m.rank;
  ro.incarnation = incarnation;
  ro.outDir = m.outDir;
  ro.external = true;
  ro.resume = resume;
  m.session = std::make_unique<engine::PeerSession>(*m.plan, ro, std::move(*core));
  check(m.session->open());
  if (m.session->resumedFrom() < 0 && !m.session->joinedRunning()) {
    // Every peer starts from the lowest rank's values, and the algorithm's public copies from
    // them. (A restored checkpoint holds both; a peer joining a training under way keeps its own
    // and its edges resync: its neighbours run no collective now.)
    check(m.session->runCollectives(engine::adoptLowestCollectives(*m.plan)));
    auto algorithm = engine::makePeerAlgorithm(*m.plan, m.rank, layout, m.session->core().model());
    check(algorithm.status());
    m.session->core().resetAlgorithm(std::move(*algorithm));
  }
  m.collectEvents();
  m.state = Impl::State::kStarted;
  m.scatter();
}

float* Peer::bind(const std::string& name) {
  Impl& m = *impl_;
  m.requireStarted("bind()");
  for (auto& t : m.tensors) {
    if (t.name != name) continue;
    t.bound = true;
    return m.core().mutableModel().data() + t.offset;
  }
  throw Error(Code::kNotFound, "bind('" + name + "'): no such tensor");
}

void Peer::startStep(const std::vector<const float*>& grads, double loss) {
  Impl& m = *impl_;
  if (grads.size() != m.tensors.size()) {
    throw Error(Code::kInvalidArgument, "step: " + std::to_string(grads.size()) +
                                            " gradients for " + std::to_string(m.tensors.size()) +
                                            " registered tensors");
  }
  if (m.workload) m.workload->setGradients(grads, loss, m.options.skipMissingGradients);
  m.startRound({true, loss, m.lr}, "step()");
}

void Peer::startMix(double loss) { impl_->startRound({false, loss, impl_->lr}, "mix()"); }

double Peer::scheduledLr(std::int64_t round) const {
  const Impl& m = *impl_;
  if (!m.session) failState("scheduledLr() before start()");
  return m.session->core().optimizer().lr(round);
}

void Peer::setLr(double lr) {
  if (!std::isnan(lr) && !(std::isfinite(lr) && lr >= 0)) {
    throw Error(Code::kInvalidArgument, "setLr(" + std::to_string(lr) +
                                            "): the lr must be finite and >= 0 (NaN: back to "
                                            "optimizer.*'s schedule)");
  }
  impl_->lr = lr;
}

void Peer::wait() {
  Impl& m = *impl_;
  if (m.state != Impl::State::kRoundOpen) failState("wait() without a started round");
  const Status st = m.session->completeRound();
  m.collectEvents();
  m.state = Impl::State::kStarted;
  m.scatter();
  check(st);
}

void Peer::step(const std::vector<const float*>& grads, double loss) {
  startStep(grads, loss);
  wait();
}

void Peer::mix(double loss) {
  startMix(loss);
  wait();
}

void Peer::report(const std::vector<std::pair<std::string, double>>& metrics) {
  Impl& m = *impl_;
  if (m.state == Impl::State::kFinalized) failState("report() after finalize()");
  nlohmann::json j = nlohmann::json::object();
  std::optional<double> accuracy, loss;
  for (const auto& [name, value] : metrics) {
    if (name.empty()) throw Error(Code::kInvalidArgument, "report: a metric has no name");
    j[name] = std::isfinite(value) ? nlohmann::json(value) : nlohmann::json(nullptr);
    if (name == "test_accuracy") accuracy = value;
    if (name == "test_loss") loss = value;
  }
  if (m.workload) m.workload->setTest(accuracy, loss);
  if (m.session) {
    m.session->addMetrics(j);
  } else {
    failState("report() before start()");
  }
}

std::vector<std::pair<std::string, std::vector<float>>> Peer::state() const {
  Impl& m = *impl_;
  m.requireStarted("state()");
  std::vector<std::pair<std::string, std::vector<float>>> out;
  const auto momentum = m.core().optimizer().momentumBuffer();
  if (!momentum.empty())
    out.emplace_back("momentum", std::vector<float>(momentum.begin(), momentum.end()));
  if (auto* outer = m.core().outer()) {
    // The anchor: the model this round's mix() starts the outer step from (the caller's steps since
    // the last round moved the parameters away from it).
    const auto om = outer->momentum();
    if (!om.empty()) out.emplace_back("outer_momentum", std::vector<float>(om.begin(), om.end()));
    const auto anchor = m.core().anchor();
    out.emplace_back("outer_anchor", std::vector<float>(anchor.begin(), anchor.end()));
  }
  for (auto& b : m.core().algorithm().state()) out.push_back(std::move(b));
  return out;
}

void Peer::loadState(const std::vector<std::pair<std::string, std::vector<float>>>& state) {
  Impl& m = *impl_;
  m.requireStarted("loadState()");
  auto rest = state;
  const bool hasMomentum = !m.core().optimizer().momentumBuffer().empty();
  if (hasMomentum) {
    if (rest.empty() || rest.front().first != "momentum") {
      throw Error(Code::kInvalidArgument, "loadState: the first buffer must be 'momentum'");
    }
    check(m.core().optimizer().setMomentumBuffer(rest.front().second));
    rest.erase(rest.begin());
  }
  if (auto* outer = m.core().outer()) {
    // outer_momentum (with outer.momentum > 0), then outer_anchor, as state() lists them; every
    // name and size is checked before anything changes.
    std::vector<std::pair<std::string, std::size_t>> want;
    if (!outer->momentum().empty()) want.emplace_back("outer_momentum", outer->momentum().size());
    want.emplace_back("outer_anchor", m.core().model().size());
    const std::size_t need = want.size();
    for (std::size_t k = 0; k < need; ++k) {
      const auto& [name, size] = want[k];
      if (rest.size() <= k || rest[k].first != name) {
        throw Error(Code::kInvalidArgument, "loadState: outer.optimizer is on: '" + name +
                                                "' must follow the optimizer's momentum");
      }
      if (rest[k].second.size() != size) {
        throw Error(Code::kInvalidArgument, "loadState: '" + name + "' has " +
                                                std::to_string(rest[k].second.size()) +
                                                " values, this peer has " + std::to_string(size));
      }
    }
    check(m.core().mutableAlgorithm().loadState(
        std::vector<std::pair<std::string, std::vector<float>>>(rest.begin() + need, rest.end())));
    if (need == 2) check(outer->setMomentum(rest.front().second));
    check(m.core().setAnchor(rest[need - 1].second));
    return;
  }
  check(m.core().mutableAlgorithm().loadState(rest));
}

std::vector<Event> Peer::pollEvents() {
  impl_->collectEvents();
  return std::exchange(impl_->events, {});
}

Stats Peer::stats() const {
  const Impl& m = *impl_;
  Stats s;
  if (!m.session) return s;
  const engine::PeerCore& core = m.session->core();
  const auto& c = core.counters();
  s.rounds = m.session->roundsDone();
  s.bytesSent = c.bytesSent;
  s.bytesReceived = c.bytesReceived;
  s.bytesDenseEquivalent = c.bytesDenseEquivalent;
  for (const auto& [reason, n] : c.dropped) s.droppedFrames += n;
  s.suspectRounds = c.suspectRounds;
  s.neighbours = static_cast<int>(core.neighbours().size());
  s.liveNeighbours = core.liveDegree();
  if (const auto step = core.algorithm().stepReport()) s.consensusStep = step->step;
  s.lr = core.lastLr();
  s.loss = core.lastLoss();
  s.lastCheckpointRound = m.session->lastCheckpointRound();
  s.resumedFromRound = m.session->resumedFrom();
  return s;
}

void Peer::finalize(bool average) {
  Impl& m = *impl_;
  if (m.state == Impl::State::kFinalized) return;
  if (m.state == Impl::State::kCreated) {
    m.state = Impl::State::kFinalized;
    return;
  }
  if (average && m.plan->config.algorithm.robust != algorithms::RobustRule::kNone) {
    // Every peer has the same config: all of them keep their own, none waits in the collective
    // (an error here would end a long run's `with` block with nothing saved).
    log::warn(
        "finalize(average=True) with algorithm.robust: each peer keeps its own model (an exact "
        "average would sum every member's model, a hostile or quarantined one's too)");
    average = false;
  }
  if (m.state == Impl::State::kRoundOpen) {
    // Close the open round first; its failure (a divergence) is reported by finish() below.
    (void)m.session->completeRound();
    m.scatter();
  } else {
    m.gather();
  }
  m.state = Impl::State::kFinalized;
  const Status st = m.session->finish(average);
  m.collectEvents();
  m.scatter();
  // A diverged run was reported by wait() already; its files are written.
  if (st.code() != grapevine::ErrorCode::kAborted) check(st);
}

}  // namespace grapevine
