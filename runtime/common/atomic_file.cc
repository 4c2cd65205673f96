#include "runtime/common/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>

namespace grapevine {
namespace {

Status failed(const std::string& what, const std::string& path, int err) {
  return unavailable("cannot " + what + " " + path + ": " + std::strerror(err));
}

// Writes every part in order: 0, or the errno of the write that failed (EIO when none was set).
int writeAll(int fd, std::span<const std::span<const std::uint8_t>> parts) {
  for (auto bytes : parts) {
    std::size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return n < 0 && errno ? errno : EIO;
      done += static_cast<std::size_t>(n);
    }
  }
  return 0;
}

}  // namespace

Status writeFileAtomically(const std::string& path,
                           std::initializer_list<std::span<const std::uint8_t>> parts) {
  return writeFileAtomically(path, std::span(parts.begin(), parts.size()));
}

Status writeFileAtomically(const std::string& path,
                           std::span<const std::span<const std::uint8_t>> parts) {
  const std::filesystem::path target(path);
  // Not a regular file (a device such as /dev/stdout or /dev/full, a pipe): written in place; a
  // rename would replace the device node.
  std::error_code ec;
  const auto kind = std::filesystem::status(target, ec).type();
  if (!ec && kind != std::filesystem::file_type::regular &&
      kind != std::filesystem::file_type::not_found) {
    const int fd = ::open(path.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC);
    if (fd < 0) return failed("open", path, errno);
    if (const int err = writeAll(fd, parts); err != 0) {
      ::close(fd);
      return failed("write", path, err);
    }
    if (::close(fd) != 0) return failed("write", path, errno);
    return Status::ok();
  }
  // Unique per process and call: two writers of the same file never share a temporary.
  static std::atomic<unsigned> counter{0};
  const std::string tmp =
      path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter.fetch_add(1));
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return failed("create", tmp, errno);
  if (const int err = writeAll(fd, parts); err != 0) {
    ::close(fd);
    ::unlink(tmp.c_str());
    return failed("write", path, err);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return failed("flush", path, err);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return failed("rename onto", path, err);
  }
  // The rename itself survives a crash only once the directory is on disk.
  const std::string dir =
      target.has_parent_path() ? target.parent_path().string() : std::string(".");
  if (const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  return Status::ok();
}

Status writeFileAtomically(const std::string& path, std::string_view text) {
  return writeFileAtomically(
      path, {std::span<const std::uint8_t>(reinterpret_cast<const std::uint8_t*>(text.data()),
                                           text.size())});
}

}  // namespace grapevine
