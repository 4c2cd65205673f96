// Sparse methods: top-k (indices + values) and rand-k (values only; positions from a shared key).
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "compress/bytes.h"
#include "compress/methods.h"
#include "kernels/element_math.h"

namespace grapevine::compress::detail {
namespace {

size_t kFor(double ratio, size_t n) {
  if (n == 0) return 0;
  const auto k = static_cast<size_t>(std::llround(ratio * static_cast<double>(n)));
  return std::clamp<size_t>(k, 1, n);
}

Status checkAligned(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) & 3u) == 0
             ? Status::ok()
             : invalidArgument("payload buffer must be 4-byte aligned");
}

// ---- varint (LEB128) of index gaps: gap_j = idx_j - idx_{j-1} - 1, idx_{-1} = -1 ----
size_t varintSize(uint32_t v) {
  return v < (1u << 7) ? 1 : v < (1u << 14) ? 2 : v < (1u << 21) ? 3 : v < (1u << 28) ? 4 : 5;
}

uint8_t* putVarint(uint8_t* p, uint32_t v) {
  while (v >= 0x80) {
    *p++ = static_cast<uint8_t>(v | 0x80);
    v >>= 7;
  }
  *p++ = static_cast<uint8_t>(v);
  return p;
}

// Reads one varint from [p, end); false when truncated or longer than 5 bytes / 32 bits.
bool getVarint(const uint8_t*& p, const uint8_t* end, uint32_t* out) {
  uint64_t v = 0;
  for (int shift = 0; shift < 35; shift += 7) {
    if (p == end) return false;
    const uint8_t b = *p++;
    v |= static_cast<uint64_t>(b & 0x7F) << shift;
    if ((b & 0x80) == 0) {
      if (v > 0xFFFFFFFFull) return false;
      *out = static_cast<uint32_t>(v);
      return true;
    }
  }
  return false;
}

// Top-k payload: u8 coding (0 varint gaps, 1 bitmap), u8 0, u16 0, u32 count, u32 index bytes
// (unpadded), index bytes padded with zeros to 4, f32 values[count].
constexpr size_t kTopkHeader = 12;
constexpr uint8_t kVarint = 0, kBitmap = 1;

