#include "runtime/config/loader.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "runtime/config/checks.h"
#include "runtime/config/report.h"
#include "runtime/config/schema.h"

namespace grapevine::config {
namespace {

// Reads one config: the text (refused up front if the YAML parser should never see it), then the
// environment and the --set overrides, each value through its schema row; then, when every value
// was well-formed, resolve() and the cross-key checks (checks.h).
class Loader {
 public:
  Loader(const LoadOptions& options, std::string displayName)
      : options_(options), file_(displayName), report_(std::move(displayName)) {}

  LoadResult run(std::string_view text) {
    result_.config.sourcePath = file_;
    if (prescan(text)) {
      parseYaml(text);
    }
    if (options_.useEnvironment) applyEnvironment();
    applyOverrides();
    if (report_.errors() == 0) {
      resolve(result_.config, report_);
      check(result_.config, report_, options_.checkTopology);
    }
    result_.diagnostics = report_.take();
    return std::move(result_);
  }

 private:
  void error(const Where& w, std::string key, std::string message) {
    report_.error(w, std::move(key), std::move(message));
  }
  Where fileWhere(int line = 0, int column = 0) const { return report_.fileWhere(line, column); }
  Where nodeWhere(const YAML::Node& n) const {
    const YAML::Mark m = n.Mark();
    if (m.line < 0) return fileWhere();
    return {file_, m.line + 1, m.column + 1};
  }

  // Refuses input the YAML parser should never see: binary data, tabs as indentation, absurd
  // nesting.
  bool prescan(std::string_view text) {
    if (text.size() > options_.maxFileBytes) {
      error(fileWhere(), "",
            "file is " + std::to_string(text.size()) + " bytes; the limit is " +
                std::to_string(options_.maxFileBytes));
      return false;
    }
    int line = 1;
    int col = 1;
    bool atLineStart = true;
    int flowDepth = 0;
    bool inSingle = false;
    bool inDouble = false;
    bool inComment = false;
    for (size_t i = 0; i < text.size(); ++i) {
      const unsigned char c = static_cast<unsigned char>(text[i]);
      if (c == 0 || (c < 0x20 && c != '\n' && c != '\r' && c != '\t')) {
        error(fileWhere(line, col), "",
              "not a text file: control byte 0x" + hex(c) + "; a config is YAML text");
        return false;
      }
      if (c == '\n') {
        ++line;
        col = 1;
        atLineStart = true;
        inComment = false;
        inSingle = inDouble = false;  // plain YAML scalars do not span lines in configs
        continue;
      }
      if (atLineStart && c == '\t') {
        error(fileWhere(line, col), "",
              "tab character in indentation; YAML indents with spaces only");
        return false;
      }
      if (c != ' ') atLineStart = false;
      if (atLineStart && col > 4 * options_.maxDepth) {
        error(fileWhere(line, col), "",
              "indentation nested deeper than " + std::to_string(options_.maxDepth) + " levels");
        return false;
      }
      if (!inComment && !inSingle && !inDouble) {
        if (c == '#' && (i == 0 || text[i - 1] == ' ' || text[i - 1] == '\n'))
          inComment = true;
        else if (c == '\'')
          inSingle = true;
        else if (c == '"')
          inDouble = true;
        else if (c == '[' || c == '{') {
          if (++flowDepth > options_.maxDepth) {
            error(fileWhere(line, col), "",
                  "brackets nested deeper than " + std::to_string(options_.maxDepth) + " levels");
            return false;
          }
        } else if ((c == ']' || c == '}') && flowDepth > 0) {
          --flowDepth;
        }
      } else if (inSingle && c == '\'') {
        inSingle = false;
      } else if (inDouble && c == '"' && text[i - 1] != '\\') {
        inDouble = false;
      }
      ++col;
    }
    if (!validUtf8(text)) {
      error(fileWhere(), "", "not a text file: invalid UTF-8; a config is YAML text");
      return false;
    }
    return true;
  }

  static std::string hex(unsigned char c) {
    static const char* d = "0123456789abcdef";
    return {d[c >> 4], d[c & 15]};
  }

  static bool validUtf8(std::string_view s) {
    size_t i = 0;
    while (i < s.size()) {
      const unsigned char c = static_cast<unsigned char>(s[i]);
      int n = c < 0x80 ? 0 : (c >> 5) == 6 ? 1 : (c >> 4) == 14 ? 2 : (c >> 3) == 30 ? 3 : -1;
      if (n < 0 || i + n >= s.size() + (n == 0 ? 1 : 0)) {
        if (n != 0) return false;
      }
      for (int k = 1; k <= n; ++k) {
        if (i + k >= s.size() || (static_cast<unsigned char>(s[i + k]) >> 6) != 2) return false;
      }
      i += n + 1;
    }
    return true;
  }

