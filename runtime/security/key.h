// The pre-shared key (security.key_file): 32 random bytes, stored as one line of 64 lowercase hex
// digits. A key file must be a regular file that only its owner can read or write (mode 0600 or
// stricter); anything else is refused with the reason. `grapevine keygen` writes one.
// docs/security.md.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "runtime/common/status.h"

namespace grapevine::security {

inline constexpr std::size_t kKeyBytes = 32;
using Key = std::array<std::uint8_t, kKeyBytes>;

// Initializes libsodium once (thread-safe, idempotent). Errors: kInternal when it cannot start (no
// entropy source). Every function below calls it.
Status initialize();

// Fills `out` from libsodium's CSPRNG (randombytes_buf). Aborts when libsodium cannot start.
void randomBytes(std::span<std::uint8_t> out);
Key randomKey();

// "<64 hex digits>\n".
std::string formatKey(const Key& key);
// 64 hex digits, optionally surrounded by whitespace (a trailing newline). Errors: kInvalidArgument
// saying what is wrong (length, a non-hex character, an all-zero key).
Result<Key> parseKey(std::string_view text);

// Reads and checks a key file. Errors name the file and why: kNotFound (missing),
// kFailedPrecondition (not a regular file; readable or writable by group or others, with its mode),
// kInvalidArgument (malformed), kUnavailable (cannot be read).
Result<Key> readKeyFile(const std::string& path);
// Writes `key` to `path` with mode 0600, atomically (a temporary file beside it, then renamed or
// linked into place). Refuses (kFailedPrecondition, naming the file) a symbolic link, anything that
// is not a regular file, and an existing file unless `replace`.
Status writeKeyFile(const std::string& path, const Key& key, bool replace = false);

}  // namespace grapevine::security
