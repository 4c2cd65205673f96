// Problems found in a config, reported compiler-style, all of them rather than just the first:
//   configs/x.yaml:12:5: error: topology.dims: expected a list of positive integers, found "4x4"
#pragma once

#include <string>
#include <vector>

namespace grapevine::config {

struct Diagnostic {
  std::string file;     // the YAML file, "environment" or "command line"
  int line = 0;         // 1-based; 0 when unknown
  int column = 0;       // 1-based; 0 when unknown
  std::string keyPath;  // "topology.dims"; empty for file-level problems
  std::string message;  // "expected a list of positive integers, found \"4x4\""
  bool warning = false;

  std::string toString() const;
};

std::string formatDiagnostics(const std::vector<Diagnostic>& diagnostics);

}  // namespace grapevine::config
