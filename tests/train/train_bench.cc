// Manual benchmark (not a ctest test): single-process training on the full Fashion-MNIST training
// set, reporting time per gradient step and the step at which test accuracy first reaches a target.
//   build/tests/train_bench --model mlp --hidden 256 --lr 0.05 --momentum 0.9 --batch 64
//       --steps 3000 --eval-every 100 --target 0.85
//   build/tests/train_bench --time-only      (step time of every model at batch 32 and 64)
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "runtime/train/optimizer.h"
#include "runtime/train/workload.h"

using namespace grapevine;
using namespace grapevine::train;
using Clock = std::chrono::steady_clock;

namespace {

std::vector<int> parseList(const std::string& s) {
  std::vector<int> out;
  size_t pos = 0;
  while (pos <= s.size()) {
    const size_t comma = s.find(',', pos);
    const std::string item =
        s.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    if (!item.empty()) out.push_back(std::stoi(item));
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return out;
}

double secondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

}  // namespace

int main(int argc, char** argv) {
  WorkloadOptions w;
  OptimizerOptions o;  // plain SGD at a constant rate unless --momentum/--nesterov say otherwise
  o.schedule.kind = LrScheduleKind::kConstant;
  o.schedule.lr = 0.05;
  o.momentum = 0.0;
  o.nesterov = false;
  std::string model = "mlp";
  long steps = 2000, evalEvery = 100;
  double target = 0.85;
  bool timeOnly = false;
  std::uint64_t seed = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&] { return std::string(i + 1 < argc ? argv[++i] : ""); };
    if (a == "--model")
      model = next();
    else if (a == "--hidden")
      w.hidden = parseList(next());
    else if (a == "--channels")
      w.cnnChannels = parseList(next());
    else if (a == "--cnn-hidden")
      w.cnnHidden = std::stoi(next());
    else if (a == "--lr")
      o.schedule.lr = std::stod(next());
    else if (a == "--momentum")
      o.momentum = std::stod(next());
    else if (a == "--nesterov")
      o.nesterov = true;
    else if (a == "--wd")
      o.weightDecay = std::stod(next());
    else if (a == "--batch")
      w.batchSize = std::stoi(next());
    else if (a == "--steps")
      steps = std::stol(next());
    else if (a == "--eval-every")
      evalEvery = std::stol(next());
    else if (a == "--target")
      target = std::stod(next());
    else if (a == "--seed")
      seed = std::stoull(next());
    else if (a == "--time-only")
      timeOnly = true;
    else {
      std::fprintf(stderr, "unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  auto kindFor = [](const std::string& m) {
    return m == "softmax" ? WorkloadKind::kFashionMnistSoftmax
           : m == "cnn"   ? WorkloadKind::kFashionMnistCnn
                          : WorkloadKind::kFashionMnistMlp;
  };

  if (timeOnly) {
    for (const char* m : {"softmax", "mlp", "cnn"}) {
      for (int batch : {32, 64}) {
        WorkloadOptions t = w;
        t.kind = kindFor(m);
        t.batchSize = batch;
        auto shared = loadSharedData(t);
        if (!shared.isOk()) {
          std::fprintf(stderr, "%s\n", shared.status().toString().c_str());
          return 1;
        }
        auto wl = makeWorkload(t, 0, 1, seed, *shared);
        std::vector<float> x((*wl)->parameterCount()), g(x.size());
        (*wl)->initParameters(x, seed);
        for (int i = 0; i < 20; ++i) (*wl)->gradient(x, g);  // warm up
        const int reps = m == std::string("cnn") ? 100 : 400;
        const auto t0 = Clock::now();
        for (int i = 0; i < reps; ++i) (*wl)->gradient(x, g);
        const double perStep = secondsSince(t0) / reps;
        const auto t1 = Clock::now();
        const auto eval = (*wl)->evaluateTest(x);
        std::printf(
            "%-8s batch %2d params %8zu  step %.3f ms  (test eval 10k: %.0f ms, acc %.3f)\n", m,
            batch, x.size(), perStep * 1e3, secondsSince(t1) * 1e3, eval.accuracy);
      }
    }
    return 0;
  }

  w.kind = kindFor(model);
  auto shared = loadSharedData(w);
  if (!shared.isOk()) {
    std::fprintf(stderr, "%s\n", shared.status().toString().c_str());
    return 1;
  }
  auto wl = makeWorkload(w, 0, 1, seed, *shared);
  if (!wl.isOk()) {
    std::fprintf(stderr, "%s\n", wl.status().toString().c_str());
    return 1;
  }
  if (auto st = o.validate(); !st.isOk()) {
    std::fprintf(stderr, "%s\n", st.toString().c_str());
    return 2;
  }
  Workload& work = **wl;
  Optimizer opt(o, work.parameterCount());
  std::vector<float> x(work.parameterCount()), g(x.size()), u(x.size());
  work.initParameters(x, seed);
  double trainSeconds = 0.0;
  long reached = -1;
  for (long s = 1; s <= steps; ++s) {
    const auto t0 = Clock::now();
    work.gradient(x, g);
    opt.direction(g, x, u, s - 1);
    const float lr = static_cast<float>(opt.lr(s - 1));
    for (size_t i = 0; i < x.size(); ++i) x[i] -= lr * u[i];
    trainSeconds += secondsSince(t0);
    if (s % evalEvery == 0 || s == steps) {
      const auto e = work.evaluateTest(x);
      std::printf(
          "step %6ld  epoch %.2f  test loss %.4f  acc %.4f  train time %.1f s (%.3f ms/step)\n", s,
          double(s) * w.batchSize / 60000.0, e.loss, e.accuracy, trainSeconds,
          trainSeconds / s * 1e3);
      if (e.accuracy >= target && reached < 0) {
        reached = s;
        std::printf("reached %.2f at step %ld (%.1f s of training)\n", target, s, trainSeconds);
        break;
      }
    }
  }
  if (reached < 0) std::printf("did not reach %.2f in %ld steps\n", target, steps);
  return 0;
}
