#include "runtime/common/lazy_buffer.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <new>
#include <utility>

namespace grapevine {

namespace {

std::size_t pageSize() {
  static const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  return page;
}

}  // namespace

LazyBuffer::LazyBuffer(std::size_t capacity) : capacity_(capacity) {
  if (capacity == 0) return;
  const std::size_t page = pageSize();
  mapped_ = (capacity + page - 1) / page * page;
  void* p = ::mmap(nullptr, mapped_, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) {
    capacity_ = mapped_ = 0;
    throw std::bad_alloc();
  }
  data_ = static_cast<std::uint8_t*>(p);
}

LazyBuffer::~LazyBuffer() { release(); }

LazyBuffer::LazyBuffer(LazyBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      capacity_(std::exchange(other.capacity_, 0)),
      mapped_(std::exchange(other.mapped_, 0)) {}

LazyBuffer& LazyBuffer::operator=(LazyBuffer&& other) noexcept {
  if (this != &other) {
    release();
    data_ = std::exchange(other.data_, nullptr);
    capacity_ = std::exchange(other.capacity_, 0);
    mapped_ = std::exchange(other.mapped_, 0);
  }
  return *this;
}

void LazyBuffer::release() {
  if (data_) ::munmap(data_, mapped_);
  data_ = nullptr;
  capacity_ = mapped_ = 0;
}

void LazyBuffer::trim(std::size_t used, std::size_t keep) {
  if (!data_ || used <= keep) return;
  const std::size_t page = pageSize();
  const std::size_t from = (keep + page - 1) / page * page;
  const std::size_t to = std::min((used + page - 1) / page * page, mapped_);
  if (to > from) ::madvise(data_ + from, to - from, MADV_DONTNEED);
}

}  // namespace grapevine