  void parseYaml(std::string_view text) {
    YAML::Node root;
    try {
      root = YAML::Load(std::string(text));
    } catch (const YAML::Exception& e) {
      std::string msg = e.msg;
      error(fileWhere(e.mark.line >= 0 ? e.mark.line + 1 : 0,
                      e.mark.column >= 0 ? e.mark.column + 1 : 0),
            "", "YAML syntax: " + msg);
      return;
    }
    if (!root || root.IsNull()) {
      error(fileWhere(), "",
            "the file is empty; expected a mapping of sections (run, peers, topology, ...)");
      return;
    }
    if (!root.IsMap()) {
      error(nodeWhere(root), "",
            "expected a mapping of sections (run, peers, topology, ...), found " +
                describeNode(root));
      return;
    }
    walkMap(root, "");
  }

  static bool isSectionPrefix(const std::string& prefix) {
    const std::string p = prefix + ".";
    for (const auto& k : schema()) {
      if (k.path.compare(0, p.size(), p) == 0) return true;
    }
    return false;
  }

  void walkMap(const YAML::Node& map, const std::string& prefix) {
    std::map<std::string, int> firstLine;
    for (auto it = map.begin(); it != map.end(); ++it) {
      if (++visited_ > kMaxNodes) {
        error(nodeWhere(it->first), "",
              "too many entries (more than " + std::to_string(kMaxNodes) + ")");
        return;
      }
      const YAML::Node keyNode = it->first;  // copies: *it is a temporary proxy
      const YAML::Node value = it->second;
      if (!keyNode.IsScalar()) {
        error(nodeWhere(keyNode), prefix,
              "keys must be plain names, found " + describeNode(keyNode));
        continue;
      }
      const std::string key = keyNode.Scalar();
      const std::string path = prefix.empty() ? key : prefix + "." + key;
      const Where where = nodeWhere(keyNode);
      auto [pos, inserted] = firstLine.emplace(key, where.line);
      if (!inserted) {
        error(where, path, "duplicate key (first set at line " + std::to_string(pos->second) + ")");
        continue;
      }
      // `peers` may be a list of addresses instead of a mapping.
      if (path == "peers" && value.IsSequence()) {
        applyNode("peers.list", value, where);
        continue;
      }
      // `faults` is the list of events itself (faults.events).
      if (path == "faults" && value.IsSequence()) {
        applyNode("faults.events", value, where);
        continue;
      }
      if (const KeyDef* def = findKey(path)) {
        applyNode(path, value, where);
        (void)def;
        continue;
      }
      if (isSectionPrefix(path)) {
        if (value.IsMap()) {
          walkMap(value, path);
        } else if (!value.IsNull()) {
          error(nodeWhere(value), path, "expected a mapping of keys, found " + describeNode(value));
        }
        continue;
      }
      std::string msg = prefix.empty() ? "unknown section" : "unknown key";
      const std::string suggestion = suggestKey(path);
      if (!suggestion.empty())
        msg += "; did you mean '" + suggestion + "'?";
      else if (prefix.empty()) {
        msg += "; sections are";
        for (const auto& s : sections()) msg += " " + s;
      }
      error(where, path, msg);
    }
  }

  // A key's converter never lets a yaml-cpp exception escape: it becomes "expected ...".
  std::optional<std::string> safeApply(const KeyDef& def, const YAML::Node& node) {
    try {
      return def.apply(result_.config, node);
    } catch (const YAML::Exception&) {
      return std::string("expected");
    }
  }

  void applyNode(const std::string& path, const YAML::Node& value, const Where& where) {
    const KeyDef* def = findKey(path);
    if (auto problem = safeApply(*def, value)) {
      // A converter may say what exactly is wrong (which item of a list, and why).
      const std::string why = *problem == "expected" ? "" : " (" + *problem + ")";
      error(value.Mark().line >= 0 ? nodeWhere(value) : where, path,
            "expected " + def->expected() + why + ", found " + describeNode(value));
      return;
    }
    report_.markSet(path, where);
  }

