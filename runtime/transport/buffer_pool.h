// Reusable message buffers. Fresh memory costs ≈3 ms per MB on first touch here, so every buffer a
// transport needs for an unexpected message or a staging area comes from a pool and goes back to
// it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <span>

namespace grapevine::transport {

// A heap block of `capacity` bytes, deliberately not zero-filled.
class Buffer {
 public:
  Buffer() = default;
  explicit Buffer(std::size_t capacity)
      : data_(capacity ? new std::uint8_t[capacity] : nullptr), capacity_(capacity) {}
  std::uint8_t* data() { return data_.get(); }
  const std::uint8_t* data() const { return data_.get(); }
  std::size_t capacity() const { return capacity_; }
  std::span<std::uint8_t> span(std::size_t n) { return {data_.get(), n}; }

 private:
  std::unique_ptr<std::uint8_t[]> data_;
  std::size_t capacity_ = 0;
};

// A free list of buffers keyed by power-of-two size class. Thread-safe (one mutex; the inproc
// backend acquires on the sender's thread and releases on the receiver's). Keeps at most
// `maxPooledBytes` idle.
class BufferPool {
 public:
  explicit BufferPool(std::size_t maxPooledBytes = std::size_t{512} << 20)
      : maxPooledBytes_(maxPooledBytes) {}

  // A buffer with capacity() >= n (rounded up to a power of two, minimum 256 bytes). Never fails
  // short of std::bad_alloc; callers bound n (maxMessageBytes) before asking.
  Buffer acquire(std::size_t n);
  // Returns a buffer for reuse; dropped if the pool already holds maxPooledBytes.
  void release(Buffer buffer);

  std::size_t pooledBytes() const;
  // How many acquire() calls had to allocate (for tests: reuse means this stops growing).
  std::size_t allocations() const;

 private:
  mutable std::mutex mu_;
  std::multimap<std::size_t, Buffer> free_;
  std::size_t pooledBytes_ = 0;
  std::size_t allocations_ = 0;
  const std::size_t maxPooledBytes_;
};

}  // namespace grapevine::transport
