// The CUDA ops table (contract: kernels/ops.h and kernels/cuda/cuda_ops.h).
//
// Layout, CUB-style: each op is a host function (the table entry) that picks a launch shape and
// calls one or two __global__ kernels on the thread's stream, then synchronises. The per-element
// math comes from kernels/element_math.h, the same definitions the CPU tables use, so the
// wire-affecting outputs match bit for bit. This file is compiled with -fmad=false; the
// `acc += w * v` ops also spell their rounding out with __fmul_rn/__fadd_rn.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/cuda/cuda_context.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/element_math.h"
#include "kernels/ops.h"

namespace grapevine::kernels::cuda {
namespace {

constexpr int kThreads = 256;  // threads per block, every kernel
constexpr int kWarps = kThreads / 32;
constexpr size_t kMaxGrid = 4096;          // grid-stride kernels never launch more blocks
constexpr size_t kMaxReduceBlocks = 1024;  // partial sums of sumSquares/dot (8 KiB of doubles)
constexpr size_t kTopkTile = 4096;         // elements per block in the top-k count/compact passes
constexpr unsigned kFullMask = 0xFFFFFFFFu;

static_assert(kMaxReduceBlocks * sizeof(double) <= kDeviceScratchBytes);
static_assert(kMaxReduceBlocks * sizeof(double) <= kHostStagingBytes);

unsigned gridFor(size_t n, size_t cap = kMaxGrid) {
  return static_cast<unsigned>(std::max<size_t>(1, std::min(cap, (n + kThreads - 1) / kThreads)));
}

void finish(Context& c, const char* what) {
  checkCuda(cudaGetLastError(), what);               // launch errors (bad configuration)
  checkCuda(cudaStreamSynchronize(c.stream), what);  // execution errors
}

__device__ __forceinline__ size_t globalThread() {
  return static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ size_t gridThreads() {
  return static_cast<size_t>(gridDim.x) * blockDim.x;
}
__device__ __forceinline__ uint32_t magnitudeBits(float f) { return floatBits(f) & 0x7FFFFFFFu; }

// Block-wide sum/max helpers. `shared` holds kWarps values; every thread gets the result.
__device__ uint32_t blockMax(uint32_t v, uint32_t* shared) {
  for (int o = 16; o > 0; o >>= 1) v = max(v, __shfl_down_sync(kFullMask, v, o));
  const unsigned lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  uint32_t m = 0;
  for (int w = 0; w < kWarps; ++w) m = max(m, shared[w]);
  __syncthreads();  // shared may be reused by the caller
  return m;
}
__device__ uint32_t blockSum(uint32_t v, uint32_t* shared) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(kFullMask, v, o);
  const unsigned lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  uint32_t s = 0;
  for (int w = 0; w < kWarps; ++w) s += shared[w];
  __syncthreads();
  return s;
}

// The block's sum of `s` into partial[blockIdx.x].
__device__ void blockSumTo(double s, double* partial) {
  __shared__ double sh[kThreads];
  __syncthreads();  // sh may still be read by a previous call
  sh[threadIdx.x] = s;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride >>= 1) {
    if (static_cast<int>(threadIdx.x) < stride) sh[threadIdx.x] += sh[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0) partial[blockIdx.x] = sh[0];
}

// ---- Reductions --------------------------------------------------------------------------------

// max |x[i]| (y null) or max |x[i] - y[i]|, as float bits, atomically into *out.
__global__ void maxAbsKernel(const float* x, const float* y, size_t n, uint32_t* out) {
  uint32_t m = 0;
  for (size_t i = globalThread(); i < n; i += gridThreads())
    m = max(m, magnitudeBits(y != nullptr ? __fsub_rn(x[i], y[i]) : x[i]));
  for (int o = 16; o > 0; o >>= 1) m = max(m, __shfl_down_sync(kFullMask, m, o));
  if ((threadIdx.x & 31) == 0 && m != 0) atomicMax(out, m);
}

// Per-block partial sums in a fixed tree order; the host adds the partials in block order, so the
// result depends on n only (never on scheduling).
template <bool kDot>
__global__ void sumProductsKernel(const float* x, const float* y, size_t n, double* partial) {
  double s = 0.0;
  for (size_t i = globalThread(); i < n; i += gridThreads()) {
    const double a = x[i];
    s += kDot ? a * static_cast<double>(y[i]) : a * a;
  }
  blockSumTo(s, partial);
}

enum class FiniteKind : int { kFloat = 0, kHalf = 1, kBf16 = 2 };

__global__ void nonFiniteKernel(const void* p, size_t n, FiniteKind kind, uint32_t* bad) {
  bool found = false;
  for (size_t i = globalThread(); i < n; i += gridThreads()) {
    if (kind == FiniteKind::kFloat) {
      found |= (floatBits(static_cast<const float*>(p)[i]) & 0x7F800000u) == 0x7F800000u;
    } else if (kind == FiniteKind::kHalf) {
      found |= (static_cast<const uint16_t*>(p)[i] & 0x7C00u) == 0x7C00u;
    } else {
      found |= (static_cast<const uint16_t*>(p)[i] & 0x7F80u) == 0x7F80u;
    }
  }
  if (__any_sync(kFullMask, found) && (threadIdx.x & 31) == 0) *bad = 1;
}

float largestMagnitude(const float* x, const float* y, size_t n, const char* what) {
  if (n == 0) return 0.0f;
  Context& c = threadContext();
  auto* d = static_cast<uint32_t*>(c.deviceScratch);
  auto* h = static_cast<uint32_t*>(c.hostStaging);
  checkCuda(cudaMemsetAsync(d, 0, sizeof(uint32_t), c.stream), what);
  maxAbsKernel<<<gridFor(n), kThreads, 0, c.stream>>>(x, y, n, d);
  checkCuda(cudaMemcpyAsync(h, d, sizeof(uint32_t), cudaMemcpyDeviceToHost, c.stream), what);
  finish(c, what);
  return bitsFloat(*h);
}
float maxAbs(const float* x, size_t n) { return largestMagnitude(x, nullptr, n, "maxAbs"); }
float maxAbsDiff(const float* x, const float* y, size_t n) {
  return largestMagnitude(x, y, n, "maxAbsDiff");
}

// The reductions' partial sums: `count` doubles at the start of the device scratch, copied to the
// pinned staging; the stream is synchronised, so the host may read them.
const double* partialsOnHost(Context& c, size_t count, const char* what) {
  auto* h = static_cast<double*>(c.hostStaging);
  checkCuda(
      cudaMemcpyAsync(h, c.deviceScratch, count * sizeof(double), cudaMemcpyDeviceToHost, c.stream),
      what);
  finish(c, what);
  return h;
}
double sumPartials(Context& c, size_t count, const char* what) {
  const double* h = partialsOnHost(c, count, what);
  double s = 0.0;
  for (size_t b = 0; b < count; ++b) s += h[b];
  return s;
}

template <bool kDot>
double sumProducts(const float* x, const float* y, size_t n) {
  if (n == 0) return 0.0;
  Context& c = threadContext();
  const unsigned grid = gridFor(n, kMaxReduceBlocks);
  sumProductsKernel<kDot>
      <<<grid, kThreads, 0, c.stream>>>(x, y, n, static_cast<double*>(c.deviceScratch));
  return sumPartials(c, grid, kDot ? "dot" : "sumSquares");
}
double sumSquares(const float* x, size_t n) { return sumProducts<false>(x, x, n); }
double dot(const float* x, const float* y, size_t n) { return sumProducts<true>(x, y, n); }

bool noneNonFinite(const void* p, size_t n, FiniteKind kind) {
  if (n == 0) return true;
  Context& c = threadContext();
  auto* d = static_cast<uint32_t*>(c.deviceScratch);
  auto* h = static_cast<uint32_t*>(c.hostStaging);
  checkCuda(cudaMemsetAsync(d, 0, sizeof(uint32_t), c.stream), "allFinite memset");
  nonFiniteKernel<<<gridFor(n), kThreads, 0, c.stream>>>(p, n, kind, d);
  checkCuda(cudaMemcpyAsync(h, d, sizeof(uint32_t), cudaMemcpyDeviceToHost, c.stream),
            "allFinite copy");
  finish(c, "allFinite");
  return *h == 0;
}
bool allFinite(const float* x, size_t n) { return noneNonFinite(x, n, FiniteKind::kFloat); }
bool allFiniteHalf(const uint16_t* h, size_t n) { return noneNonFinite(h, n, FiniteKind::kHalf); }
bool allFiniteBf16(const uint16_t* b, size_t n) { return noneNonFinite(b, n, FiniteKind::kBf16); }

// ---- Element-wise ------------------------------------------------------------------------------

__global__ void axpyKernel(float a, const float* x, float* y, size_t n) {
  for (size_t i = globalThread(); i < n; i += gridThreads()) {
    y[i] = __fadd_rn(y[i], __fmul_rn(a, x[i]));
  }
}
__global__ void addKernel(const float* x, const float* y, float* out, size_t n) {
  for (size_t i = globalThread(); i < n; i += gridThreads()) out[i] = __fadd_rn(x[i], y[i]);
}
__global__ void toHalfKernel(const float* x, size_t n, uint16_t* out) {
  for (size_t i = globalThread(); i < n; i += gridThreads()) out[i] = floatToHalf(x[i]);
}
__global__ void toBf16Kernel(const float* x, size_t n, uint16_t* out) {
  for (size_t i = globalThread(); i < n; i += gridThreads()) out[i] = floatToBf16(x[i]);
}
template <bool kBf16>
__global__ void halfAccumulateKernel(const uint16_t* h, size_t n, float w, float* acc) {
  for (size_t i = globalThread(); i < n; i += gridThreads()) {
    const float v = kBf16 ? bf16ToFloat(h[i]) : halfToFloat(h[i]);
    acc[i] = __fadd_rn(acc[i], __fmul_rn(w, v));
  }
}

void axpy(float a, const float* x, float* y, size_t n) {
  if (n == 0) return;
  Context& c = threadContext();
  axpyKernel<<<gridFor(n), kThreads, 0, c.stream>>>(a, x, y, n);
  finish(c, "axpy");
}
void add(const float* x, const float* y, float* out, size_t n) {
  if (n == 0) return;
  Context& c = threadContext();
  addKernel<<<gridFor(n), kThreads, 0, c.stream>>>(x, y, out, n);
  finish(c, "add");
}
void toHalf(const float* x, size_t n, uint16_t* out) {
  if (n == 0) return;
  Context& c = threadContext();
  toHalfKernel<<<gridFor(n), kThreads, 0, c.stream>>>(x, n, out);
  finish(c, "toHalf");
}
void toBf16(const float* x, size_t n, uint16_t* out) {
  if (n == 0) return;
  Context& c = threadContext();
  toBf16Kernel<<<gridFor(n), kThreads, 0, c.stream>>>(x, n, out);
  finish(c, "toBf16");
}
void halfAccumulate(const uint16_t* h, size_t n, float w, float* acc) {
  if (n == 0) return;
  Context& c = threadContext();
  halfAccumulateKernel<false><<<gridFor(n), kThreads, 0, c.stream>>>(h, n, w, acc);
  finish(c, "halfAccumulate");
}
void bf16Accumulate(const uint16_t* b, size_t n, float w, float* acc) {
  if (n == 0) return;
  Context& c = threadContext();
  halfAccumulateKernel<true><<<gridFor(n), kThreads, 0, c.stream>>>(b, n, w, acc);
  finish(c, "bf16Accumulate");
}

// ---- Block quantization ------------------------------------------------------------------------
// One thread block per quantization block: block max of the magnitude bits (the same bits the CPU
// maxAbs returns), then scale and inverse from element_math.h, then each code. For int4 each
// thread writes whole bytes (elements 2j and 2j+1); a quantization block is a multiple of 64
// elements, so no byte straddles two blocks, and a missing odd last element leaves a 0 nibble.

__device__ __forceinline__ int quantizeOne(const float* x, size_t i, float inv, int levels,
                                           bool stochastic, uint64_t key) {
  return stochastic
             ? quantizeStochastic(x[i], inv, levels, uniform01(key, static_cast<uint32_t>(i)))
             : quantizeNearest(x[i], inv, levels);
}

__global__ void quantizeKernel(const float* x, size_t n, size_t block, int bits, bool stochastic,
                               uint64_t key, uint8_t* codes, float* scales) {
  __shared__ uint32_t shared[kWarps];
  const size_t b = blockIdx.x;
  const size_t start = b * block, end = min(n, start + block);
  uint32_t m = 0;
  for (size_t i = start + threadIdx.x; i < end; i += blockDim.x) m = max(m, magnitudeBits(x[i]));
  m = blockMax(m, shared);
  const float maxAbsValue = bitsFloat(m);
  const int levels = quantLevels(bits);
  const float inv = blockInvScale(maxAbsValue, levels);
  if (threadIdx.x == 0) scales[b] = blockScale(maxAbsValue, levels);
  if (bits == 8) {
    for (size_t i = start + threadIdx.x; i < end; i += blockDim.x) {
      const int q = quantizeOne(x, i, inv, levels, stochastic, key);
      codes[i] = static_cast<uint8_t>(static_cast<int8_t>(q));
    }
  } else {
    for (size_t j = start / 2 + threadIdx.x; 2 * j < end; j += blockDim.x) {
      const int q0 = quantizeOne(x, 2 * j, inv, levels, stochastic, key);
      const int q1 = 2 * j + 1 < end ? quantizeOne(x, 2 * j + 1, inv, levels, stochastic, key) : 0;
      codes[j] = static_cast<uint8_t>((q0 & 0xF) | ((q1 & 0xF) << 4));
    }
  }
}

__global__ void dequantizeAccumulateKernel(const uint8_t* codes, const float* scales, size_t n,
                                           size_t block, int bits, float w, float* acc) {
  for (size_t i = globalThread(); i < n; i += gridThreads()) {
    const float ws = __fmul_rn(w, scales[i / block]);
    int q;
    if (bits == 8) {
      q = static_cast<int8_t>(codes[i]);
    } else {
      const int nib = (codes[i / 2] >> ((i & 1) * 4)) & 0xF;
      q = nib >= 8 ? nib - 16 : nib;
    }
    acc[i] = __fadd_rn(acc[i], __fmul_rn(ws, static_cast<float>(q)));
  }
}

void quantizeBlocks(const float* x, size_t n, size_t block, int bits, Rounding rounding,
                    uint64_t key, uint8_t* codes, float* scales) {
  if (n == 0) return;
  Context& c = threadContext();
  const size_t blocks = (n + block - 1) / block;
  quantizeKernel<<<static_cast<unsigned>(blocks), kThreads, 0, c.stream>>>(
      x, n, block, bits, rounding == Rounding::kStochastic, key, codes, scales);
  finish(c, "quantizeBlocks");
}
void dequantizeAccumulate(const uint8_t* codes, const float* scales, size_t n, size_t block,
                          int bits, float w, float* acc) {
  if (n == 0) return;
  Context& c = threadContext();
  dequantizeAccumulateKernel<<<gridFor(n), kThreads, 0, c.stream>>>(codes, scales, n, block, bits,
                                                                    w, acc);
  finish(c, "dequantizeAccumulate");
}

// ---- Sign ---------------------------------------------------------------------------------------
// Eight lanes (threads 8g..8g+7 of a warp) per sign block: lane l sums |x| of block elements
// l, l+8, l+16, ... in order, exactly the lane sums of element_math.h's reduceLanes8 contract, and
// the warp ballot of the eight sign bits at each step is one output byte. Every thread of a warp
// runs the same number of steps (block / 8) so the ballots are convergent.

constexpr unsigned kSignBlocksPerCta = kThreads / 8;

__global__ void signPackKernel(const float* x, size_t n, size_t block, size_t blocks, uint8_t* bits,
                               float* scales) {
  const unsigned lane = threadIdx.x & 31, sub = threadIdx.x & 7, groupBase = lane & ~7u;
  const size_t sb = static_cast<size_t>(blockIdx.x) * kSignBlocksPerCta + threadIdx.x / 8;
  const bool live = sb < blocks;
  const size_t start = live ? sb * block : 0;
  const size_t end = live ? min(n, start + block) : 0;
  float laneSum = 0.0f;
  const size_t steps = block / 8;
  for (size_t j = 0; j < steps; ++j) {
    const size_t i = start + 8 * j + sub;
    const bool active = live && i < end;
    const float v = active ? x[i] : 0.0f;
    if (active) laneSum = __fadd_rn(laneSum, fabsf(v));
    const unsigned ballot = __ballot_sync(kFullMask, active && (floatBits(v) >> 31) != 0);
    if (sub == 0 && live && start + 8 * j < end) {
      bits[(start + 8 * j) / 8] = static_cast<uint8_t>(ballot >> groupBase);
    }
  }
  float lanes[8];
  for (unsigned s = 0; s < 8; ++s) lanes[s] = __shfl_sync(kFullMask, laneSum, groupBase + s);
  if (sub == 0 && live) {
    scales[sb] = __fdiv_rn(reduceLanes8(lanes), static_cast<float>(end - start));
  }
}

__global__ void signAccumulateKernel(const uint8_t* bits, const float* scales, size_t n,
                                     size_t block, float w, float* acc) {
  for (size_t i = globalThread(); i < n; i += gridThreads()) {
    const float ws = __fmul_rn(w, scales[i / block]);
    const bool neg = (bits[i / 8] >> (i % 8)) & 1u;
    acc[i] = __fadd_rn(acc[i], neg ? -ws : ws);
  }
}

void signPack(const float* x, size_t n, size_t block, uint8_t* bits, float* scales) {
  if (n == 0) return;
  Context& c = threadContext();
  const size_t blocks = (n + block - 1) / block;
  const size_t grid = (blocks + kSignBlocksPerCta - 1) / kSignBlocksPerCta;
  signPackKernel<<<static_cast<unsigned>(grid), kThreads, 0, c.stream>>>(x, n, block, blocks, bits,
                                                                         scales);
  finish(c, "signPack");
}
void signAccumulate(const uint8_t* bits, const float* scales, size_t n, size_t block, float w,
                    float* acc) {
  if (n == 0) return;
  Context& c = threadContext();
  signAccumulateKernel<<<gridFor(n), kThreads, 0, c.stream>>>(bits, scales, n, block, w, acc);
  finish(c, "signAccumulate");
}

// ---- Top-k -----------------------------------------------------------------------------------
// Radix selection on the 31 magnitude bits, 8 bits per pass from the top: a histogram of the
// candidates that share the prefix found so far, read back (1 KiB) to pick the digit holding the
// k-th largest. After four passes the k-th largest key T and the number above it are known; the
// selection is every key > T plus the first (k - above) keys == T in index order (the reference's
// tie rule). A count pass gives each 4096-element tile its (above, equal) counts; their exclusive
// scan (on the host, in tile order) and a ballot scan inside each tile give every selected element
// its output slot, so the indices come out ascending with no sort.
//
// Workspace: 256 histogram counters + 2 counters per tile (uint32).

size_t topkTiles(size_t n) { return (n + kTopkTile - 1) / kTopkTile; }

__global__ void iotaKernel(uint32_t* out, size_t n) {
  for (size_t i = globalThread(); i < n; i += gridThreads()) out[i] = static_cast<uint32_t>(i);
}

__global__ void radixHistogramKernel(const float* x, size_t n, uint32_t prefix, uint32_t mask,
                                     int shift, uint32_t* hist) {
  __shared__ uint32_t sh[256];
  for (unsigned t = threadIdx.x; t < 256; t += blockDim.x) sh[t] = 0;
  __syncthreads();
  for (size_t i = globalThread(); i < n; i += gridThreads()) {
    const uint32_t key = magnitudeBits(x[i]);
    if ((key & mask) == prefix) atomicAdd(&sh[(key >> shift) & 0xFFu], 1u);
  }
  __syncthreads();
  for (unsigned t = threadIdx.x; t < 256; t += blockDim.x) {
    if (sh[t] != 0) atomicAdd(&hist[t], sh[t]);
  }
}

__global__ void topkTileCountKernel(const float* x, size_t n, uint32_t threshold,
                                    uint32_t* tileCounts) {
  __shared__ uint32_t shared[kWarps];
  const size_t start = static_cast<size_t>(blockIdx.x) * kTopkTile;
  const size_t end = min(n, start + kTopkTile);
  uint32_t above = 0, equal = 0;
  for (size_t i = start + threadIdx.x; i < end; i += blockDim.x) {
    const uint32_t key = magnitudeBits(x[i]);
    above += key > threshold;
    equal += key == threshold;
  }
  above = blockSum(above, shared);
  equal = blockSum(equal, shared);
  if (threadIdx.x == 0) {
    tileCounts[2 * blockIdx.x] = above;
    tileCounts[2 * blockIdx.x + 1] = equal;
  }
}

// tilePrefix: per tile, the number of keys > T and == T in all earlier tiles.
__global__ void topkCompactKernel(const float* x, size_t n, uint32_t threshold, uint32_t ties,
                                  const uint32_t* tilePrefix, uint32_t* indices) {
  __shared__ uint32_t warpAbove[kWarps], warpEqual[kWarps];
  const size_t start = static_cast<size_t>(blockIdx.x) * kTopkTile;
  const size_t end = min(n, start + kTopkTile);
  const unsigned lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const unsigned lowerLanes = (1u << lane) - 1u;
  uint32_t baseAbove = tilePrefix[2 * blockIdx.x], baseEqual = tilePrefix[2 * blockIdx.x + 1];
  for (size_t chunk = start; chunk < end; chunk += blockDim.x) {
    const size_t i = chunk + threadIdx.x;
    const bool in = i < end;
    const uint32_t key = in ? magnitudeBits(x[i]) : 0;
    const bool isAbove = in && key > threshold, isEqual = in && key == threshold;
    const unsigned ballotAbove = __ballot_sync(kFullMask, isAbove);
    const unsigned ballotEqual = __ballot_sync(kFullMask, isEqual);
    if (lane == 0) {
      warpAbove[warp] = __popc(ballotAbove);
      warpEqual[warp] = __popc(ballotEqual);
    }
    __syncthreads();
    uint32_t aboveBefore = baseAbove + __popc(ballotAbove & lowerLanes);
    uint32_t equalBefore = baseEqual + __popc(ballotEqual & lowerLanes);
    uint32_t chunkAbove = 0, chunkEqual = 0;
    for (unsigned w = 0; w < static_cast<unsigned>(kWarps); ++w) {
      if (w < warp) {
        aboveBefore += warpAbove[w];
        equalBefore += warpEqual[w];
      }
      chunkAbove += warpAbove[w];
      chunkEqual += warpEqual[w];
    }
    // Output slot = selected elements before i = (keys > T before i) + (ties before i, capped).
    if (isAbove) {
      indices[aboveBefore + min(equalBefore, ties)] = static_cast<uint32_t>(i);
    } else if (isEqual && equalBefore < ties) {
      indices[aboveBefore + equalBefore] = static_cast<uint32_t>(i);
    }
    baseAbove += chunkAbove;
    baseEqual += chunkEqual;
    __syncthreads();  // warpAbove/warpEqual are rewritten by the next chunk
  }
}

size_t topkWorkspaceBytes(size_t n, size_t /*k*/) {
  return (256 + 2 * topkTiles(n)) * sizeof(uint32_t);
}

TopkStats topkSelect(const float* x, size_t n, size_t k, Selector /*selector*/, double /*slack*/,
                     uint64_t /*key*/, void* workspace, uint32_t* indices) {
  TopkStats stats;
  stats.passes = 1;
  if (n == 0 || k == 0) return stats;
  Context& c = threadContext();
  if (k >= n) {
    iotaKernel<<<gridFor(n), kThreads, 0, c.stream>>>(indices, n);
    finish(c, "topk iota");
    stats.count = n;
    return stats;
  }
  auto* hist = static_cast<uint32_t*>(workspace);
  uint32_t* tileCounts = hist + 256;
  auto* hostHist = static_cast<uint32_t*>(c.hostStaging);
  uint32_t prefix = 0, mask = 0;
  size_t remaining = k, above = 0;
  for (int shift = 24; shift >= 0; shift -= 8) {
    checkCuda(cudaMemsetAsync(hist, 0, 256 * sizeof(uint32_t), c.stream), "topk memset");
    radixHistogramKernel<<<gridFor(n), kThreads, 0, c.stream>>>(x, n, prefix, mask, shift, hist);
    checkCuda(
        cudaMemcpyAsync(hostHist, hist, 256 * sizeof(uint32_t), cudaMemcpyDeviceToHost, c.stream),
        "topk histogram copy");
    finish(c, "topk histogram");
    // Walk digits from the top until the bin holding the remaining-th largest candidate.
    // Invariant: the candidates (keys with this prefix) number >= remaining, so bin 0 holds it
    // when no higher bin does.
    size_t cum = 0;
    uint32_t digit = 255;
    for (; digit > 0; --digit) {
      if (cum + hostHist[digit] >= remaining) break;
      cum += hostHist[digit];
    }
    above += cum;
    remaining -= cum;
    prefix |= digit << shift;
    mask |= 0xFFu << shift;
  }
  const uint32_t threshold = prefix;
  const size_t tiles = topkTiles(n);
  topkTileCountKernel<<<static_cast<unsigned>(tiles), kThreads, 0, c.stream>>>(x, n, threshold,
                                                                               tileCounts);
  std::vector<uint32_t> prefixes(2 * tiles);
  checkCuda(cudaMemcpyAsync(prefixes.data(), tileCounts, prefixes.size() * sizeof(uint32_t),
                            cudaMemcpyDeviceToHost, c.stream),
            "topk tile counts copy");
  finish(c, "topk tile counts");
  size_t aboveSum = 0, equalSum = 0;
  for (size_t t = 0; t < tiles; ++t) {
    const uint32_t a = prefixes[2 * t], e = prefixes[2 * t + 1];
    prefixes[2 * t] = static_cast<uint32_t>(aboveSum);
    prefixes[2 * t + 1] = static_cast<uint32_t>(equalSum);
    aboveSum += a;
    equalSum += e;
  }
  // The histogram passes and the count pass must agree; a mismatch means a kernel is wrong.
  if (aboveSum != above || equalSum < remaining) checkCuda(cudaErrorUnknown, "topk count check");
  checkCuda(cudaMemcpyAsync(tileCounts, prefixes.data(), prefixes.size() * sizeof(uint32_t),
                            cudaMemcpyHostToDevice, c.stream),
            "topk prefix copy");
  topkCompactKernel<<<static_cast<unsigned>(tiles), kThreads, 0, c.stream>>>(
      x, n, threshold, static_cast<uint32_t>(remaining), tileCounts, indices);
  finish(c, "topk compact");
  stats.count = k;
  stats.passes = 6;  // four histogram passes, one count pass, one compaction pass
  return stats;
}

// ---- Gather / scatter ---------------------------------------------------------------------------

__global__ void gatherKernel(const float* x, const uint32_t* idx, size_t k, float* out) {
  for (size_t i = globalThread(); i < k; i += gridThreads()) out[i] = x[idx[i]];
}
// atomicAdd rounds to nearest like __fadd_rn: with distinct indices each element gets exactly
// fl(acc + fl(w * v)); repeated indices stay race-free but add in an unspecified order.
__global__ void scatterAccumulateKernel(const uint32_t* idx, const float* v, size_t k, float w,
                                        float* acc) {
  for (size_t i = globalThread(); i < k; i += gridThreads()) {
    atomicAdd(&acc[idx[i]], __fmul_rn(w, v[i]));
  }
}

void gather(const float* x, const uint32_t* idx, size_t k, float* out) {
  if (k == 0) return;
  Context& c = threadContext();
  gatherKernel<<<gridFor(k), kThreads, 0, c.stream>>>(x, idx, k, out);
  finish(c, "gather");
}
void scatterAccumulate(const uint32_t* idx, const float* v, size_t k, float w, float* acc) {
  if (k == 0) return;
  Context& c = threadContext();
  scatterAccumulateKernel<<<gridFor(k), kThreads, 0, c.stream>>>(idx, v, k, w, acc);
  finish(c, "scatterAccumulate");
}

// ---- Dense gossip passes ------------------------------------------------------------------------
// Element-wise results spelled out with _rn intrinsics (the CPU tables' bits); the sums over
// elements are double partials per block, summed on the host: they may differ from the CPU tables'
// lane order by rounding (ops.h).

constexpr size_t kMixBlocks = 512;  // mixDifferences' partials; its terms follow them in scratch
constexpr size_t kMixTermsOffset = kMixBlocks * sizeof(double);
static_assert(2 * kMaxReduceBlocks * sizeof(double) <= kDeviceScratchBytes);
static_assert(kMixTermsOffset + kMaxDeviceMixTerms * sizeof(MixTerm) <= kDeviceScratchBytes);
static_assert(kMaxDeviceMixTerms * sizeof(MixTerm) + kMixBlocks * sizeof(double) <=
              kHostStagingBytes);

__global__ void subtractSquaresKernel(const float* x, const float* y, float* out, size_t n,
                                      double* partial) {
  double s = 0.0;
  for (size_t i = globalThread(); i < n; i += gridThreads()) {
    const float d = __fsub_rn(x[i], y[i]);
    out[i] = d;
    s = __dadd_rn(s, __dmul_rn(static_cast<double>(d), static_cast<double>(d)));
  }
  blockSumTo(s, partial);
}

__global__ void distanceAndNormKernel(const float* x, const float* y, size_t n, double* partial) {
  double sd = 0.0, sn = 0.0;
  for (size_t i = globalThread(); i < n; i += gridThreads()) {
    const double yi = y[i];
    const double d = __dsub_rn(static_cast<double>(x[i]), yi);
    sd = __dadd_rn(sd, __dmul_rn(d, d));
    sn = __dadd_rn(sn, __dmul_rn(yi, yi));
  }
  blockSumTo(sd, partial);
  blockSumTo(sn, partial + gridDim.x);
}

__global__ void mixDifferencesKernel(float* x, const float* y, const MixTerm* terms, size_t count,
                                     size_t n, double* partial) {
  double s = 0.0;
  for (size_t i = globalThread(); i < n; i += gridThreads()) {
    const double yi = y[i];
    double t = 0.0;
    for (size_t j = 0; j < count; ++j) {
      const double d = __dsub_rn(static_cast<double>(terms[j].replica[i]), yi);
      t = __dadd_rn(t, __dmul_rn(terms[j].coefficient, d));
      s = __dadd_rn(s, __dmul_rn(__dmul_rn(terms[j].weight, d), d));
    }
    x[i] = __double2float_rn(__dadd_rn(static_cast<double>(x[i]), t));
  }
  blockSumTo(s, partial);
}

double subtractSquares(const float* x, const float* y, float* out, size_t n) {
  if (n == 0) return 0.0;
  Context& c = threadContext();
  const unsigned grid = gridFor(n, kMaxReduceBlocks);
  subtractSquaresKernel<<<grid, kThreads, 0, c.stream>>>(x, y, out, n,
                                                         static_cast<double*>(c.deviceScratch));
  return sumPartials(c, grid, "subtractSquares");
}

DistanceAndNorm distanceAndNorm(const float* x, const float* y, size_t n) {
  if (n == 0) return {};
  Context& c = threadContext();
  const unsigned grid = gridFor(n, kMaxReduceBlocks);
  distanceAndNormKernel<<<grid, kThreads, 0, c.stream>>>(x, y, n,
                                                         static_cast<double*>(c.deviceScratch));
  const double* h = partialsOnHost(c, 2 * size_t{grid}, "distanceAndNorm");
  DistanceAndNorm r;
  for (unsigned b = 0; b < grid; ++b) {
    r.distance2 += h[b];
    r.norm2 += h[grid + b];
  }
  return r;
}

double mixDifferences(float* x, const float* y, const MixTerm* terms, size_t count, size_t n) {
  if (count == 0 || n == 0) return 0.0;
  if (count > kMaxDeviceMixTerms) {
    checkCuda(cudaErrorInvalidValue, "mixDifferences: more than kMaxDeviceMixTerms terms");
  }
  Context& c = threadContext();
  // The terms travel through pinned staging into the scratch behind the partials.
  auto* staged = static_cast<unsigned char*>(c.hostStaging) + kMixTermsOffset;
  std::memcpy(staged, terms, count * sizeof(MixTerm));
  auto* deviceTerms = static_cast<unsigned char*>(c.deviceScratch) + kMixTermsOffset;
  checkCuda(cudaMemcpyAsync(deviceTerms, staged, count * sizeof(MixTerm), cudaMemcpyHostToDevice,
                            c.stream),
            "mixDifferences terms");
  const unsigned grid = gridFor(n, kMixBlocks);
  mixDifferencesKernel<<<grid, kThreads, 0, c.stream>>>(
      x, y, reinterpret_cast<const MixTerm*>(deviceTerms), count, n,
      static_cast<double*>(c.deviceScratch));
  return sumPartials(c, grid, "mixDifferences");
}

__global__ void weightedSumKernel(float* x, const float* a, double wa, const float* b, double wb,
                                  const MixTerm* terms, size_t count, size_t n) {
  for (size_t i = globalThread(); i < n; i += gridThreads()) {
    double t = __dmul_rn(wa, static_cast<double>(a[i]));
    if (b != nullptr) t = __dadd_rn(t, __dmul_rn(wb, static_cast<double>(b[i])));
    for (size_t j = 0; j < count; ++j) {
      t = __dadd_rn(t, __dmul_rn(terms[j].coefficient, static_cast<double>(terms[j].replica[i])));
    }
    x[i] = __double2float_rn(t);
  }
}

void weightedSum(float* x, const float* a, double wa, const float* b, double wb,
                 const MixTerm* terms, size_t count, size_t n) {
  if (n == 0) return;
  if (count > kMaxDeviceMixTerms) {
    checkCuda(cudaErrorInvalidValue, "weightedSum: more than kMaxDeviceMixTerms terms");
  }
  Context& c = threadContext();
  // The terms travel through pinned staging into device scratch, as mixDifferences' do.
  auto* staged = static_cast<unsigned char*>(c.hostStaging) + kMixTermsOffset;
  if (count > 0) std::memcpy(staged, terms, count * sizeof(MixTerm));
  auto* deviceTerms = static_cast<unsigned char*>(c.deviceScratch) + kMixTermsOffset;
  if (count > 0) {
    checkCuda(cudaMemcpyAsync(deviceTerms, staged, count * sizeof(MixTerm), cudaMemcpyHostToDevice,
                              c.stream),
              "weightedSum terms");
  }
  weightedSumKernel<<<gridFor(n), kThreads, 0, c.stream>>>(
      x, a, wa, b, wb, reinterpret_cast<const MixTerm*>(deviceTerms), count, n);
  finish(c, "weightedSum");
}

// ---- Optimizer steps: the reference's expressions with each operation rounded as there ----

__global__ void sgdDirectionKernel(const float* g, const float* x, float* m, float* u, size_t n,
                                   SgdStep step) {
  const float beta = step.beta;
  for (size_t i = globalThread(); i < n; i += gridThreads()) {
    const float gi = __fadd_rn(g[i], __fmul_rn(step.weightDecay, x[i]));
    switch (step.momentum) {
      case SgdMomentum::kNone:
        u[i] = gi;
        break;
      case SgdMomentum::kLocal:
        m[i] = __fadd_rn(__fmul_rn(beta, m[i]), gi);
        u[i] = m[i];
        break;
      case SgdMomentum::kLocalNesterov:
        m[i] = __fadd_rn(__fmul_rn(beta, m[i]), gi);
        u[i] = __fadd_rn(gi, __fmul_rn(beta, m[i]));
        break;
      case SgdMomentum::kQuasiGlobal:
        u[i] = __fadd_rn(gi, __fmul_rn(beta, m[i]));
        break;
      case SgdMomentum::kQuasiGlobalNesterov:
        u[i] = __fadd_rn(gi, __fmul_rn(beta, __fadd_rn(__fmul_rn(beta, m[i]), gi)));
        break;
    }
  }
}

__global__ void adamwDirectionKernel(const float* g, const float* x, float* m, float* v, float* u,
                                     size_t n, AdamwStep s) {
  const float a1 = __fsub_rn(1.0f, s.beta1), a2 = __fsub_rn(1.0f, s.beta2);
  for (size_t i = globalThread(); i < n; i += gridThreads()) {
    const float gi = g[i];
    const float mi = __fadd_rn(__fmul_rn(s.beta1, m[i]), __fmul_rn(a1, gi));
    const float vi = __fadd_rn(__fmul_rn(s.beta2, v[i]), __fmul_rn(__fmul_rn(a2, gi), gi));
    m[i] = mi;
    v[i] = vi;
    const float denom = __fadd_rn(__fsqrt_rn(__fdiv_rn(vi, s.biasCorrection2)), s.eps);
    u[i] = __fadd_rn(__fdiv_rn(__fdiv_rn(mi, s.biasCorrection1), denom),
                     __fmul_rn(s.weightDecay, x[i]));
  }
}

__global__ void momentumFromChangeKernel(const float* before, const float* after, float* m,
                                         size_t n, float beta, float invLrSum) {
  const float a = __fsub_rn(1.0f, beta);
  for (size_t i = globalThread(); i < n; i += gridThreads()) {
    const float d = __fmul_rn(__fsub_rn(before[i], after[i]), invLrSum);
    m[i] = __fadd_rn(__fmul_rn(beta, m[i]), __fmul_rn(a, d));
  }
}

void sgdDirection(const float* g, const float* x, float* m, float* u, size_t n, SgdStep step) {
  if (n == 0) return;
  Context& c = threadContext();
  sgdDirectionKernel<<<gridFor(n), kThreads, 0, c.stream>>>(g, x, m, u, n, step);
  finish(c, "sgdDirection");
}

void adamwDirection(const float* g, const float* x, float* m, float* v, float* u, size_t n,
                    AdamwStep step) {
  if (n == 0) return;
  Context& c = threadContext();
  adamwDirectionKernel<<<gridFor(n), kThreads, 0, c.stream>>>(g, x, m, v, u, n, step);
  finish(c, "adamwDirection");
}

void momentumFromChange(const float* before, const float* after, float* m, size_t n, float beta,
                        float invLrSum) {
  if (n == 0) return;
  Context& c = threadContext();
  momentumFromChangeKernel<<<gridFor(n), kThreads, 0, c.stream>>>(before, after, m, n, beta,
                                                                  invLrSum);
  finish(c, "momentumFromChange");
}

}  // namespace
}  // namespace grapevine::kernels::cuda

namespace grapevine::kernels {

const Ops& cudaOps() {
  namespace c = cuda;
  static const Ops ops = {
      "cuda",
      c::maxAbs,
      c::maxAbsDiff,
      c::sumSquares,
      c::dot,
      c::allFinite,
      c::allFiniteHalf,
      c::allFiniteBf16,
      c::axpy,
      c::add,
      c::toHalf,
      c::halfAccumulate,
      c::toBf16,
      c::bf16Accumulate,
      c::quantizeBlocks,
      c::dequantizeAccumulate,
      c::signPack,
      c::signAccumulate,
      c::topkWorkspaceBytes,
      c::topkSelect,
      c::gather,
      c::scatterAccumulate,
      c::subtractSquares,
      c::distanceAndNorm,
      c::mixDifferences,
      c::weightedSum,
      c::sgdDirection,
      c::adamwDirection,
      c::momentumFromChange,
      c::crc32cDevice,
  };
  return ops;
}

}  // namespace grapevine::kernels