  void applyText(const std::string& path, const std::string& text, const Where& where) {
    YAML::Node node;
    try {
      node = YAML::Load(text);
    } catch (const YAML::Exception&) {
      node = YAML::Node(text);
    }
    const KeyDef* def = findKey(path);
    if (auto problem = safeApply(*def, node)) {
      const std::string why = *problem == "expected" ? "" : " (" + *problem + ")";
      error(where, path, "expected " + def->expected() + why + ", found \"" + text + "\"");
      return;
    }
    report_.markSet(path, where);
  }

  void applyEnvironment() {
    for (const auto& def : schema()) {
      const std::string name = envName(def.path);
      const char* v = options_.getenv ? options_.getenv(name.c_str()) : std::getenv(name.c_str());
      if (v == nullptr) continue;
      applyText(def.path, v, Where{"environment " + name, 0, 0});
    }
  }

  void applyOverrides() {
    for (const auto& o : options_.overrides) {
      const auto eq = o.find('=');
      const Where where{"command line --set " + o, 0, 0};
      if (eq == std::string::npos || eq == 0) {
        error(where, "", "expected KEY=VALUE, e.g. --set topology.kind=torus");
        continue;
      }
      std::string path = o.substr(0, eq);
      if (!findKey(path)) {
        std::string msg = "unknown key";
        const std::string s = suggestKey(path);
        if (!s.empty()) msg += "; did you mean '" + s + "'?";
        error(where, path, msg);
        continue;
      }
      applyText(path, o.substr(eq + 1), where);
    }
  }

  static constexpr int kMaxNodes = 1 << 20;
  const LoadOptions& options_;
  std::string file_;
  Report report_;
  LoadResult result_;  // its diagnostics are report_'s until run() returns
  int visited_ = 0;
};

int editDistance(std::string_view a, std::string_view b) {
  std::vector<int> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = static_cast<int>(j);
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = static_cast<int>(i);
    for (size_t j = 1; j <= b.size(); ++j) {
      cur[j] =
          std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] != b[j - 1] ? 1 : 0)});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

}  // namespace

bool LoadResult::ok() const {
  return std::none_of(diagnostics.begin(), diagnostics.end(),
                      [](const Diagnostic& d) { return !d.warning; });
}

std::string suggestKey(std::string_view path) {
  std::string best;
  int bestDistance = 4;
  std::set<std::string> candidates;
  for (const auto& k : schema()) {
    candidates.insert(k.path);
    candidates.insert(k.path.substr(0, k.path.find('.')));
  }
  for (const auto& cand : candidates) {
    const int d = editDistance(path, cand);
    if (d < bestDistance) {
      bestDistance = d;
      best = cand;
    }
  }
  // "topology.kidn" -> compare the last component within the same section too.
  return best;
}

LoadResult loadString(std::string_view text, const std::string& displayName,
                      const LoadOptions& options) {
  Loader loader(options, displayName);
  return loader.run(text);
}

LoadResult loadFile(const std::string& path, const LoadOptions& options) {
  const auto refuse = [&](const std::string& why) {
    LoadResult r;
    r.diagnostics.push_back({path, 0, 0, "", why, false});
    return r;
  };
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return refuse("is a directory, not a config file");
  std::ifstream in(path, std::ios::binary);
  if (!in) return refuse("cannot open the file");
  // Read as a stream, at most one byte past the limit: a pipe (`<(...)`) has no size to ask for,
  // and a device such as /dev/zero never ends.
  std::string text;
  char buf[65536];
  while (text.size() <= options.maxFileBytes &&
         in.read(buf, static_cast<std::streamsize>(sizeof buf)).gcount() > 0) {
    text.append(buf, static_cast<std::size_t>(in.gcount()));
  }
  if (text.size() > options.maxFileBytes) {
    return refuse("file is more than " + std::to_string(options.maxFileBytes) +
                  " bytes; the limit is " + std::to_string(options.maxFileBytes));
  }
  return loadString(text, path, options);
}

std::string toYaml(const Config& config) {
  std::ostringstream os;
  std::string section;
  for (const auto& k : schema()) {
    const auto dot = k.path.find('.');
    const std::string s = k.path.substr(0, dot);
    if (s != section) {
      os << s << ":\n";
      section = s;
    }
    if (k.path == "peers.list" && config.peers.list.empty()) continue;
    if (k.path == "topology.edges" && config.topology.edges.empty()) continue;
    if (k.path == "topology.seed" && !config.topology.seed) continue;
    os << "  " << k.path.substr(dot + 1) << ": " << k.show(config) << "\n";
  }
  return os.str();
}

}  // namespace grapevine::config
