// A model of the size people train, through real processes (issue 38): `grapevine launch` of the
// consensus workload at 10M parameters (a 40 MB model), CHOCO + top-1% on the 8-peer exponential
// graph (degree 5), undisturbed. Every peer must finish with no neighbour declared dead, revived,
// rejoined or suspect and no resync: before receive buffers were mapped lazily, each peer
// zero-filled 15 buffers of 80 MB on its loop thread at start-up, its heartbeats went unanswered
// for 6 s, and every peer declared most of its neighbours dead (35 false deaths, 70 dense
// resyncs, 3.5 GB sent where 0.85 GB do). Each peer's peak RSS (final.json's peak_rss_bytes) stays
// within a bound stated in copies of the model (kMaxModelCopies): the buffers that grow with the
// model and are not the algorithm's state are what the bound catches.
#include <catch2/catch.hpp>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "tests/test_util/cli.h"
#include "tests/test_util/ports.h"
#include "tests/test_util/skip.h"

namespace {

using grapevine::test_util::freshDir;
using grapevine::test_util::grapevineBin;
using grapevine::test_util::readFile;
using grapevine::test_util::readSummary;

constexpr std::uint64_t kDim = 10'000'000;
constexpr std::uint64_t kModelBytes = kDim * sizeof(float);
// What a peer may hold, in model copies, at its peak (the finalize averaging included): the model,
// its public copy and 5 replicas (CHOCO's state on a degree-5 graph), CHOCO's difference scratch,
// the gradient, the model before the step, the momentum, the consensus workload's optimum, the
// averaging's f64 state (two copies), with 1.3 copies of receive and send buffers, allocator slack
// and the binary: 14.2-14.4 measured, bounded at 15.5. Before lazy buffers it was 37 (1.5 GB).
// Issue 38's target (460 MB, 11.5 copies, the algorithm's state + 10% + 64 MB) is not met yet: it
// needs CHOCO's lower-memory public copy (one weighted sum instead of 5 replicas).
constexpr double kMaxModelCopies = 15.5;

void runUndisturbed(const std::string& backend) {
  const std::string dir = freshDir("big_model_test_" + backend);
  const int port = grapevine::test_util::freeBasePort(8);
  std::ofstream(dir + "/big.yaml") << "run: { name: big, seed: 1, rounds: 12 }\n"
                                      "peers: { count: 8, base_port: "
                                   << port
                                   << " }\n"
                                      "topology: { kind: exponential }\n"
                                      "transport: { backend: "
                                   << backend
                                   << " }\n"
                                      "algorithm: { name: choco, consensus_step: 0.1 }\n"
                                      "optimizer: { lr: 0.05 }\n"
                                      "compression: { method: top-k, ratio: 0.01 }\n"
                                      "workload: { name: consensus, dim: "
                                   << kDim << " }\n"
                                   << "output: { dir: " << dir << "/out }\n";
  const int rc = grapevine::test_util::runQuiet(grapevineBin() + " launch " + dir + "/big.yaml > " +
                                                dir + "/launch.log 2>&1; exit $?");
  INFO(readFile(dir + "/launch.log"));
  REQUIRE(rc == 0);
  const nlohmann::json s = readSummary(dir + "/out");
  CHECK(s.at("peers_finished") == 8);
  for (const auto& p : s.at("per_peer")) {
    INFO("peer " << p.at("rank") << ": " << p.dump());
    CHECK(p.at("finished") == true);
    CHECK(p.at("dead_neighbours") == 0);
    CHECK(p.at("revived_neighbours") == 0);
    CHECK(p.at("rejoined_neighbours") == 0);
    CHECK(p.at("suspect_rounds") == 0);
    CHECK(p.at("resyncs") == 0);
    const double copies = p.at("peak_rss_bytes").get<double>() / double(kModelBytes);
    INFO("peak RSS " << copies << " model copies");
    CHECK(copies <= kMaxModelCopies);
  }
  CHECK(s.at("dead_neighbours_total") == 0);
  CHECK(s.at("revived_neighbours_total") == 0);
}

}  // namespace

TEST_CASE("a 10M-parameter model on 8 peers over tcp: no false death, no resync, bounded memory",
          "[big][tcp]") {
  runUndisturbed("tcp");
}

TEST_CASE("a 10M-parameter model on 8 peers over ucx: no false death, no resync, bounded memory",
          "[big][ucx]") {
  std::string why;
  if (!grapevine::test_util::transportUsable("ucx", &why)) {
    GV_SKIP_MISSING("ucx", "the ucx transport is not usable in this build:\n" << why);
  }
  runUndisturbed("ucx");
}
