// Blocking pipe / socketpair helpers shared by the tests that talk to a forked child (addresses,
// ports, small verdicts). They loop over short reads and writes, and use no Catch2 macros, so a
// forked child may call them too (it reports failure through its exit code).
#pragma once

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace grapevine::test_util {

// Writes all `n` bytes; false on an error or a closed reader.
inline bool writeAll(int fd, const void* data, std::size_t n) {
  const auto* p = static_cast<const std::uint8_t*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<std::size_t>(w);
  }
  return true;
}

// A TCP connection to 127.0.0.1:port whose reads time out after 3 s (a raw client for the tests
// that speak the control protocol by hand); -1 when the connection fails.
inline int dialRaw(std::uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  timeval tv{3, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  return fd;
}

// Reads exactly `n` bytes; false on an error or EOF before that.
inline bool readAll(int fd, void* data, std::size_t n) {
  auto* p = static_cast<std::uint8_t*>(data);
  while (n > 0) {
    const ssize_t r = ::read(fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= static_cast<std::size_t>(r);
  }
  return true;
}

// A length-prefixed byte string (u32 length in host order, then the bytes).
inline bool writeBlob(int fd, std::span<const std::uint8_t> blob) {
  const auto n = static_cast<std::uint32_t>(blob.size());
  return writeAll(fd, &n, sizeof n) && writeAll(fd, blob.data(), blob.size());
}

// The blob, or an empty vector on an error or EOF (the tests never send empty blobs).
inline std::vector<std::uint8_t> readBlob(int fd) {
  std::uint32_t n = 0;
  if (!readAll(fd, &n, sizeof n)) return {};
  std::vector<std::uint8_t> blob(n);
  if (!readAll(fd, blob.data(), n)) return {};
  return blob;
}

// Whether `fd` becomes readable within `timeoutMs` (EOF counts as readable).
inline bool readable(int fd, int timeoutMs) {
  pollfd p{fd, POLLIN, 0};
  int r;
  while ((r = ::poll(&p, 1, timeoutMs)) < 0 && errno == EINTR) {
  }
  return r > 0;
}

}  // namespace grapevine::test_util
