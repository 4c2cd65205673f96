// The reference ops, by name, so the vectorised table can fall back to them op by op (when the CPU
// lacks AVX2, and for short tails). See ops.h for each op's contract.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/ops.h"

namespace grapevine::kernels::reference {

float maxAbs(const float* x, size_t n);
float maxAbsDiff(const float* x, const float* y, size_t n);
double sumSquares(const float* x, size_t n);
double dot(const float* x, const float* y, size_t n);
bool allFinite(const float* x, size_t n);
bool allFiniteHalf(const uint16_t* h, size_t n);
bool allFiniteBf16(const uint16_t* b, size_t n);
void axpy(float a, const float* x, float* y, size_t n);
void add(const float* x, const float* y, float* out, size_t n);
void toHalf(const float* x, size_t n, uint16_t* out);
void halfAccumulate(const uint16_t* h, size_t n, float w, float* acc);
void toBf16(const float* x, size_t n, uint16_t* out);
void bf16Accumulate(const uint16_t* b, size_t n, float w, float* acc);
void quantizeBlocks(const float* x, size_t n, size_t block, int bits, Rounding rounding,
                    uint64_t key, uint8_t* codes, float* scales);
void dequantizeAccumulate(const uint8_t* codes, const float* scales, size_t n, size_t block,
                          int bits, float w, float* acc);
void signPack(const float* x, size_t n, size_t block, uint8_t* bits, float* scales);
void signAccumulate(const uint8_t* bits, const float* scales, size_t n, size_t block, float w,
                    float* acc);
size_t topkWorkspaceBytes(size_t n, size_t k);
TopkStats topkSelect(const float* x, size_t n, size_t k, Selector selector, double slack,
                     uint64_t key, void* workspace, uint32_t* indices);
void gather(const float* x, const uint32_t* idx, size_t k, float* out);
void scatterAccumulate(const uint32_t* idx, const float* v, size_t k, float w, float* acc);
double subtractSquares(const float* x, const float* y, float* out, size_t n);
DistanceAndNorm distanceAndNorm(const float* x, const float* y, size_t n);
double mixDifferences(float* x, const float* y, const MixTerm* terms, size_t count, size_t n);
void weightedSum(float* x, const float* a, double wa, const float* b, double wb,
                 const MixTerm* terms, size_t count, size_t n);
void sgdDirection(const float* g, const float* x, float* m, float* u, size_t n, SgdStep step);
void adamwDirection(const float* g, const float* x, float* m, float* v, float* u, size_t n,
                    AdamwStep step);
void momentumFromChange(const float* before, const float* after, float* m, size_t n, float beta,
                        float invLrSum);
// mixDifferences' tile: elements whose sums stay in L1 while each replica streams through.
inline constexpr size_t kMixTile = 1024;
uint32_t crc32c(uint32_t crc, const uint8_t* data, size_t n);
uint32_t magnitudeKey(float f);

}  // namespace grapevine::kernels::reference
