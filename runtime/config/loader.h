// Loading a config: YAML file -> typed Config, with every problem collected as a Diagnostic.
// Never throws, never crashes on bad input: files are size-capped, nesting depth and node counts
// are bounded before the YAML parser sees them, and binary data is refused up front.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/config/config.h"
#include "runtime/config/diagnostics.h"

namespace grapevine::config {

struct LoadOptions {
  // `key=value` overrides from the command line (`--set`), applied after the environment.
  std::vector<std::string> overrides;
  // Reads GRAPEVINE_<KEY> variables (see envName()); injectable for tests.
  std::function<const char*(const char*)> getenv;  // null: the process environment
  bool useEnvironment = true;
  std::size_t maxFileBytes = std::size_t{16} << 20;
  int maxDepth = 32;
  // Also build the topology and check it (connected, weights valid). Needs the topology library.
  bool checkTopology = true;
};

struct LoadResult {
  Config config;
  std::vector<Diagnostic> diagnostics;  // errors and warnings, in file order then later sources
  bool ok() const;                      // no errors (warnings allowed)
};

LoadResult loadFile(const std::string& path, const LoadOptions& options = {});
LoadResult loadString(std::string_view text, const std::string& displayName,
                      const LoadOptions& options = {});

// The closest schema key to `path` within edit distance 3, or "" ("did you mean ...").
std::string suggestKey(std::string_view path);

// The effective config as YAML (every key, defaults included), for `grapevine config --print`.
std::string toYaml(const Config& config);

}  // namespace grapevine::config
