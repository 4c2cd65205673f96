// What one load of a config reports, and where each key was set: the loader (syntax, types,
// ranges) and the checks that span keys (checks.h) both write here. Internal to runtime/config/.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "runtime/config/diagnostics.h"

namespace grapevine::config {

// Where a value came from: the config file (line and column, 1-based; 0 when unknown),
// "environment GRAPEVINE_..." or "command line --set ...".
struct Where {
  std::string file;
  int line = 0;
  int column = 0;
};

class Report {
 public:
  // `file`: the config's name as diagnostics show it (its path, for a file).
  explicit Report(std::string file) : file_(std::move(file)) {}

  const std::string& file() const { return file_; }
  Where fileWhere(int line = 0, int column = 0) const { return {file_, line, column}; }

  void error(const Where& w, std::string key, std::string message);
  void warning(const Where& w, std::string key, std::string message);
  int errors() const;

  // `path` was set (by the file, the environment or --set) at `where`; a later setting wins.
  void markSet(const std::string& path, const Where& where) { seen_[path] = where; }
  bool wasSet(const std::string& path) const { return seen_.count(path) != 0; }
  // Where `path` was last set; the file itself when it was not set.
  Where keyWhere(const std::string& path) const;

  // A path the config gives (workload.data): relative paths are relative to the config file's
  // folder.
  std::string pathInConfig(const std::string& path) const;

  // The diagnostics, in the order they were reported, then one line per key that had more than
  // kMaxPerKey of them (how many were not shown); leaves none behind.
  std::vector<Diagnostic> take();

  // At most this many diagnostics are kept per key: a config of 3,000 fault events made validate
  // print 800 MB.
  static constexpr int kMaxPerKey = 20;

 private:
  void add(const Where& w, std::string key, std::string message, bool warning);

  std::string file_;
  std::vector<Diagnostic> diagnostics_;
  struct Hidden {
    Where where;
    int errors = 0, warnings = 0;
  };
  std::map<std::string, int> perKey_;     // diagnostics kept per key
  std::map<std::string, Hidden> hidden_;  // per key: the ones beyond kMaxPerKey
  std::map<std::string, Where> seen_;
};

}  // namespace grapevine::config