// top-k by magnitude: biased, delta = k/n (the kept coordinates are the largest, so the error is at
// most the average (n-k)/n share). The approx selector keeps count in [k(1-slack), k(1+slack)]
// elements and is still a top set, so delta = floor(k(1-slack))/n.
// With `explore` (Slim-DP): k = kTop + m, the kTop largest and m positions drawn among the other
// n - kTop (stratified over them, one per stratum, from the message key): still a superset of a
// top-kTop set, so delta = kTop/n (floor(kTop(1-slack))/n approx). The payload is top-k's.
class TopKCompressor final : public Compressor {
 public:
  TopKCompressor(const Options& o, const kernels::Ops& ops)
      : ratio_(o.ratio), explore_(o.explore), selector_(o.selector), slack_(o.slack), ops_(ops) {}
  Method method() const override { return Method::kTopK; }
  Properties properties(size_t n) const override {
    if (n == 0) return {false, 1.0, 0.0};
    double k = static_cast<double>(topCount(n));
    if (selector_ == Selector::kApprox) k = std::floor(k * (1.0 - slack_));
    return {false, k / static_cast<double>(n), 0.0};
  }
  // The exploration set's size for n elements (at most k - 1: one largest is always kept).
  size_t exploreCount(size_t n) const {
    if (explore_ <= 0.0 || n == 0) return 0;
    const size_t k = kFor(ratio_, n);
    const auto m = static_cast<size_t>(std::llround(explore_ * static_cast<double>(k)));
    return std::min(m, k - 1);
  }
  size_t topCount(size_t n) const { return kFor(ratio_, n) - exploreCount(n); }
  size_t maxCount(size_t n) const {
    return kernels::topkMaxCount(n, topCount(n), selector_, slack_) + exploreCount(n);
  }
  size_t maxEncodedBytes(size_t n) const override {
    const size_t c = maxCount(n);
    return kTopkHeader + alignUp4(std::min(5 * c, (n + 7) / 8)) + 4 * c;
  }
  Result<size_t> encode(std::span<const float> x, uint64_t key, std::span<uint8_t> out) override {
    const size_t n = x.size();
    if (out.size() < maxEncodedBytes(n)) return invalidArgument("output buffer too small");
    GV_RETURN_IF_ERROR(checkAligned(out.data()));
    const size_t k = topCount(n);
    const size_t wsBytes = ops_.topkWorkspaceBytes(n, k);
    if (workspace_.size() < wsBytes) workspace_.resize(wsBytes);
    if (indices_.size() < maxCount(n)) indices_.resize(maxCount(n));
    kernels::TopkStats s =
        ops_.topkSelect(x.data(), n, k, selector_, slack_, key, workspace_.data(), indices_.data());
    if (exploreCount(n) > 0) s.count = addExploration(n, s.count, key);
    stats_ = {s.count, s.countError, s.passes};
    const uint32_t* idx = indices_.data();
    size_t varintBytes = 0;
    for (size_t j = 0, prev = 0; j < s.count; ++j) {
      varintBytes += varintSize(static_cast<uint32_t>(idx[j] - (j ? prev + 1 : 0)));
      prev = idx[j];
    }
    const size_t bitmapBytes = (n + 7) / 8;
    const uint8_t coding = varintBytes <= bitmapBytes ? kVarint : kBitmap;
    const size_t indexBytes = coding == kVarint ? varintBytes : bitmapBytes;
    out[0] = coding;
    out[1] = 0;
    storeLe<uint16_t>(out.data() + 2, 0);
    storeLe<uint32_t>(out.data() + 4, static_cast<uint32_t>(s.count));
    storeLe<uint32_t>(out.data() + 8, static_cast<uint32_t>(indexBytes));
    uint8_t* p = out.data() + kTopkHeader;
    std::fill(p, p + alignUp4(indexBytes), uint8_t{0});
    if (coding == kVarint) {
      for (size_t j = 0, prev = 0; j < s.count; ++j) {
        p = putVarint(p, static_cast<uint32_t>(idx[j] - (j ? prev + 1 : 0)));
        prev = idx[j];
      }
    } else {
      for (size_t j = 0; j < s.count; ++j)
        p[idx[j] / 8] |= static_cast<uint8_t>(1u << (idx[j] % 8));
    }
    const size_t valuesAt = kTopkHeader + alignUp4(indexBytes);
    ops_.gather(x.data(), idx, s.count, reinterpret_cast<float*>(out.data() + valuesAt));
    return valuesAt + 4 * s.count;
  }
  Status decodeAccumulate(Payload p, float w, Acc acc) const override {
    return decodeTopK(p, w, acc, ops_, true);
  }
  EncodeStats lastStats() const override { return stats_; }

 private:
  // Merges m positions drawn among the n - count others into indices_[0, count) (ascending);
  // returns the new count. Draw j is the r_j-th position not in the top set, r_j one uniform pick
  // in stratum j of [0, n - count) (randkIndex with a key of its own), so they ascend as well.
  size_t addExploration(size_t n, size_t count, uint64_t key) {
    const size_t m = std::min(exploreCount(n), n - count);
    if (m == 0) return count;
    top_.assign(indices_.begin(), indices_.begin() + static_cast<std::ptrdiff_t>(count));
    const uint64_t exploreKey = key ^ 0x9E3779B97F4A7C15ull;
    explored_.resize(m);
    size_t t = 0;
    for (size_t j = 0; j < m; ++j) {
      const size_t r = randkIndex(exploreKey, n - count, m, j);
      // The r-th position outside the top set: r + (top indices below it).
      size_t i = r + t;
      while (t < count && top_[t] <= i) i = r + ++t;
      explored_[j] = static_cast<uint32_t>(i);
    }
    // Both lists ascend and are disjoint: merge them into indices_.
    std::merge(top_.begin(), top_.end(), explored_.begin(), explored_.end(), indices_.begin());
    return count + m;
  }

  double ratio_;
  double explore_;
  Selector selector_;
  double slack_;
  const kernels::Ops& ops_;
  std::vector<uint8_t> workspace_;
  std::vector<uint32_t> indices_;
  std::vector<uint32_t> top_, explored_;  // addExploration()'s scratch, reused
  EncodeStats stats_;
};

// Rand-k payload: u8 unbiased, u8 0, u16 0, u32 k, u64 key, f32 values[k]. Positions: element j
// of stratum j = [floor(j n / k), floor((j+1) n / k)) chosen by hash32(key, j) (randkIndex), so
// the receiver recomputes them; values are pre-scaled by the stratum size when unbiased.
constexpr size_t kRandkHeader = 16;

