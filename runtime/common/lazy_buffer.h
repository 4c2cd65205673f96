// Receive buffers sized for the largest message a peer may get (a dense snapshot, a collective)
// while most messages are far smaller (a top-1% delta). Zero-filling such a buffer up front costs
// its whole size in resident memory and ≈3 ms per MB of first touch, on whichever thread creates
// it; a LazyBuffer is an anonymous mapping whose pages become resident only when a message is
// written into them, and trim() gives back the pages above what the regular traffic needs once a
// large message has been consumed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace grapevine {

class LazyBuffer {
 public:
  LazyBuffer() = default;
  // Reserves `capacity` bytes of address space; nothing is touched (std::bad_alloc when the
  // mapping fails).
  explicit LazyBuffer(std::size_t capacity);
  ~LazyBuffer();
  LazyBuffer(LazyBuffer&& other) noexcept;
  LazyBuffer& operator=(LazyBuffer&& other) noexcept;
  LazyBuffer(const LazyBuffer&) = delete;
  LazyBuffer& operator=(const LazyBuffer&) = delete;

  std::uint8_t* data() { return data_; }
  const std::uint8_t* data() const { return data_; }
  std::size_t size() const { return capacity_; }
  std::span<std::uint8_t> span() { return {data_, capacity_}; }
  std::span<const std::uint8_t> span(std::size_t n) const { return {data_, n}; }

  // The caller wrote (or a receive may have written) up to `used` bytes: the whole pages between
  // `keep` and `used` go back to the system (they read as zeros afterwards). Cheap when
  // used <= keep.
  void trim(std::size_t used, std::size_t keep);

 private:
  void release();

  std::uint8_t* data_ = nullptr;
  std::size_t capacity_ = 0;
  std::size_t mapped_ = 0;  // the mapping's length (capacity rounded up to pages)
};

}  // namespace grapevine
