#include "runtime/train/optimizer.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <vector>

using namespace grapevine;
using namespace grapevine::train;

namespace {

OptimizerOptions make(double beta, bool nesterov, MomentumKind kind, double wd = 0.1) {
  OptimizerOptions o;
  o.momentum = beta;
  o.nesterov = nesterov;
  o.momentumKind = kind;
  o.weightDecay = wd;
  REQUIRE(o.validate().isOk());
  return o;
}

void checkVec(const std::vector<float>& got, const std::vector<float>& want) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) CHECK(got[i] == Approx(want[i]).margin(1e-6));
}

// Two rounds with beta 0.5, wd 0.1:
//   round 0: g = [1, -2], x = [2, 4]  -> g' = [1.2, -1.6]
//   round 1: g = [0.4, 0], x = [1, 1] -> g' = [0.5, 0.1]
const std::vector<float> kG0 = {1, -2}, kX0 = {2, 4}, kG1 = {0.4f, 0}, kX1 = {1, 1};

}  // namespace

TEST_CASE("local heavy-ball momentum", "[train][optimizer]") {
  Optimizer opt(make(0.5, false, MomentumKind::kLocal), 2);
  std::vector<float> u(2);
  opt.direction(kG0, kX0, u, 0);
  checkVec(u, {1.2f, -1.6f});          // m = g'
  opt.afterMixing(kX0, kX1, 0.25, 1);  // no-op for local momentum
  opt.direction(kG1, kX1, u, 1);
  checkVec(u, {1.1f, -0.7f});  // m = 0.5 m + g'
}

TEST_CASE("local Nesterov momentum", "[train][optimizer]") {
  Optimizer opt(make(0.5, true, MomentumKind::kLocal), 2);
  std::vector<float> u(2);
  opt.direction(kG0, kX0, u, 0);
  checkVec(u, {1.8f, -2.4f});  // g' + 0.5 * [1.2, -1.6]
  opt.direction(kG1, kX1, u, 1);
  checkVec(u, {1.05f, -0.25f});  // g' + 0.5 * [1.1, -0.7]
  checkVec(std::vector<float>(opt.momentumBuffer().begin(), opt.momentumBuffer().end()),
           {1.1f, -0.7f});
}

TEST_CASE("quasi-global momentum follows the mixed model's displacement", "[train][optimizer]") {
  for (bool nesterov : {false, true}) {
    Optimizer opt(make(0.5, nesterov, MomentumKind::kQuasiGlobal), 2);
    std::vector<float> u(2);
    opt.direction(kG0, kX0, u, 0);
    if (nesterov) {
      checkVec(u, {1.8f, -2.4f});  // mhat = 0: u = g' + 0.5 g'
    } else {
      checkVec(u, {1.2f, -1.6f});  // mhat = 0: u = g'
    }
    // The step and mixing moved x from [2, 4] to [1.5, 4.5] with lr 0.25: d = [2, -2],
    // mhat = 0.5 * 0 + 0.5 * d = [1, -1].
    opt.afterMixing(kX0, std::vector<float>{1.5f, 4.5f}, 0.25, 1);
    checkVec(std::vector<float>(opt.momentumBuffer().begin(), opt.momentumBuffer().end()), {1, -1});
    opt.direction(kG1, kX1, u, 1);
    if (nesterov) {
      checkVec(u, {1.0f, -0.1f});  // g' + 0.5 (0.5 mhat + g')
    } else {
      checkVec(u, {1.0f, -0.4f});  // g' + 0.5 mhat
    }
    // direction() leaves mhat alone; lr 0 leaves it alone too.
    opt.afterMixing(kX0, kX1, 0.0, 1);
    checkVec(std::vector<float>(opt.momentumBuffer().begin(), opt.momentumBuffer().end()), {1, -1});
  }
}

TEST_CASE("quasi-global momentum divides a round's change by lr * local_steps",
          "[train][optimizer]") {
  // The same displacement [2, 4] -> [1.5, 4.5] over H = 2 steps of lr 0.25: d = [1, -1] (per step),
  // mhat = 0.5 * d. Over H = 4 steps: d = [0.5, -0.5].
  for (const auto& [steps, want] : {std::pair<int, float>{1, 1.0f}, {2, 0.5f}, {4, 0.25f}}) {
    Optimizer opt(make(0.5, false, MomentumKind::kQuasiGlobal), 2);
    opt.afterMixing(kX0, std::vector<float>{1.5f, 4.5f}, 0.25, steps);
    INFO("local steps " << steps);
    checkVec(std::vector<float>(opt.momentumBuffer().begin(), opt.momentumBuffer().end()),
             {want, -want});
  }
}

