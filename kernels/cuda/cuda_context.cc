// Per-thread CUDA context, device probing and the host-side CRC32C of the CUDA table.
#include "kernels/cuda/cuda_context.h"

#include <algorithm>
#include <cstdlib>
#include <string>

#include "kernels/cuda/cuda_ops.h"
#include "kernels/ops.h"
#include "runtime/common/log.h"

namespace grapevine::kernels {
namespace cuda {

void checkCuda(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  log::error("cuda ops: ", what, " failed: ", cudaGetErrorName(e), " (", cudaGetErrorString(e),
             ")");
  std::abort();
}

namespace {

// Owns one thread's Context. Errors while releasing are ignored: at process exit the driver may
// already be shutting down, and there is nothing left to protect.
class ContextHolder {
 public:
  ~ContextHolder() { release(); }

  Context& forDevice(int device) {
    if (device_ == device) return ctx_;
    release();
    checkCuda(cudaStreamCreateWithFlags(&ctx_.stream, cudaStreamNonBlocking), "cudaStreamCreate");
    checkCuda(cudaMalloc(&ctx_.deviceScratch, kDeviceScratchBytes), "cudaMalloc(scratch)");
    checkCuda(cudaMallocHost(&ctx_.hostStaging, kHostStagingBytes), "cudaMallocHost(staging)");
    device_ = device;
    return ctx_;
  }

 private:
  void release() {
    if (device_ < 0) return;
    int current = -1;
    (void)cudaGetDevice(&current);
    (void)cudaSetDevice(device_);  // the resources belong to the device they were made on
    (void)cudaStreamDestroy(ctx_.stream);
    (void)cudaFree(ctx_.deviceScratch);
    (void)cudaFreeHost(ctx_.hostStaging);
    if (current >= 0) (void)cudaSetDevice(current);
    ctx_ = Context{};
    device_ = -1;
  }

  Context ctx_;
  int device_ = -1;
};

}  // namespace

Context& threadContext() {
  thread_local ContextHolder holder;
  int device = 0;
  checkCuda(cudaGetDevice(&device), "cudaGetDevice");
  return holder.forDevice(device);
}

uint32_t crc32cDevice(uint32_t crc, const uint8_t* data, size_t n) {
  if (n == 0) return crc;
  Context& c = threadContext();
  auto* staging = static_cast<uint8_t*>(c.hostStaging);
  for (size_t off = 0; off < n; off += kHostStagingBytes) {
    const size_t len = std::min(kHostStagingBytes, n - off);
    checkCuda(cudaMemcpyAsync(staging, data + off, len, cudaMemcpyDeviceToHost, c.stream),
              "crc32c copy");
    checkCuda(cudaStreamSynchronize(c.stream), "crc32c sync");
    crc = cpuOps().crc32c(crc, staging, len);
  }
  return crc;
}

}  // namespace cuda

Status cudaDeviceAvailable() {
  // Probed once: the answer cannot change for the life of the process.
  static const std::string reason = [] {
    int count = 0;
    const cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();  // clear the sticky-free error so later calls start clean
      return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
    }
    if (count <= 0) return std::string("the CUDA runtime reports 0 devices");
    return std::string();
  }();
  return reason.empty() ? Status::ok() : unavailable(reason);
}

}  // namespace grapevine::kernels
