// Internal to kernels/cuda/: the per-thread CUDA resources the ops run on, and the abort-on-error
// check. Not a public header (compress/ and tools use cuda_ops.h only).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace grapevine::kernels::cuda {

// Bytes of device scratch (reduction partials, radix histogram, flags) and of pinned host staging
// (reduction results, histograms, CRC chunks) each thread's context holds.
inline constexpr size_t kDeviceScratchBytes = 16 << 10;
inline constexpr size_t kHostStagingBytes = 1 << 20;

// One per (thread, device): created on the thread's first op on its current device, released when
// the thread exits (or when the thread switches device and calls again). Only its owner thread
// touches it, so the ops stay thread-safe without locks.
struct Context {
  cudaStream_t stream = nullptr;
  void* deviceScratch = nullptr;  // kDeviceScratchBytes, device memory
  void* hostStaging = nullptr;    // kHostStagingBytes, pinned host memory
};

// The calling thread's context for its current device; aborts when CUDA cannot provide it.
Context& threadContext();

// Logs `what` with the CUDA error and aborts unless `e` is cudaSuccess. The Ops table returns
// values, not Status, and a failed kernel or copy leaves the outputs undefined: there is no
// meaningful way to continue.
void checkCuda(cudaError_t e, const char* what);

// crc32c over device bytes: staged through the pinned buffer in chunks, checksummed on the host
// with cpuOps().crc32c (hardware CRC32 instruction), chained across chunks.
uint32_t crc32cDevice(uint32_t crc, const uint8_t* data, size_t n);

}  // namespace grapevine::kernels::cuda
