#include "runtime/config/diagnostics.h"

namespace grapevine::config {

std::string Diagnostic::toString() const {
  std::string s = file;
  if (line > 0) {
    s += ":" + std::to_string(line);
    if (column > 0) s += ":" + std::to_string(column);
  }
  s += warning ? ": warning: " : ": error: ";
  if (!keyPath.empty()) s += keyPath + ": ";
  return s + message;
}

std::string formatDiagnostics(const std::vector<Diagnostic>& diagnostics) {
  std::string out;
  for (const auto& d : diagnostics) out += d.toString() + "\n";
  return out;
}

}  // namespace grapevine::config
