#include "runtime/sweep/sweep.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "runtime/common/hash.h"
#include "runtime/config/loader.h"
#include "runtime/config/schema.h"

namespace grapevine::sweep {
namespace {

namespace fs = std::filesystem;

constexpr int kMaxCells = 100000;

struct Parser {
  std::string path;
  std::vector<config::Diagnostic>* out;
  bool failed = false;

  void error(const YAML::Node& at, const std::string& key, const std::string& message) {
    config::Diagnostic d;
    d.file = path;
    if (at && at.Mark().line >= 0) {
      d.line = at.Mark().line + 1;
      d.column = at.Mark().column + 1;
    }
    d.keyPath = key;
    d.message = message;
    if (out) out->push_back(d);
    failed = true;
  }
};

std::string describe(const YAML::Node& n) {
  if (!n || n.IsNull()) return "nothing";
  if (n.IsSequence()) return "a list";
  if (n.IsMap()) return "a mapping";
  return "\"" + n.Scalar() + "\"";
}

// YAML text of a value, as `--set key=value` takes it (flow style for lists and mappings).
std::string valueText(const YAML::Node& n) {
  if (n.IsScalar()) return n.Scalar();
  YAML::Emitter e;
  e << YAML::Flow << n;
  return e.c_str();
}

bool isKnownKey(const std::string& key) { return config::findKey(key) != nullptr; }

std::string unknownKeyMessage(const std::string& key) {
  std::string m = "not a config key";
  const std::string s = config::suggestKey(key);
  if (!s.empty()) m += " (did you mean " + s + "?)";
  return m;
}

std::optional<double> toDouble(const YAML::Node& n) {
  if (!n.IsScalar()) return std::nullopt;
  try {
    std::size_t used = 0;
    const double v = std::stod(n.Scalar(), &used);
    if (used != n.Scalar().size() || !std::isfinite(v)) return std::nullopt;
    return v;
  } catch (...) {
    return std::nullopt;
  }
}

// One entry of `sweep:`: the key and its values, each a plain value or a mapping of keys below the
// key (or full dotted paths) with an optional label. Nothing when the values are not a list.
std::optional<Axis> parseAxis(Parser& p, const YAML::const_iterator& a) {
  Axis axis;
  axis.key = a->first.Scalar();
  const YAML::Node values = a->second;
  const std::string where = "sweep." + axis.key;
  if (!values.IsSequence() || values.size() == 0) {
    p.error(values, where, "expected a non-empty list of values, found " + describe(values));
    return std::nullopt;
  }
  for (const auto& v : values) {
    AxisValue av;
    if (v.IsMap()) {
      // Keys below the axis key: {label: top-1%, method: top-k, ratio: 0.01}.
      for (auto m = v.begin(); m != v.end(); ++m) {
        const std::string sub = m->first.Scalar();
        const YAML::Node subValue = m->second;
        if (sub == "label") {
          av.label = subValue.Scalar();
          continue;
        }
        // A dotted key is a full path (a value may set keys elsewhere, e.g.
        // algorithm.consensus_step next to a compression method); else it is below the axis key.
        const std::string full = sub.find('.') != std::string::npos ? sub : axis.key + "." + sub;
        if (!isKnownKey(full))
          p.error(m->first, where, full + ": " + unknownKeyMessage(full));
        else
          av.sets.emplace_back(full, valueText(subValue));
      }
      if (av.label.empty()) {
        for (const auto& [k, t] : av.sets) av.label += (av.label.empty() ? "" : " ") + t;
      }
    } else {
      if (!isKnownKey(axis.key)) {
        p.error(a->first, where, unknownKeyMessage(axis.key));
        break;
      }
      av.label = valueText(v);
      av.sets.emplace_back(axis.key, valueText(v));
    }
    axis.values.push_back(std::move(av));
  }
  std::map<std::string, int> seen;
  for (const auto& av : axis.values) {
    if (++seen[av.label] == 2)
      p.error(values, where, "two values are both labelled \"" + av.label + "\"");
  }
  return axis;
}

}  // namespace

Result<SweepSpec> loadSweep(const std::string& path, std::vector<config::Diagnostic>* diagnostics) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return notFound("cannot read sweep file " + path);
  std::ostringstream ss;
  ss << in.rdbuf();
  if (ss.str().size() > (std::size_t{1} << 20))
    return invalidArgument(path + ": larger than 1 MiB");
  return parseSweep(ss.str(), path, diagnostics);
}

