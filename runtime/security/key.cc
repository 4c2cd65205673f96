#include "runtime/security/key.h"

#include <fcntl.h>
#include <sodium.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "runtime/common/bounded_file.h"

namespace grapevine::security {
namespace {

constexpr std::size_t kMaxKeyFileBytes = 4096;

std::string octal(mode_t mode) {
  char b[8];
  std::snprintf(b, sizeof b, "%04o", static_cast<unsigned>(mode & 07777));
  return b;
}

int hexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

Status initialize() {
  // sodium_init() is itself thread-safe and returns 1 when already initialized.
  static const int rc = sodium_init();
  if (rc < 0) return internalError("libsodium failed to initialize (no entropy source?)");
  return Status::ok();
}

void randomBytes(std::span<std::uint8_t> out) {
  if (!initialize().isOk()) std::abort();
  randombytes_buf(out.data(), out.size());
}

Key randomKey() {
  Key k;
  randomBytes(k);
  return k;
}

std::string formatKey(const Key& key) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string s;
  s.reserve(2 * kKeyBytes + 1);
  for (std::uint8_t b : key) {
    s += kDigits[b >> 4];
    s += kDigits[b & 15];
  }
  return s + "\n";
}

Result<Key> parseKey(std::string_view text) {
  const auto first = text.find_first_not_of(" \t\r\n");
  const auto last = text.find_last_not_of(" \t\r\n");
  const std::string_view hex =
      first == std::string_view::npos ? std::string_view{} : text.substr(first, last - first + 1);
  if (hex.size() != 2 * kKeyBytes) {
    return invalidArgument("expected " + std::to_string(2 * kKeyBytes) +
                           " hex digits (grapevine keygen), found " + std::to_string(hex.size()) +
                           " characters");
  }
  Key k;
  for (std::size_t i = 0; i < kKeyBytes; ++i) {
    const int hi = hexValue(hex[2 * i]);
    const int lo = hexValue(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) {
      return invalidArgument("character " + std::to_string(2 * i + (hi < 0 ? 1 : 2)) +
                             " is not a hex digit");
    }
    k[i] = static_cast<std::uint8_t>(hi << 4 | lo);
  }
  if (std::all_of(k.begin(), k.end(), [](std::uint8_t b) { return b == 0; })) {
    return invalidArgument("the key is all zeros (a placeholder, not a secret): grapevine keygen");
  }
  return k;
}

Result<Key> readKeyFile(const std::string& path) {
  const std::string who = "key file \"" + path + "\"";
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT)
      return notFound(who + " does not exist (create one: grapevine keygen -o " + path + ")");
    return unavailable(who + ": " + std::strerror(errno));
  }
  if (!S_ISREG(st.st_mode)) return failedPrecondition(who + " is not a regular file");
  if ((st.st_mode & 077) != 0) {
    return failedPrecondition(who + " is accessible by group or others (mode " + octal(st.st_mode) +
                              "): run chmod 600 " + path);
  }
  if (static_cast<std::size_t>(st.st_size) > kMaxKeyFileBytes) {
    return invalidArgument(who + " is malformed: " + std::to_string(st.st_size) +
                           " bytes, a key is one line of 64 hex digits");
  }
  // The bounded reader checks the file again as it opens it (it may have been swapped since).
  auto text = readRegularTextFile(path, kMaxKeyFileBytes);
  if (!text.isOk()) return unavailable(who + ": " + text.status().message());
  auto key = parseKey(*text);
  sodium_memzero(text->data(), text->size());
  if (!key.isOk()) return invalidArgument(who + " is malformed: " + key.status().message());
  return key;
}

Status writeKeyFile(const std::string& path, const Key& key, bool replace) {
  const std::string who = "key file \"" + path + "\"";
  const auto exists = [&] {
    return failedPrecondition(who + " exists (it may be the key a deployment uses): --force " +
                              "replaces it");
  };
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0) {
    // Never through a link (it would write where the link points) nor into a device (keygen once
    // set a device node's mode to 0600), and an existing key only when asked: it may be the one
    // every peer of a running deployment holds.
    if (S_ISLNK(st.st_mode)) return failedPrecondition(who + " is a symbolic link; not followed");
    if (!S_ISREG(st.st_mode)) return failedPrecondition(who + " exists and is not a regular file");
    if (!replace) return exists();
  } else if (errno != ENOENT) {
    return unavailable(who + ": " + std::strerror(errno));
  }
  // A new file of mode 0600 beside the target, then renamed over it (replace) or linked to its
  // name (which fails when the name appeared meanwhile): a reader never sees half a key, and a
  // crash leaves the old key or the new one.
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return unavailable("cannot write " + who + ": " + tmp + ": " + std::strerror(errno));
  const auto fail = [&](const std::string& what, int err) {
    ::unlink(tmp.c_str());
    return unavailable("cannot " + what + " " + who + ": " + std::strerror(err));
  };
  std::string text = formatKey(key);
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t w = ::write(fd, text.data() + done, text.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      const int err = w < 0 ? errno : EIO;
      ::close(fd);
      sodium_memzero(text.data(), text.size());
      return fail("write", err);
    }
    done += static_cast<std::size_t>(w);
  }
  sodium_memzero(text.data(), text.size());
  // fchmod: a umask never loosens 0600, but one could have made it stricter.
  if (::fchmod(fd, 0600) != 0 || ::fsync(fd) != 0) {
    const int err = errno;
    ::close(fd);
    return fail("write", err);
  }
  if (::close(fd) != 0) return fail("write", errno);
  if (replace) {
    if (::rename(tmp.c_str(), path.c_str()) != 0) return fail("rename onto", errno);
  } else {
    if (::link(tmp.c_str(), path.c_str()) != 0) {
      const int err = errno;
      if (err == EEXIST) {
        ::unlink(tmp.c_str());
        return exists();
      }
      return fail("create", err);
    }
    ::unlink(tmp.c_str());
  }
  return Status::ok();
}

}  // namespace grapevine::security
