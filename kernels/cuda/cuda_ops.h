// The CUDA ops table: the same `Ops` contract as kernels/ops.h, over device memory.
//
// Every pointer passed to cudaOps() is device memory (or managed memory) of the calling thread's
// current device; scalars (reductions, TopkStats, CRC) come back to the host. Each op runs on a
// per-thread stream and synchronises it before returning, like every table (so a caller may read
// the outputs right away, and the CPU and CUDA tables are interchangeable).
//
// Bit-exactness: quantized codes and scales, sign bits and scales, half/bf16 bits, exact top-k
// indices, maxAbs and CRC32C are bit-identical to referenceOps(); the `acc += w * v` ops round
// twice (the file is compiled with -fmad=false and uses __fmul_rn/__fadd_rn). sumSquares and dot
// accumulate in double in a fixed tree order (deterministic for a given n, may differ from the
// CPU by rounding). scatterAccumulate uses atomicAdd, so with distinct indices (what top-k makes)
// it is bit-identical; with repeated indices the summation order is unspecified.
//
// The approximate top-k selector runs the exact radix selection (count == k, countError 0): the
// device does the full selection in a few passes, so there is no sampling fast path to take.
//
// Resources: on first use a thread creates a non-blocking stream and a small device/pinned scratch
// on its current device (kept for the thread's life); no op allocates afterwards, except
// crc32c, which copies the bytes to a host buffer and runs cpuOps().crc32c (a serial CRC does not
// pay on a GPU; the CRC covers wire frames, which are staged on the host anyway).
//
// Errors: the table's functions return values, not Status, so a CUDA failure inside an op (a bad
// pointer, a lost device) is unrecoverable: it logs the CUDA error and aborts. Check
// cudaDeviceAvailable() before selecting the table.
#pragma once

#include "kernels/ops.h"
#include "runtime/common/status.h"

namespace grapevine::kernels {

// Ok when the CUDA runtime reports at least one device; otherwise kUnavailable naming the reason
// (driver missing, no device, ...). Cheap after the first call; any thread.
Status cudaDeviceAvailable();

// The CUDA table (name "cuda"). Valid to call without a device; its ops then abort, so check
// cudaDeviceAvailable() first.
const Ops& cudaOps();

}  // namespace grapevine::kernels