namespace {
// One peer alone (no mixing) on the flat f(x) = 0.1 x^2 / 2 (where the buffer's own gain, not
// the gradient, decides stability), rounds of H local steps as PeerCore takes them (x <- x - lr * u
// per step, afterMixing once per round), told `reportedSteps` steps. Returns the final
// |x| + |mhat| (inf or nan once it blew up).
double qgmRun(bool nesterov, int steps, int reportedSteps, int rounds) {
  Optimizer opt(make(0.9, nesterov, MomentumKind::kQuasiGlobal, 0.0), 1);
  const double lr = 0.1;
  std::vector<float> x{1.0f}, before(1), g(1), u(1);
  for (int t = 0; t < rounds; ++t) {
    before = x;
    for (int s = 0; s < steps; ++s) {
      g[0] = 0.1f * x[0];
      opt.direction(g, x, u, t);
      x[0] -= static_cast<float>(lr) * u[0];
    }
    opt.afterMixing(before, x, lr, reportedSteps);
  }
  return std::fabs(x[0]) + std::fabs(opt.momentumBuffer()[0]);
}
}  // namespace

TEST_CASE("quasi-global momentum with local steps converges; dividing by lr alone diverges",
          "[train][optimizer]") {
  for (bool nesterov : {false, true}) {
    for (int steps : {2, 4}) {
      INFO((nesterov ? "nesterov" : "heavy ball") << ", H = " << steps);
      // Told the true H, the optimizer reaches the minimum x = 0 (and mhat = 0 there).
      CHECK(qgmRun(nesterov, steps, steps, 2000) < 1e-6);
      // Told one step (d = change / lr, the old rule), the buffer's gain 0.9 (1 + 0.1 H) > 1.
      const double wrong = qgmRun(nesterov, steps, 1, 2000);
      CHECK(!(wrong < 1.0));
    }
  }
}

TEST_CASE("no momentum: u = g + wd x, u may alias g", "[train][optimizer]") {
  Optimizer opt(make(0.0, false, MomentumKind::kLocal, 0.5), 2);
  CHECK(opt.momentumBuffer().empty());
  std::vector<float> g = kG0;
  opt.direction(g, kX0, g, 0);
  checkVec(g, {2.0f, 0.0f});
}

TEST_CASE("momentum buffer restore checks its size", "[train][optimizer]") {
  Optimizer opt(make(0.9, false, MomentumKind::kLocal), 3);
  CHECK(opt.setMomentumBuffer(std::vector<float>{1, 2, 3}).isOk());
  CHECK(opt.momentumBuffer()[2] == 3.0f);
  CHECK_FALSE(opt.setMomentumBuffer(std::vector<float>{1, 2}).isOk());
}

TEST_CASE("learning-rate schedules", "[train][lr]") {
  LrSchedule constant;
  constant.kind = LrScheduleKind::kConstant;
  constant.lr = 0.1;
  constant.warmupRounds = 4;
  REQUIRE(constant.validate().isOk());
  CHECK(constant.at(-1) == Approx(0.025));
  CHECK(constant.at(0) == Approx(0.025));
  CHECK(constant.at(1) == Approx(0.05));
  CHECK(constant.at(3) == Approx(0.1));
  CHECK(constant.at(4) == Approx(0.1));
  CHECK(constant.at(1000000) == Approx(0.1));

  LrSchedule cosine;
  cosine.kind = LrScheduleKind::kCosine;
  cosine.lr = 1.0;
  cosine.minLr = 0.1;
  cosine.warmupRounds = 2;
  cosine.totalRounds = 12;
  REQUIRE(cosine.validate().isOk());
  CHECK(cosine.at(0) == Approx(0.5));
  CHECK(cosine.at(2) == Approx(1.0));
  CHECK(cosine.at(7) == Approx(0.55));  // half way: min + (max - min) / 2
  CHECK(cosine.at(4) == Approx(0.1 + 0.9 * 0.5 * (1 + std::cos(M_PI * 0.2))));
  CHECK(cosine.at(12) == Approx(0.1));
  CHECK(cosine.at(99) == Approx(0.1));
  for (int r = 2; r < 12; ++r) CHECK(cosine.at(r + 1) <= cosine.at(r));

  LrSchedule step;
  step.kind = LrScheduleKind::kStep;
  step.lr = 1.0;
  step.milestones = {10, 20};
  step.gamma = 0.1;
  REQUIRE(step.validate().isOk());
  CHECK(step.at(9) == Approx(1.0));
  CHECK(step.at(10) == Approx(0.1));
  CHECK(step.at(19) == Approx(0.1));
  CHECK(step.at(20) == Approx(0.01));

  Optimizer opt(
      [&] {
        OptimizerOptions o;
        o.schedule = step;
        return o;
      }(),
      1);
  CHECK(opt.lr(15) == Approx(0.1));
}

