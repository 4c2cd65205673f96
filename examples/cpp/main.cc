// Grapevine from a C++ training loop: each peer trains two tensors on a loss of its own,
//   f_r(x) = 1/2 ||x - c_r||^2   (gradient x - c_r),
// whose optimum c_r differs from peer to peer. Gossip pulls the peers together; the model they are
// after is the minimiser of the average loss, the mean of the c_r, and finalize(average=true)
// leaves every peer holding the average of their models.
//
//   example_cpp [CONFIG [KEY=VALUE ...]]
// CONFIG defaults to $GRAPEVINE_CONFIG (which `grapevine launch` sets); KEY=VALUE pairs override
// config keys as `--set` does. The rank comes from GRAPEVINE_RANK (or SLURM_PROCID, ...).
//
// Prints the values of every parameter before and after finalize (registration order), which
// tests/install/install_test.cc reads.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <grapevine/grapevine.hpp>
#include <string>
#include <vector>

namespace {

// Peer r's optimum for parameter k (of all parameters, in registration order).
float target(int rank, std::size_t k) { return 0.5f * static_cast<float>(rank + 1) + 0.1f * k; }

// Gradient of f_r at `x` (the parameters from `offset` on) into `g`; returns the loss.
double gradient(int rank, const std::vector<float>& x, std::size_t offset, std::vector<float>* g) {
  double loss = 0;
  for (std::size_t k = 0; k < x.size(); ++k) {
    (*g)[k] = x[k] - target(rank, offset + k);
    loss += 0.5 * (*g)[k] * (*g)[k];
  }
  return loss;
}

// Euclidean distance of the model to the mean of every peer's optimum.
double distanceToOptimum(int worldSize, const std::vector<float>& a, const std::vector<float>& b) {
  double sum = 0;
  std::size_t k = 0;
  for (const auto* tensor : {&a, &b}) {
    for (float v : *tensor) {
      double mean = 0;
      for (int r = 0; r < worldSize; ++r) mean += target(r, k);
      mean /= worldSize;
      sum += (v - mean) * (v - mean);
      ++k;
    }
  }
  return std::sqrt(sum);
}

void print(const char* label, const std::vector<float>& a, const std::vector<float>& b) {
  std::printf("%s:", label);
  for (float v : a) std::printf(" %.9g", v);
  for (float v : b) std::printf(" %.9g", v);
  std::printf("\n");
}

}  // namespace

int main(int argc, char** argv) {
  grapevine::Options options;
  const char* fromLauncher = std::getenv("GRAPEVINE_CONFIG");
  options.configPath = argc > 1 ? argv[1] : (fromLauncher ? fromLauncher : "");
  for (int i = 2; i < argc; ++i) options.overrides.push_back(argv[i]);
  try {
    grapevine::Peer peer(options);
    const int rank = peer.rank();
    // Two tensors of different sizes. Their starting values differ by rank; start() replaces them
    // with the lowest rank's, so every peer starts from the same model.
    std::vector<float> weight(6, static_cast<float>(rank)), bias(3, -static_cast<float>(rank));
    peer.addTensor("weight", weight.data(), weight.size());
    peer.addTensor("bias", bias.data(), bias.size());
    peer.start();

    std::vector<float> gradWeight(weight.size()), gradBias(bias.size());
    double loss = 0;
    for (std::int64_t t = 0; t < peer.plannedRounds(); ++t) {
      loss =
          gradient(rank, weight, 0, &gradWeight) + gradient(rank, bias, weight.size(), &gradBias);
      peer.step({gradWeight.data(), gradBias.data()}, loss);  // optimizer step + gossip round
    }
    const double distance = distanceToOptimum(peer.worldSize(), weight, bias);
    peer.report({{"distance_to_optimum", distance}});  // into the final record
    const grapevine::Stats stats = peer.stats();
    std::printf(
        "rank %d of %d: %lld rounds, loss %.6g, distance to the optimum %.6g, %llu bytes sent\n",
        rank, peer.worldSize(), static_cast<long long>(stats.rounds), loss, distance,
        static_cast<unsigned long long>(stats.bytesSent));
    print("before finalize", weight, bias);
    peer.finalize(/*average=*/true);
    print("after finalize", weight, bias);
    std::printf("records in %s\n", peer.outDir().c_str());
  } catch (const grapevine::Error& e) {
    std::fprintf(stderr, "example_cpp: %s\n", e.what());
    return 1;
  }
  return 0;
}
