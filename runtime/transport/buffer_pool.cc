#include "runtime/transport/buffer_pool.h"

#include <bit>

namespace grapevine::transport {

Buffer BufferPool::acquire(std::size_t n) {
  const std::size_t cls = std::bit_ceil(std::max<std::size_t>(n, 256));
  {
    std::lock_guard lock(mu_);
    auto it = free_.lower_bound(cls);
    // Reuse an idle buffer of this class or the next one up; a much larger one would pin memory.
    if (it != free_.end() && it->first <= 2 * cls) {
      Buffer b = std::move(it->second);
      pooledBytes_ -= it->first;
      free_.erase(it);
      return b;
    }
    ++allocations_;
  }
  return Buffer(cls);
}

void BufferPool::release(Buffer buffer) {
  if (buffer.capacity() == 0) return;
  std::lock_guard lock(mu_);
  if (pooledBytes_ + buffer.capacity() > maxPooledBytes_) return;
  pooledBytes_ += buffer.capacity();
  const std::size_t cap = buffer.capacity();
  free_.emplace(cap, std::move(buffer));
}

std::size_t BufferPool::pooledBytes() const {
  std::lock_guard lock(mu_);
  return pooledBytes_;
}

std::size_t BufferPool::allocations() const {
  std::lock_guard lock(mu_);
  return allocations_;
}

}  // namespace grapevine::transport
