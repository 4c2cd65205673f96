#include "runtime/train/partition.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "runtime/train/rng.h"

namespace grapevine::train {
namespace {
// Purpose tags for deriveSeed, so the partition's stream never coincides with another use of the
// same seed (initial weights, minibatches).
constexpr std::uint64_t kIidStream = 0x1d1d;
constexpr std::uint64_t kDirichletStream = 0xd1c1;
}  // namespace

Result<Shards> iidPartition(std::size_t n, int peers, std::uint64_t seed) {
  if (peers < 1) return invalidArgument("iid partition: peers must be >= 1");
  if (n < static_cast<std::size_t>(peers)) {
    return invalidArgument("iid partition: " + std::to_string(n) + " samples cannot fill " +
                           std::to_string(peers) + " shards");
  }
  std::vector<std::uint32_t> order(n);
  std::iota(order.begin(), order.end(), 0u);
  Rng rng(deriveSeed(seed, kIidStream));
  rng.shuffle(std::span<std::uint32_t>(order));
  Shards shards(peers);
  const std::size_t base = n / peers;
  const std::size_t extra = n % peers;
  std::size_t pos = 0;
  for (int p = 0; p < peers; ++p) {
    const std::size_t size = base + (static_cast<std::size_t>(p) < extra ? 1 : 0);
    shards[p].assign(order.begin() + pos, order.begin() + pos + size);
    std::sort(shards[p].begin(), shards[p].end());
    pos += size;
  }
  return shards;
}

Result<Shards> dirichletPartition(std::span<const std::uint8_t> labels, int classes, int peers,
                                  double alpha, std::uint64_t seed) {
  if (peers < 1) return invalidArgument("dirichlet partition: peers must be >= 1");
  if (!(alpha > 0.0) || !std::isfinite(alpha)) {
    return invalidArgument("dirichlet partition: alpha must be a finite number > 0");
  }
  if (labels.size() < static_cast<std::size_t>(peers)) {
    return invalidArgument("dirichlet partition: " + std::to_string(labels.size()) +
                           " samples cannot fill " + std::to_string(peers) + " shards");
  }
  std::vector<std::vector<std::uint32_t>> byClass(classes);
  for (std::size_t i = 0; i < labels.size(); ++i) {
    if (labels[i] >= classes) return invalidArgument("dirichlet partition: label out of range");
    byClass[labels[i]].push_back(static_cast<std::uint32_t>(i));
  }
  Rng rng(deriveSeed(seed, kDirichletStream));
  for (auto& members : byClass) rng.shuffle(std::span<std::uint32_t>(members));

  std::vector<double> proportions(peers);
  for (int attempt = 0; attempt < 1000; ++attempt) {
    Shards shards(peers);
    for (int c = 0; c < classes; ++c) {
      double total = 0.0;
      for (int p = 0; p < peers; ++p) {
        proportions[p] = rng.gamma(alpha);
        total += proportions[p];
      }
      const std::size_t m = byClass[c].size();
      if (!(total > 0.0)) {
        // Every gamma underflowed (tiny alpha): give the whole class to one peer, chosen at random.
        const auto p = rng.below(peers);
        shards[p].insert(shards[p].end(), byClass[c].begin(), byClass[c].end());
        continue;
      }
      double cumulative = 0.0;
      std::size_t begin = 0;
      for (int p = 0; p < peers; ++p) {
        cumulative += proportions[p];
        const std::size_t end =
            p + 1 == peers ? m
                           : std::min(m, static_cast<std::size_t>(std::llround(
                                             cumulative / total * static_cast<double>(m))));
        if (end > begin) {
          shards[p].insert(shards[p].end(), byClass[c].begin() + begin, byClass[c].begin() + end);
          begin = end;
        }
      }
    }
    const bool allNonEmpty =
        std::all_of(shards.begin(), shards.end(), [](const auto& s) { return !s.empty(); });
    if (allNonEmpty) {
      for (auto& s : shards) std::sort(s.begin(), s.end());
      return shards;
    }
  }
  return invalidArgument("dirichlet partition: alpha " + std::to_string(alpha) +
                         " left some of the " + std::to_string(peers) +
                         " shards empty in 1000 draws; raise workload.alpha or use fewer peers");
}

double meanLabelSkew(const Shards& shards, std::span<const std::uint8_t> labels, int classes) {
  std::vector<double> global(classes, 0.0);
  for (std::uint8_t l : labels) global[l] += 1.0;
  for (double& g : global) g /= static_cast<double>(labels.size());
  double sum = 0.0;
  for (const auto& shard : shards) {
    std::vector<double> local(classes, 0.0);
    for (std::uint32_t i : shard) local[labels[i]] += 1.0;
    double tv = 0.0;
    for (int c = 0; c < classes; ++c) {
      tv += std::abs(local[c] / static_cast<double>(shard.size()) - global[c]);
    }
    sum += 0.5 * tv;
  }
  return sum / static_cast<double>(shards.size());
}

}  // namespace grapevine::train
