// A user program for `grapevine launch CONFIG -- launch_api_child [EXIT_RANK EXIT_ROUND]`, as the
// launch tests run it: it drives one peer through the public API only (everything from the
// environment launch sets), minimising 1/2 |x - c_rank|^2 with Grapevine's optimizer, reports a
// metric as test_accuracy, and ends with finalize(average). With EXIT_RANK and EXIT_ROUND, that
// rank exits with status 7 at that round, as a crashing training script would.
#include <cstdio>
#include <cstdlib>
#include <grapevine/grapevine.hpp>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  const int exitRank = argc > 2 ? std::atoi(argv[1]) : -1;
  const long long exitRound = argc > 2 ? std::atoll(argv[2]) : -1;
  try {
    grapevine::Options o;
    const char* config = std::getenv("GRAPEVINE_CONFIG");
    if (!config) {
      std::fprintf(stderr, "launch_api_child: GRAPEVINE_CONFIG is not set\n");
      return 2;
    }
    o.configPath = config;  // rank and output folder: GRAPEVINE_RANK, GRAPEVINE_OUT
    grapevine::Peer peer(o);
    const int rank = peer.rank();
    std::vector<float> x(32, 0.0f), grad(32), c(32);
    for (std::size_t k = 0; k < c.size(); ++k) c[k] = static_cast<float>(rank) + 0.01f * k;
    peer.addTensor("x", x.data(), x.size());
    peer.start();
    std::printf("rank %d of %d started\n", rank, peer.worldSize());
    std::fflush(stdout);
    for (std::int64_t t = 0; t < peer.plannedRounds(); ++t) {
      if (rank == exitRank && t == exitRound) {
        std::printf("rank %d gives up at round %lld\n", rank, static_cast<long long>(t));
        std::fflush(stdout);
        std::_Exit(7);
      }
      double loss = 0.0;
      for (std::size_t k = 0; k < x.size(); ++k) {
        grad[k] = x[k] - c[k];
        loss += 0.5 * grad[k] * grad[k];
      }
      peer.step({grad.data()}, loss);
    }
    peer.report({{"test_accuracy", 0.5 + 0.1 * rank}});
    peer.finalize(/*average=*/true);
    return 0;
  } catch (const grapevine::Error& e) {
    std::fprintf(stderr, "launch_api_child: %s\n", e.what());
    return 1;
  }
}