// rand-k (stratified: one uniformly chosen position per stratum of size ceil(n/k) or floor(n/k)):
//   biased (values as is): delta = 1 / ceil(n/k) (each element kept with probability >= that);
//   unbiased (scaled by the stratum size): omega = ceil(n/k) - 1, delta = 1/(1 + omega).
class RandKCompressor final : public Compressor {
 public:
  RandKCompressor(const Options& o, const kernels::Ops& ops)
      : ratio_(o.ratio), unbiased_(o.unbiased), ops_(ops) {}
  Method method() const override { return Method::kRandK; }
  Properties properties(size_t n) const override {
    if (n == 0) return {unbiased_, 1.0, 0.0};
    const size_t k = kFor(ratio_, n);
    const double maxStratum = static_cast<double>((n + k - 1) / k);
    if (unbiased_) return {true, 1.0 / maxStratum, maxStratum - 1.0};
    return {false, 1.0 / maxStratum, 0.0};
  }
  size_t maxEncodedBytes(size_t n) const override { return kRandkHeader + 4 * kFor(ratio_, n); }
  Result<size_t> encode(std::span<const float> x, uint64_t key, std::span<uint8_t> out) override {
    const size_t n = x.size(), k = kFor(ratio_, n);
    if (out.size() < maxEncodedBytes(n)) return invalidArgument("output buffer too small");
    GV_RETURN_IF_ERROR(checkAligned(out.data()));
    out[0] = unbiased_ ? 1 : 0;
    out[1] = 0;
    storeLe<uint16_t>(out.data() + 2, 0);
    storeLe<uint32_t>(out.data() + 4, static_cast<uint32_t>(k));
    storeLe<uint64_t>(out.data() + 8, key);
    auto* v = reinterpret_cast<float*>(out.data() + kRandkHeader);
    for (size_t j = 0; j < k; ++j) {
      const size_t start = j * n / k, size = (j + 1) * n / k - start;
      const float xv = x[randkIndex(key, n, k, j)];
      v[j] = unbiased_ ? xv * static_cast<float>(size) : xv;
    }
    return kRandkHeader + 4 * k;
  }
  Status decodeAccumulate(Payload p, float w, Acc acc) const override {
    return decodeRandK(p, w, acc, ops_, true);
  }

 private:
  double ratio_;
  bool unbiased_;
  const kernels::Ops& ops_;
};

}  // namespace

// acc[idx] += pv, recorded in the journal when there is one (the old value, |new - old|).
inline void addAt(Acc acc, size_t idx, float pv, SparseJournal* journal) {
  const float old = acc[idx];
  const float now = old + pv;
  acc[idx] = now;
  if (journal != nullptr) {
    journal->before.emplace_back(journal->base + idx, old);
    journal->maxChangeBits =
        std::max(journal->maxChangeBits, kernels::floatBits(now - old) & 0x7FFFFFFFu);
  }
}

uint32_t randkIndex(uint64_t key, size_t n, size_t k, size_t j) {
  const size_t start = j * n / k, size = (j + 1) * n / k - start;
  return static_cast<uint32_t>(start + kernels::hash32(key, static_cast<uint32_t>(j)) % size);
}

std::unique_ptr<Compressor> makeTopK(const Options& o, const kernels::Ops& ops) {
  return std::make_unique<TopKCompressor>(o, ops);
}
std::unique_ptr<Compressor> makeRandK(const Options& o, const kernels::Ops& ops) {
  return std::make_unique<RandKCompressor>(o, ops);
}

FloatRegion topkFloatRegion(Payload p) {
  if (p.size() < kTopkHeader) return {};
  const size_t count = loadLe<uint32_t>(p.data() + 4);
  const size_t at = kTopkHeader + alignUp4(loadLe<uint32_t>(p.data() + 8));
  if (at > p.size() || (p.size() - at) / 4 < count) return {};
  return {FloatRegion::Kind::kF32, at, count};
}

FloatRegion randkFloatRegion(Payload p) {
  if (p.size() < kRandkHeader) return {};
  return {FloatRegion::Kind::kF32, kRandkHeader, (p.size() - kRandkHeader) / 4};
}