TEST_CASE("adamw: bias-corrected moments, decoupled weight decay, skipped values untouched",
          "[train][optimizer]") {
  OptimizerOptions o;
  o.kind = OptimizerKind::kAdamw;
  o.momentum = 0.9;  // beta1
  o.nesterov = false;
  o.weightDecay = 0.1;
  REQUIRE(o.validate().isOk());
  Optimizer opt(o, 2);
  CHECK(opt.momentumBuffer().size() == 4);  // m, then v
  std::vector<float> u(2);
  // Worked out in double from torch.optim.AdamW's formulas (optimizer.h).
  opt.direction(kG0, kX0, u, 0);
  checkVec(u, {1.19999999f, -0.59999999f});
  opt.direction(kG1, kX1, u, 1);
  checkVec(u, {0.99857519f, -0.57005825f});
  checkVec({opt.momentumBuffer().begin(), opt.momentumBuffer().end()},
           {0.13f, -0.18f, 0.001159f, 0.003996f});
  // A skipped value: no step, moments as they were.
  const std::vector<float> before(opt.momentumBuffer().begin(), opt.momentumBuffer().end());
  const std::vector<ValueRange> skip = {{1, 1}};
  opt.direction(kG0, kX0, u, 2, skip);
  CHECK(u[1] == 0.0f);
  CHECK(opt.momentumBuffer()[1] == before[1]);
  CHECK(opt.momentumBuffer()[3] == before[3]);
  CHECK(opt.momentumBuffer()[0] != before[0]);

  o.momentumKind = MomentumKind::kQuasiGlobal;
  CHECK_THAT(o.validate().message(), Catch::Contains("optimizer.momentum_kind must be local"));
  o.momentumKind = MomentumKind::kLocal;
  o.nesterov = true;
  CHECK_THAT(o.validate().message(), Catch::Contains("no Nesterov form"));
  o.nesterov = false;
  o.beta2 = 1.0;
  CHECK_THAT(o.validate().message(), Catch::Contains("optimizer.beta2"));
  CHECK(parseOptimizerKind("adamw") == OptimizerKind::kAdamw);
  CHECK_FALSE(parseOptimizerKind("adam").has_value());
}

TEST_CASE("optimizer options are validated with the key named", "[train][optimizer]") {
  auto expectError = [](const OptimizerOptions& o, const char* text) {
    const Status st = o.validate();
    INFO(text);
    REQUIRE_FALSE(st.isOk());
    CHECK_THAT(st.message(), Catch::Contains(text));
  };
  OptimizerOptions o;
  o.momentum = 1.0;
  expectError(o, "optimizer.momentum");
  o = {};
  o.momentum = 0;  // nesterov (the default) without momentum
  expectError(o, "optimizer.nesterov");
  o = {};
  o.weightDecay = -1;
  expectError(o, "optimizer.weight_decay");
  o = {};
  o.schedule.lr = -0.1;
  expectError(o, "optimizer.lr");
  o = {};
  o.schedule.lr = 0;  // pure gossip: allowed
  CHECK(o.validate().isOk());
  o = {};
  o.schedule.totalRounds = 0;  // cosine (the default) needs the run's length
  expectError(o, "total rounds");
  o = {};
  o.schedule.kind = LrScheduleKind::kStep;
  expectError(o, "optimizer.milestones");
  o.schedule.milestones = {5, 5};
  expectError(o, "strictly ascending");
  o.schedule.milestones = {5};
  o.schedule.gamma = 2;
  expectError(o, "optimizer.gamma");

  CHECK(parseMomentumKind("quasi-global") == MomentumKind::kQuasiGlobal);
  CHECK_FALSE(parseMomentumKind("global").has_value());
  CHECK(parseLrScheduleKind("cosine") == LrScheduleKind::kCosine);
  CHECK(lrScheduleKindName(LrScheduleKind::kStep) == "step");
}
