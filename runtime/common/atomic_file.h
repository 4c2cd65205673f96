// Crash-consistent file output: a reader (or a run resumed after a crash) sees either the old
// file or the complete new one, never a torn one.
//
// Contract of writeFileAtomically(path, parts): the parts are written in order to a temporary file
// next to `path` (same directory, so the rename cannot cross file systems), flushed to disk
// (fsync), renamed over `path`, and the directory entry is flushed too. On any error the temporary
// file is removed, `path` is left as it was, and the Status (kUnavailable) names the file and the
// system error. A `path` that exists and is not a regular file (a device, a pipe) is written in
// place instead (renaming would replace the device node).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>

#include "runtime/common/status.h"

namespace grapevine {

Status writeFileAtomically(const std::string& path,
                           std::span<const std::span<const std::uint8_t>> parts);
Status writeFileAtomically(const std::string& path,
                           std::initializer_list<std::span<const std::uint8_t>> parts);
Status writeFileAtomically(const std::string& path, std::string_view text);

}  // namespace grapevine