Result<SweepSpec> parseSweep(const std::string& text, const std::string& path,
                             std::vector<config::Diagnostic>* diagnostics) {
  Parser p{path, diagnostics};
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    config::Diagnostic d;
    d.file = path;
    d.line = e.mark.line + 1;
    d.column = e.mark.column + 1;
    d.message = "not valid YAML: " + e.msg;
    if (diagnostics) diagnostics->push_back(d);
    return invalidArgument(d.toString());
  }
  if (!root.IsMap()) {
    p.error(root, "",
            "expected a mapping with base (or config) and sweep, found " + describe(root));
    return invalidArgument(path + ": not a sweep file");
  }
  SweepSpec spec;
  spec.path = path;
  spec.name = fs::path(path).stem().string();
  for (auto it = root.begin(); it != root.end(); ++it) {
    const std::string key = it->first.Scalar();
    const YAML::Node value = it->second;
    if (key == "name") {
      if (!value.IsScalar())
        p.error(value, "name", "expected a string, found " + describe(value));
      else
        spec.name = value.Scalar();
    } else if (key == "base") {
      if (!value.IsScalar()) {
        p.error(value, "base", "expected a config file path, found " + describe(value));
      } else {
        fs::path b(value.Scalar());
        if (b.is_relative()) b = fs::path(path).parent_path() / b;
        spec.baseConfig = b.lexically_normal().string();
        if (!fs::exists(spec.baseConfig))
          p.error(value, "base", "no such file: " + spec.baseConfig);
      }
    } else if (key == "config") {
      if (!value.IsMap())
        p.error(value, "config", "expected a config mapping, found " + describe(value));
      else
        spec.inlineConfig = YAML::Dump(value) + "\n";
    } else if (key == "set") {
      if (!value.IsMap()) {
        p.error(value, "set", "expected a mapping of key: value, found " + describe(value));
        continue;
      }
      for (auto s = value.begin(); s != value.end(); ++s) {
        const std::string k = s->first.Scalar();
        const YAML::Node v = s->second;
        if (!isKnownKey(k))
          p.error(s->first, "set." + k, unknownKeyMessage(k));
        else
          spec.fixed.push_back(k + "=" + valueText(v));
      }
    } else if (key == "sweep") {
      if (!value.IsMap() || value.size() == 0) {
        p.error(value, "sweep", "expected a mapping of key: [values...], found " + describe(value));
        continue;
      }
      for (auto a = value.begin(); a != value.end(); ++a) {
        if (auto axis = parseAxis(p, a)) spec.axes.push_back(std::move(*axis));
      }
    } else if (key == "target_accuracy") {
      auto v = toDouble(value);
      if (!v || *v <= 0 || *v > 1) {
        p.error(value, "target_accuracy", "expected a number in (0, 1], found " + describe(value));
      } else {
        spec.targetAccuracy = *v;
      }
    } else if (key == "mode") {
      if (!value.IsScalar() || (value.Scalar() != "sim" && value.Scalar() != "launch")) {
        p.error(value, "mode", "expected sim or launch, found " + describe(value));
      } else {
        spec.mode = value.Scalar();
      }
    } else {
      p.error(it->first, key,
              "unknown key (expected name, base, config, set, sweep, target_accuracy, mode)");
    }
  }
  if (spec.baseConfig.empty() && spec.inlineConfig.empty() && !p.failed) {
    p.error(root, "base", "required: base (a config file) or config (inline)");
  }
  if (!spec.baseConfig.empty() && !spec.inlineConfig.empty()) {
    p.error(root["config"], "config", "give base or config, not both");
  }
  if (spec.axes.empty() && !p.failed) p.error(root, "sweep", "required: at least one key to sweep");
  double cells = 1;
  for (const auto& a : spec.axes) cells *= static_cast<double>(a.values.size());
  if (cells > kMaxCells) {
    p.error(root["sweep"], "sweep",
            "expands to " + std::to_string(static_cast<long long>(cells)) + " cells, more than " +
                std::to_string(kMaxCells));
  }
  if (p.failed) return invalidArgument(path + ": invalid sweep file");
  return spec;
}

