#include "runtime/common/bounded_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace grapevine {
namespace {

const char* kindOf(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISCHR(mode) || S_ISBLK(mode)) return "a device";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

template <typename Bytes>
Result<Bytes> readBounded(const std::string& path, std::uint64_t maxBytes) {
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer, forever.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT) return notFound(path + ": no such file");
    return unavailable(path + ": cannot open: " + std::strerror(err));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return unavailable(path + ": cannot stat: " + std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return invalidArgument(path + " is " + kindOf(st.st_mode) + ", not a regular file");
  }
  const auto size = static_cast<std::uint64_t>(st.st_size);
  if (size > maxBytes) {
    ::close(fd);
    return invalidArgument(path + " is " + std::to_string(size) + " bytes; at most " +
                           std::to_string(maxBytes) + " are read here");
  }
  // What fstat said, no more: a file that grows while it is read is read as it was (an
  // atomically replaced one is a new file and does not change under the reader).
  Bytes out(static_cast<std::size_t>(size), 0);
  std::size_t done = 0;
  while (done < out.size()) {
    const ssize_t n = ::read(fd, out.data() + done, out.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      return unavailable(path + ": read failed: " + std::strerror(err));
    }
    if (n == 0) break;
    done += static_cast<std::size_t>(n);
  }
  ::close(fd);
  out.resize(done);
  return out;
}

}  // namespace

Result<std::vector<std::uint8_t>> readRegularFile(const std::string& path, std::uint64_t maxBytes) {
  return readBounded<std::vector<std::uint8_t>>(path, maxBytes);
}

Result<std::string> readRegularTextFile(const std::string& path, std::uint64_t maxBytes) {
  return readBounded<std::string>(path, maxBytes);
}

std::string printable(std::string_view text, std::size_t maxChars) {
  std::string out;
  for (const char ch : text) {
    if (out.size() >= maxChars) return out + "...";
    const auto c = static_cast<unsigned char>(ch);
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out += ch;
    } else {
      char b[8];
      std::snprintf(b, sizeof b, "\\x%02x", c);
      out += b;
    }
  }
  return out;
}

}  // namespace grapevine
