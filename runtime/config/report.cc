#include "runtime/config/report.h"

#include <algorithm>

namespace grapevine::config {

void Report::error(const Where& w, std::string key, std::string message) {
  add(w, std::move(key), std::move(message), false);
}

void Report::warning(const Where& w, std::string key, std::string message) {
  add(w, std::move(key), std::move(message), true);
}

void Report::add(const Where& w, std::string key, std::string message, bool warning) {
  if (++perKey_[key] > kMaxPerKey) {
    Hidden& h = hidden_[key];
    if (h.errors + h.warnings == 0) h.where = w;
    ++(warning ? h.warnings : h.errors);
    return;
  }
  diagnostics_.push_back({w.file, w.line, w.column, std::move(key), std::move(message), warning});
}

int Report::errors() const {
  int n = static_cast<int>(std::count_if(diagnostics_.begin(), diagnostics_.end(),
                                         [](const Diagnostic& d) { return !d.warning; }));
  for (const auto& [key, h] : hidden_) n += h.errors;
  return n;
}

std::vector<Diagnostic> Report::take() {
  for (const auto& [key, h] : hidden_) {
    const int n = h.errors + h.warnings;
    diagnostics_.push_back({h.where.file, h.where.line, h.where.column, key,
                            "... and " + std::to_string(n) + " more of this key not shown (" +
                                std::to_string(h.errors) + " errors, " +
                                std::to_string(h.warnings) + " warnings)",
                            h.errors == 0});
  }
  hidden_.clear();
  perKey_.clear();
  return std::move(diagnostics_);
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