Status decodeTopK(Payload p, float w, Acc acc, const kernels::Ops& ops, bool apply,
                  SparseJournal* journal) {
  GV_RETURN_IF_ERROR(checkAligned(p.data()));
  const size_t n = acc.size();
  if (p.size() < kTopkHeader)
    return corrupt("payload_size", "top-k payload shorter than its header");
  const uint8_t coding = p[0];
  if (coding > kBitmap || p[1] != 0 || loadLe<uint16_t>(p.data() + 2) != 0) {
    return corrupt("params", "top-k coding byte " + std::to_string(coding));
  }
  const size_t count = loadLe<uint32_t>(p.data() + 4);
  const size_t indexBytes = loadLe<uint32_t>(p.data() + 8);
  if (count > n)
    return corrupt("count", std::to_string(count) + " indices for " + std::to_string(n));
  if (coding == kBitmap && indexBytes != (n + 7) / 8)
    return corrupt("payload_size", "bitmap length");
  if (coding == kVarint && (indexBytes > 5 * count || indexBytes < count)) {
    return corrupt("payload_size", "varint index length");
  }
  const size_t valuesAt = kTopkHeader + alignUp4(indexBytes);
  if (p.size() != valuesAt + 4 * count) {
    return corrupt("payload_size", std::to_string(p.size()) + " bytes, expected " +
                                       std::to_string(valuesAt + 4 * count));
  }
  const uint8_t* ib = p.data() + kTopkHeader;
  const uint8_t* iend = ib + indexBytes;
  for (const uint8_t* q = iend; q < p.data() + valuesAt; ++q) {
    if (*q != 0) return corrupt("params", "non-zero index padding");
  }
  const auto* values = reinterpret_cast<const float*>(p.data() + valuesAt);
  if (!ops.allFinite(values, count)) return corrupt("non_finite", "top-k value");

  // Validate every index before touching acc; then apply in a second pass.
  if (coding == kVarint) {
    const uint8_t* q = ib;
    uint64_t next = 0;  // smallest index allowed next
    for (size_t j = 0; j < count; ++j) {
      uint32_t gap;
      if (!getVarint(q, iend, &gap)) return corrupt("varint", "malformed index gap");
      const uint64_t idx = next + gap;
      if (idx >= n)
        return corrupt("index_range", "index " + std::to_string(idx) + " >= " + std::to_string(n));
      next = idx + 1;
    }
    if (q != iend) return corrupt("payload_size", "trailing index bytes");
    if (!apply) return Status::ok();
    q = ib;
    next = 0;
    for (size_t j = 0; j < count; ++j) {
      uint32_t gap = 0;
      getVarint(q, iend, &gap);
      const size_t idx = static_cast<size_t>(next + gap);
      const float pv = w * values[j];
      addAt(acc, idx, pv, journal);
      next = idx + 1;
    }
  } else {
    size_t ones = 0;
    for (size_t b = 0; b < indexBytes; ++b) ones += static_cast<size_t>(__builtin_popcount(ib[b]));
    if (ones != count) return corrupt("count", "bitmap population differs from count");
    if (n % 8 != 0 && (ib[n / 8] >> (n % 8)) != 0)
      return corrupt("index_range", "bitmap bit past n");
    if (!apply) return Status::ok();
    size_t j = 0;
    for (size_t b = 0; b < indexBytes; ++b) {
      for (uint32_t m = ib[b]; m != 0; m &= m - 1) {
        const size_t idx = b * 8 + static_cast<size_t>(__builtin_ctz(m));
        const float pv = w * values[j++];
        addAt(acc, idx, pv, journal);
      }
    }
  }
  return Status::ok();
}

Status decodeRandK(Payload p, float w, Acc acc, const kernels::Ops& ops, bool apply,
                   SparseJournal* journal) {
  GV_RETURN_IF_ERROR(checkAligned(p.data()));
  const size_t n = acc.size();
  if (p.size() < kRandkHeader)
    return corrupt("payload_size", "rand-k payload shorter than its header");
  if (p[0] > 1 || p[1] != 0 || loadLe<uint16_t>(p.data() + 2) != 0) {
    return corrupt("params", "rand-k flags");
  }
  const size_t k = loadLe<uint32_t>(p.data() + 4);
  const uint64_t key = loadLe<uint64_t>(p.data() + 8);
  if (k > n || (k == 0 && n > 0))
    return corrupt("count", "k=" + std::to_string(k) + " for n=" + std::to_string(n));
  if (p.size() != kRandkHeader + 4 * k) return corrupt("payload_size", "rand-k values");
  const auto* v = reinterpret_cast<const float*>(p.data() + kRandkHeader);
  if (!ops.allFinite(v, k)) return corrupt("non_finite", "rand-k value");
  if (!apply) return Status::ok();
  for (size_t j = 0; j < k; ++j) {
    const uint32_t idx = randkIndex(key, n, k, j);
    const float pv = w * v[j];
    addAt(acc, idx, pv, journal);
  }
  return Status::ok();
}

}  // namespace grapevine::compress::detail
