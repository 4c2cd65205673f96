// Splitting a dataset over peers. Every peer computes the same partition from the same seed, keeps
// its own shard's index list, and drops the rest; no peer ever needs another's data.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "runtime/common/status.h"

namespace grapevine::train {

using Shards = std::vector<std::vector<std::uint32_t>>;  // shard[p] = sample indices, ascending

// iid: a seeded shuffle of [0, n) cut into `peers` contiguous pieces whose sizes differ by at most
// one (the first n mod peers shards get one extra). peers >= 1, n >= peers.
Result<Shards> iidPartition(std::size_t n, int peers, std::uint64_t seed);

// Dirichlet label skew (Hsu et al. 2019): for each class c, proportions p_c ~ Dir(alpha, ...,
// alpha) over peers; the class's (shuffled) samples are cut by the cumulative proportions. Small
// alpha -> each peer sees few classes; large alpha -> close to iid. A draw that leaves some shard
// empty is redrawn (the RNG continues, so it stays deterministic); after 1000 failed draws the
// result is kInvalidArgument naming alpha and peers.
Result<Shards> dirichletPartition(std::span<const std::uint8_t> labels, int classes, int peers,
                                  double alpha, std::uint64_t seed);

// Label skew of a partition: the mean over shards of the total-variation distance between the
// shard's label histogram and the whole dataset's (0 = identical, 1 = disjoint).
double meanLabelSkew(const Shards& shards, std::span<const std::uint8_t> labels, int classes);

}  // namespace grapevine::train
