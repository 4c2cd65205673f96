#include "runtime/config/report.h"

#include <algorithm>

namespace grapevine::config {

void Report::error(const Where& w, std::string key, std::string message) {
  diagnostics_.push_back({w.file, w.line, w.column, std::move(key), std::move(message), false});
}

void Report::warning(const Where& w, std::string key, std::string message) {
  diagnostics_.push_back({w.file, w.line, w.column, std::move(key), std::move(message), true});
}

int Report::errors() const {
  return static_cast<int>(std::count_if(diagnostics_.begin(), diagnostics_.end(),
                                        [](const Diagnostic& d) { return !d.warning; }));
}

Where Report::keyWhere(const std::string& path) const {
  auto it = seen_.find(path);
  if (it != seen_.end()) return it->second;
  return fileWhere();
}

std::string Report::pathInConfig(const std::string& path) const {
  if (path.empty() || path[0] == '/') return path;
  const auto slash = file_.rfind('/');
  return slash == std::string::npos ? path : file_.substr(0, slash + 1) + path;
}

}  // namespace grapevine::config
