// Bounded input: every file Grapevine reads (checkpoints, model files, rank files, configs, keys)
// may be hostile or an accident (a directory or a 64 GB sparse file named like a checkpoint, a
// rank file linked to /dev/zero, a FIFO). readRegularFile() opens without blocking (a FIFO never
// hangs the reader), refuses anything that is not a regular file and anything larger than the
// caller's limit before a byte is allocated.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/common/status.h"

namespace grapevine {

// The whole of `path`, a regular file of at most `maxBytes`. Errors, each naming the path:
// kNotFound (missing), kInvalidArgument (a directory, device, FIFO or socket; larger than
// maxBytes), kUnavailable (another system error, with its text).
Result<std::vector<std::uint8_t>> readRegularFile(const std::string& path, std::uint64_t maxBytes);
// The same as text.
Result<std::string> readRegularTextFile(const std::string& path, std::uint64_t maxBytes);

// `text` with every byte that is not printable ASCII written as \xNN and cut at `maxChars` (then
// "..." follows): how a file's or a peer's bytes are quoted in a log line or an error.
std::string printable(std::string_view text, std::size_t maxChars = 80);

}  // namespace grapevine
