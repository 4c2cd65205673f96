// The kernel ops table: every hot loop of the compression stack behind one table of function
// pointers per device. `compress/` calls only this table, never a loop of its own over a tensor.
//
// Implementations:
//   referenceOps()  plain scalar C++; the test oracle. Slow, obviously correct.
//   cpuOps()        the vectorised CPU table (AVX2/F16C/SSE4.2 chosen at run time with
//                   __builtin_cpu_supports; falls back to the reference entry per op otherwise).
//   cudaOps()       the CUDA table (kernels/cuda/cuda_ops.h, target grapevine_kernels_cuda), built
//                   only when GRAPEVINE_HAVE_CUDA; tested against referenceOps() when a device
//                   exists.
//
// Conventions, the same for every table (CUB-style):
//   * Pointers are in the table's memory space (host for CPU tables, device for CUDA).
//   * Ops that need scratch come in two phases: `<op>WorkspaceBytes(...)` first, then the op with a
//     caller-owned workspace of at least that many bytes. No op allocates.
//   * Every op completes before it returns (a device table synchronises its stream), so the table
//     can be swapped without changing callers.
//   * Results that the wire format depends on (quantized codes, scales, sign bits, half/bf16 bits,
//     top-k indices of the exact selector, CRC32C) are bit-identical across tables; reductions that
//     only feed local decisions (sumSquares, dot) may differ by rounding.
//   * `acc += w * v` ops compute fl(acc + fl(w' * v)) without fused multiply-add, where w' is the
//     weight (folded with a per-block scale as fl(w * scale) where a scale exists). With w = 1 the
//     result is acc + C(x) exactly, the same on every table.
//   * Thread safety: the ops are pure functions of their arguments; tables are immutable.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace grapevine::kernels {

enum class Rounding : uint8_t { kNearest = 0, kStochastic = 1 };
enum class Selector : uint8_t { kExact = 0, kApprox = 1 };

// What a top-k selection did. `count` indices were written (ascending).
struct TopkStats {
  size_t count = 0;
  double countError = 0.0;  // (count - k) / k; 0 for the exact selector
  int passes = 0;           // full passes over the input (1 is the fast path)
};

// One neighbour's term of a gossip mix (Ops::mixDifferences): its replica (as long as the model,
// in the table's memory space), the coefficient of its difference to the own public copy, and the
// weight its squared distance counts with.
struct MixTerm {
  const float* replica = nullptr;
  double coefficient = 0.0;  // CHOCO: g_ij * w_ij
  double weight = 0.0;       // w_ij
};

// sum_k (x[k] - y[k])^2 and sum_k y[k]^2 (Ops::distanceAndNorm).
struct DistanceAndNorm {
  double distance2 = 0.0;
  double norm2 = 0.0;
};

// Most terms Ops::mixDifferences takes in one call on a device table (they travel in the
// stream's scratch); host tables take any number.
inline constexpr size_t kMaxDeviceMixTerms = 512;

// The optimizer's step directions (runtime/train/optimizer.h has the formulas and the options).
enum class SgdMomentum : uint8_t {
  kNone,                 // u = g'                          (g' = g + weightDecay * x)
  kLocal,                // m = beta m + g'; u = m
  kLocalNesterov,        // m = beta m + g'; u = g' + beta m
  kQuasiGlobal,          // u = g' + beta m                 (m updated by momentumFromChange)
  kQuasiGlobalNesterov,  // u = g' + beta (beta m + g')
};
struct SgdStep {
  SgdMomentum momentum = SgdMomentum::kNone;
  float beta = 0.0f;
  float weightDecay = 0.0f;
};
// m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g g; u = (m / c1) / (sqrt(v / c2) + eps) + wd x.
struct AdamwStep {
  float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f, weightDecay = 0.0f;
  float biasCorrection1 = 1.0f, biasCorrection2 = 1.0f;  // c1 = 1 - b1^t, c2 = 1 - b2^t
};

// Most indices topkSelect can write: k for exact, floor(k * (1 + slack)) for approximate.
size_t topkMaxCount(size_t n, size_t k, Selector selector, double slack);

struct Ops {
  std::string_view name;

  // ---- Reductions ----
  float (*maxAbs)(const float* x, size_t n);  // 0 for n == 0; NaN propagates
  // max_k |x[k] - y[k]|, the difference in float (as Ops::maxAbs of the differences).
  float (*maxAbsDiff)(const float* x, const float* y, size_t n);
  double (*sumSquares)(const float* x, size_t n);
  double (*dot)(const float* x, const float* y, size_t n);
  bool (*allFinite)(const float* x, size_t n);
  bool (*allFiniteHalf)(const uint16_t* h, size_t n);
  bool (*allFiniteBf16)(const uint16_t* b, size_t n);

  // ---- Element-wise ----
  void (*axpy)(float a, const float* x, float* y, size_t n);          // y += a * x (no FMA)
  void (*add)(const float* x, const float* y, float* out, size_t n);  // out = x + y (out may alias)

  // ---- Half precision (element_math.h defines the rounding) ----
  void (*toHalf)(const float* x, size_t n, uint16_t* out);
  void (*halfAccumulate)(const uint16_t* h, size_t n, float w, float* acc);  // acc += w * half(h)
  void (*toBf16)(const float* x, size_t n, uint16_t* out);
  void (*bf16Accumulate)(const uint16_t* b, size_t n, float w, float* acc);

