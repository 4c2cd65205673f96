// PowerSGD-style rank-r compression (Vogels et al. 2019) of a rows x cols matrix M (row-major x):
// one power iteration per round with a warm start: P = M Q, orthonormalise P's columns
// (modified Gram-Schmidt), Q = M^T P; C(M) = P Q^T = P P^T M, the projection of M onto span(P).
// Biased. A projection never increases the norm, so ||C(M) - M|| <= ||M||, but there is no
// worst-case contraction (delta = 0): use it with error feedback, as PowerSGD does. For M of rank
// <= r the warm-started iteration converges to C(M) = M.
//
// Payload: u32 rows, u32 cols, u32 r, u32 0, f32 P[rows][r], f32 Qt[r][cols] (Q transposed, so
// decoding streams over rows of the output). The decoder's element order is fixed:
// value(i, j) = sum over c ascending of P[i][c] * Qt[c][j], accumulated from 0 in float (one
// kernels axpy per c, which rounds the product and the sum separately on every table).
#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "compress/bytes.h"
#include "compress/methods.h"
#include "kernels/element_math.h"

namespace grapevine::compress::detail {
namespace {

constexpr size_t kLowRankHeader = 16;
using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

class LowRankCompressor final : public Compressor {
 public:
  LowRankCompressor(const Options& o, size_t rows, size_t cols, const kernels::Ops& ops)
      : rows_(rows), cols_(cols), rank_(std::min<size_t>({o.rank, rows, cols})), ops_(ops) {}
  Method method() const override { return Method::kLowRank; }
  Properties properties(size_t) const override { return {false, 0.0, 0.0}; }
  size_t maxEncodedBytes(size_t) const override {
    return kLowRankHeader + 4 * rank_ * (rows_ + cols_);
  }
  Result<size_t> encode(std::span<const float> x, uint64_t key, std::span<uint8_t> out) override {
    if (x.size() != rows_ * cols_) return invalidArgument("low-rank input is not rows x cols");
    const size_t bytes = maxEncodedBytes(x.size());
    if (out.size() < bytes) return invalidArgument("output buffer too small");
    if (q_.size() == 0) {  // first round: a random start, reproducible from the key
      q_.resize(static_cast<Eigen::Index>(cols_), static_cast<Eigen::Index>(rank_));
      for (Eigen::Index i = 0; i < q_.size(); ++i) {
        q_.data()[i] = kernels::uniform01(key, static_cast<uint32_t>(i)) - 0.5f;
      }
    }
    Eigen::Map<const RowMatrix> m(x.data(), static_cast<Eigen::Index>(rows_),
                                  static_cast<Eigen::Index>(cols_));
    RowMatrix p = m * q_;                          // rows x r
    for (Eigen::Index c = 0; c < p.cols(); ++c) {  // modified Gram-Schmidt
      for (Eigen::Index d = 0; d < c; ++d) p.col(c) -= p.col(d).dot(p.col(c)) * p.col(d);
      const float norm = p.col(c).norm();
      if (norm > 1e-12f && std::isfinite(norm)) {
        p.col(c) /= norm;
      } else {
        p.col(c).setZero();  // rank-deficient direction: contributes nothing
      }
    }
    q_ = m.transpose() * p;  // cols x r, also the next round's warm start
    storeLe<uint32_t>(out.data(), static_cast<uint32_t>(rows_));
    storeLe<uint32_t>(out.data() + 4, static_cast<uint32_t>(cols_));
    storeLe<uint32_t>(out.data() + 8, static_cast<uint32_t>(rank_));
    storeLe<uint32_t>(out.data() + 12, 0);
    auto* pOut = reinterpret_cast<float*>(out.data() + kLowRankHeader);
    Eigen::Map<RowMatrix>(pOut, p.rows(), p.cols()) = p;
    Eigen::Map<RowMatrix>(pOut + rows_ * rank_, q_.cols(), q_.rows()) = q_.transpose();
    return bytes;
  }
  Status decodeAccumulate(Payload p, float w, Acc acc) const override {
    return decodeLowRank(p, w, acc, ops_, true);
  }

 private:
  size_t rows_, cols_, rank_;
  const kernels::Ops& ops_;
  RowMatrix q_;  // warm start, cols x r
};

}  // namespace

std::unique_ptr<Compressor> makeLowRank(const Options& o, size_t rows, size_t cols,
                                        const kernels::Ops& ops) {
  return std::make_unique<LowRankCompressor>(o, rows, cols, ops);
}

Status decodeLowRank(Payload p, float w, Acc acc, const kernels::Ops& ops, bool apply) {
  if ((reinterpret_cast<uintptr_t>(p.data()) & 3u) != 0) {
    return invalidArgument("payload buffer must be 4-byte aligned");
  }
  if (p.size() < kLowRankHeader)
    return corrupt("payload_size", "low-rank payload shorter than its header");
  const size_t rows = loadLe<uint32_t>(p.data()), cols = loadLe<uint32_t>(p.data() + 4);
  const size_t r = loadLe<uint32_t>(p.data() + 8);
  if (rows * cols != acc.size() || loadLe<uint32_t>(p.data() + 12) != 0) {
    return corrupt("params", std::to_string(rows) + "x" + std::to_string(cols) + " for " +
                                 std::to_string(acc.size()) + " elements");
  }
  if (r < 1 || r > 256 || r > std::min(rows, cols))
    return corrupt("params", "rank " + std::to_string(r));
  if (p.size() != kLowRankHeader + 4 * r * (rows + cols))
    return corrupt("payload_size", "low-rank factors");
  const auto* pf = reinterpret_cast<const float*>(p.data() + kLowRankHeader);
  const float* qt = pf + rows * r;
  if (!ops.allFinite(pf, r * (rows + cols))) return corrupt("non_finite", "low-rank factor");
  if (!apply) return Status::ok();
  constexpr size_t kTile = 512;
  float tmp[kTile];
  for (size_t i = 0; i < rows; ++i) {
    float* out = acc.data() + i * cols;
    for (size_t j0 = 0; j0 < cols; j0 += kTile) {
      const size_t len = std::min(kTile, cols - j0);
      std::fill(tmp, tmp + len, 0.0f);
      for (size_t c = 0; c < r; ++c) ops.axpy(pf[i * r + c], qt + c * cols + j0, tmp, len);
      ops.axpy(w, tmp, out + j0, len);
    }
  }
  return Status::ok();
}

}  // namespace grapevine::compress::detail