std::vector<Cell> expand(const SweepSpec& spec, const std::string& baseText) {
  std::vector<Cell> cells;
  std::vector<std::size_t> pos(spec.axes.size(), 0);
  const std::string common = baseText + "\n" + spec.inlineConfig;
  for (int index = 0;; ++index) {
    Cell c;
    c.index = index;
    c.overrides = spec.fixed;
    for (std::size_t a = 0; a < spec.axes.size(); ++a) {
      const AxisValue& v = spec.axes[a].values[pos[a]];
      c.labels.push_back(v.label);
      for (const auto& [k, t] : v.sets) c.overrides.push_back(k + "=" + t);
    }
    std::string defining = common + "\n" + spec.mode;
    for (const auto& o : c.overrides) defining += "\n" + o;
    char id[32];
    std::snprintf(id, sizeof id, "%03d-%08x", index,
                  static_cast<unsigned>(fnv1a64(defining.data(), defining.size()) & 0xffffffffu));
    c.id = id;
    cells.push_back(std::move(c));
    // Odometer: the last axis varies fastest.
    std::size_t a = spec.axes.size();
    while (a > 0) {
      --a;
      if (++pos[a] < spec.axes[a].values.size()) break;
      pos[a] = 0;
      if (a == 0) return cells;
    }
    if (spec.axes.empty()) return cells;
  }
}

Result<std::vector<EvalPoint>> readEvalPoints(const std::string& cellDir) {
  auto num = [](const nlohmann::json& j, const char* k) -> std::optional<double> {
    if (!j.contains(k) || !j[k].is_number()) return std::nullopt;
    return j[k].get<double>();
  };
  std::vector<EvalPoint> points;
  const fs::path evals = fs::path(cellDir) / "evals.jsonl";
  if (fs::exists(evals)) {
    std::ifstream in(evals);
    std::string line;
    while (std::getline(in, line)) {
      if (line.empty()) continue;
      auto j = nlohmann::json::parse(line, nullptr, false);
      if (j.is_discarded() || !j.is_object())
        return dataLoss(evals.string() + ": a line is not JSON");
      EvalPoint p;
      p.round = static_cast<long long>(num(j, "round").value_or(0));
      p.simTime = num(j, "sim_time");
      p.wallTime = num(j, "wall_time");
      p.bytesSentPerPeer = num(j, "bytes_sent_per_peer");
      p.trainLoss = num(j, "train_loss");
      p.testAccuracy = num(j, "test_accuracy_mean");
      p.averagedAccuracy = num(j, "averaged_model_accuracy");
      p.consensusDistance = num(j, "consensus_distance");
      points.push_back(p);
    }
    return points;
  }
  // A launched run: aggregate the evaluation records of every peer by round (mean over peers).
  struct Acc {
    int n = 0, withAcc = 0;
    double wall = 0, bytes = 0, loss = 0, acc = 0;
  };
  std::map<long long, Acc> byRound;
  int files = 0;
  for (int rank = 0;; ++rank) {
    const fs::path f = fs::path(cellDir) / ("peer-" + std::to_string(rank) + ".jsonl");
    if (!fs::exists(f)) break;
    ++files;
    std::ifstream in(f);
    std::string line;
    while (std::getline(in, line)) {
      auto j = nlohmann::json::parse(line, nullptr, false);
      if (j.is_discarded() || !j.is_object() || !j.contains("test_accuracy") || j.contains("final"))
        continue;
      Acc& a = byRound[static_cast<long long>(num(j, "round").value_or(-1)) + 1];
      ++a.n;
      a.wall = std::max(a.wall, num(j, "time").value_or(0));
      a.bytes += num(j, "bytes_sent").value_or(0);
      a.loss += num(j, "loss").value_or(0);
      if (auto acc = num(j, "test_accuracy")) {
        a.acc += *acc;
        ++a.withAcc;
      }
    }
  }
  if (files == 0) return notFound(cellDir + ": no evals.jsonl and no peer-0.jsonl");
  for (const auto& [round, a] : byRound) {
    EvalPoint p;
    p.round = round;
    p.wallTime = a.wall;
    p.bytesSentPerPeer = a.bytes / a.n;
    p.trainLoss = a.loss / a.n;
    if (a.withAcc) p.testAccuracy = a.acc / a.withAcc;
    points.push_back(p);
  }
  return points;
}

std::optional<EvalPoint> firstReaching(const std::vector<EvalPoint>& points, double target) {
  for (const auto& p : points) {
    if (p.testAccuracy && *p.testAccuracy >= target) return p;
  }
  return std::nullopt;
}

std::string csvField(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

std::string csvNumber(const std::optional<double>& v) {
  if (!v || !std::isfinite(*v)) return "";
  char b[32];
  std::snprintf(b, sizeof b, "%.9g", *v);
  return b;
}

}  // namespace grapevine::sweep