  // ---- Block quantization (bits 8 or 4; block a multiple of 64) ----
  // codes: n bytes (int8) or ceil(n/2) bytes (int4, element 2i in the low nibble of byte i);
  // scales: ceil(n/block) floats, scale = maxAbs(block) / L. Stochastic rounding uses
  // uniform01(key, i) for element i (i counts from the start of x).
  void (*quantizeBlocks)(const float* x, size_t n, size_t block, int bits, Rounding rounding,
                         uint64_t key, uint8_t* codes, float* scales);
  // acc[i] += fl(w * scale[i / block]) * code[i]
  void (*dequantizeAccumulate)(const uint8_t* codes, const float* scales, size_t n, size_t block,
                               int bits, float w, float* acc);

  // ---- Sign (1 bit per element, set when the sign bit of x is set) ----
  // bits: ceil(n/8) bytes, element i in bit i%8 of byte i/8; scales: mean |x| per block, summed in
  // the lane order of element_math.h (reduceLanes8), divided by the block's element count.
  void (*signPack)(const float* x, size_t n, size_t block, uint8_t* bits, float* scales);
  // acc[i] += bit ? -fl(w * scale) : fl(w * scale)
  void (*signAccumulate)(const uint8_t* bits, const float* scales, size_t n, size_t block, float w,
                         float* acc);

  // ---- Top-k by magnitude (two-phase) ----
  size_t (*topkWorkspaceBytes)(size_t n, size_t k);
  // Writes at most topkMaxCount(n, k, selector, slack) ascending indices of elements of largest
  // |x|. Exact: exactly min(k, n) indices; ties at the k-th magnitude go to the lowest indices (the
  // result is a function of x alone). Approx: a threshold estimated from a sample (drawn with
  // `key`), one pass, refined when the count misses k by more than slack * k; the result is always
  // a "top set" (every selected |x| >= every unselected |x|, comparing magnitudes as bit patterns;
  // NaN sorts above infinity).
  TopkStats (*topkSelect)(const float* x, size_t n, size_t k, Selector selector, double slack,
                          uint64_t key, void* workspace, uint32_t* indices);

  // ---- Gather / scatter ----
  void (*gather)(const float* x, const uint32_t* idx, size_t k, float* out);
  void (*scatterAccumulate)(const uint32_t* idx, const float* v, size_t k, float w, float* acc);

  // ---- Dense gossip passes (the gossip algorithms' sweeps over the whole model) ----
  // Element-wise results are exact functions of the inputs on every table: float differences;
  // double sums in the terms' order, rounded to float once; no fused multiply-add. The sums over
  // elements (norms for the consensus step and the records: local decisions) are double sums in
  // 8 lanes on the CPU tables (element k to lane k % 8, in increasing k, reduced as
  // reduceLanes8), the same bits on both; a device table may differ from them by rounding.
  // out[k] = x[k] - y[k]; returns sum_k out[k]^2. out may alias neither input.
  double (*subtractSquares)(const float* x, const float* y, float* out, size_t n);
  // sum_k (x[k] - y[k])^2 (the difference taken in double) and sum_k y[k]^2.
  DistanceAndNorm (*distanceAndNorm)(const float* x, const float* y, size_t n);
  // x[k] <- fl(x[k] + sum_t coefficient_t (replica_t[k] - y[k])), the sum in double in the terms'
  // order; returns sum_t weight_t sum_k (replica_t[k] - y[k])^2. With no terms x is unchanged and
  // the result is 0. `terms` is host memory (the replicas it points to are the table's).
  double (*mixDifferences)(float* x, const float* y, const MixTerm* terms, size_t count, size_t n);
  // x[k] <- fl(wa a[k] + wb b[k] + sum_t coefficient_t replica_t[k]), summed in double in that
  // order, each product rounded before it is added, x rounded once (b null: no such term; the
  // terms' weights are not read). x may alias a or b, not a replica. D-PSGD's and push-sum's
  // mixes.
  void (*weightedSum)(float* x, const float* a, double wa, const float* b, double wb,
                      const MixTerm* terms, size_t count, size_t n);

  // ---- Optimizer steps: float, element by element, each operation rounded (no FMA, IEEE sqrt
  // and division), so every table gives the same bits. u may alias g. ----
  // The SGD direction u for gradient g at x; m (the momentum buffer) is read, and updated for the
  // local kinds; unused (may be null) for kNone.
  void (*sgdDirection)(const float* g, const float* x, float* m, float* u, size_t n, SgdStep step);
  void (*adamwDirection)(const float* g, const float* x, float* m, float* v, float* u, size_t n,
                         AdamwStep step);
  // Quasi-global momentum after mixing: d = (before - after) * invLrSum; m = beta m + (1 - beta) d.
  void (*momentumFromChange)(const float* before, const float* after, float* m, size_t n,
                             float beta, float invLrSum);

  // ---- CRC32C (Castagnoli), reflected, as used by iSCSI/ext4: crc32c("123456789") == 0xE3069283.
  // `crc` is the running value (start with 0); chaining over pieces equals one call over the whole.
  uint32_t (*crc32c)(uint32_t crc, const uint8_t* data, size_t n);
};

const Ops& referenceOps();
const Ops& cpuOps();  // the vectorised table with run-time dispatch; what compress/ uses by default

// Which instruction-set paths cpuOps() picked on this machine, e.g. "avx2+f16c+sse4.2".
std::string_view cpuFeatures();

}  // namespace grapevine::kernels
