// Shared by every subcommand that takes a CONFIG: load it (defaults < YAML < environment < --set),
// print every diagnostic compiler-style on stderr, and say whether it is usable.
#pragma once

#include <iostream>
#include <string>
#include <vector>

#include "runtime/config/loader.h"

namespace grapevine::cli {

// Returns true when the config has no errors; warnings and errors are printed to `err`.
inline bool loadConfig(const std::string& path, const std::vector<std::string>& overrides,
                       config::Config* out, std::ostream& err = std::cerr) {
  config::LoadOptions options;
  options.overrides = overrides;
  config::LoadResult r = config::loadFile(path, options);
  err << config::formatDiagnostics(r.diagnostics);
  if (!r.ok()) return false;
  *out = std::move(r.config);
  return true;
}

}  // namespace grapevine::cli
