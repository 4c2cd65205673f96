// algorithm.name: gt with real processes (issue 18): `grapevine launch` of 8 peers on a ring over
// tcp (and ucx and libfabric where usable), on the heterogeneous quadratic with deterministic
// gradients and a constant step, uncompressed and with top-k. Every peer's final model
// (model-<r>.bin) is the exact optimum x* = sum_i a_i b_i / sum_i a_i^2, solved here from the data
// file.
#include <catch2/catch.hpp>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "runtime/engine/summary.h"
#include "tests/test_util/cli.h"
#include "tests/test_util/ports.h"
#include "tests/test_util/quadratic.h"
#include "tests/test_util/skip.h"

namespace {

constexpr int kPeers = 8;
constexpr int kDim = 10;

std::vector<double> optimum(const std::string& data) {
  std::ifstream in(data);
  const auto j = nlohmann::json::parse(in);
  double a2 = 0;
  std::vector<double> ab(kDim, 0.0);
  for (int i = 0; i < kPeers; ++i) {
    const double a = j["a"][i].get<double>();
    a2 += a * a;
    for (int k = 0; k < kDim; ++k) ab[k] += a * j["b"][i][k].get<double>();
  }
  for (auto& v : ab) v /= a2;
  return ab;
}

}  // namespace

TEST_CASE("gt over real processes reaches the exact optimum of the heterogeneous quadratic",
          "[slow]") {
  std::vector<std::string> backends = {"tcp"};
  std::string info;
  for (const std::string backend : {"ucx", "libfabric"}) {
    if (grapevine::test_util::transportUsable(backend, &info))
      backends.push_back(backend);
    else
      GV_PART_MISSING(backend, "the " << backend << " transport is not usable here:\n" << info);
  }
  for (const std::string& backend : backends) {
    for (const std::string compression : {"none", "top-k"}) {
      DYNAMIC_SECTION(backend << ", compression " << compression) {
        const std::string dir =
            grapevine::test_util::freshDir("gt_launch_test_" + backend + "_" + compression);
        const std::string data = dir + "/quad8.json";
        grapevine::test_util::writeQuadraticData(data, kPeers, kDim);
        const std::string config = dir + "/config.yaml";
        std::ofstream(config) << "run: { seed: 1, rounds: 800 }\n"
                                 "peers: { count: 8 }\n"
                                 "topology: { kind: ring }\n"
                                 "workload: { name: quadratic, data: \""
                              << data
                              << "\" }\n"
                                 "algorithm: { name: gt, round_timeout: 120 }\n"
                                 "compression: { method: "
                              << compression
                              << ", ratio: 0.5, selector: exact, dense_below: 0 }\n"
                                 "optimizer: { lr: 0.02, momentum: 0, schedule: constant }\n";
        const int port = grapevine::test_util::freeBasePort(kPeers);
        const int rc = grapevine::test_util::runQuiet(
            grapevine::test_util::grapevineBin() + " launch " + config + " --out " + dir +
            "/out --quiet --set transport.backend=" + backend +
            " --set peers.base_port=" + std::to_string(port));
        REQUIRE(rc == 0);
        const auto xs = optimum(data);
        double s = 0;
        for (double v : xs) s += v * v;
        for (int r = 0; r < kPeers; ++r) {
          auto model =
              grapevine::engine::readModel(dir + "/out/model-" + std::to_string(r) + ".bin", kDim);
          INFO("rank " << r << ": " << model.status().toString());
          REQUIRE(model.isOk());
          double e = 0;
          for (int k = 0; k < kDim; ++k) e += ((*model)[k] - xs[k]) * ((*model)[k] - xs[k]);
          INFO("|x_r - x*|^2 / |x*|^2 = " << e / s);
          CHECK(e / s < 1e-8);
        }
      }
    }
  }
}
