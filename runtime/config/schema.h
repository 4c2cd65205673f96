// The one table of config keys. The loader, the validator, `grapevine config --explain` and
// docs/config.md all read it: a key exists, has a type, a default, a range and a doc string here
// and nowhere else. Its rows are kept as one table per section (schema_tables.cc, built from the
// row builders of schema_rows.h); schema() is their concatenation.
#pragma once

#include <yaml-cpp/yaml.h>

#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/config/config.h"

namespace grapevine::config {

enum class ValueType {
  kBool,
  kInt,
  kDouble,
  kDoubleOrAuto,  // a number in [min, max], or the word `auto` (the program chooses)
  kString,
  kEnum,
  kIntList,
  kEdgeList,
  kPeerList,
  kNetPeerList,
  kNetEdgeList,
  kFaultList
};

struct KeyDef {
  std::string path;  // "topology.kind"
  ValueType type = ValueType::kString;
  std::string doc;                                        // one line
  double min = -std::numeric_limits<double>::infinity();  // numbers, and items of int lists
  double max = std::numeric_limits<double>::infinity();
  std::vector<std::string> choices;  // kEnum
  bool optional = false;             // no default value: absent unless set
  bool required = false;             // no default: every config must set it

  // Converts `node` and stores it in `config`. On failure returns what was expected, in words.
  std::function<std::optional<std::string>(Config& config, const YAML::Node& node)> apply;
  // The key's value in `config`, as YAML flow text ("ring", "[4, 4]", "0.5").
  std::function<std::string(const Config& config)> show;

  std::string typeName() const;   // "int", "number", "bool", "string", "enum", "list of int", ...
  std::string rangeText() const;  // "[1, 1000000]", "ring | torus | ...", "" when unconstrained
  std::string expected() const;   // "an integer in [1, 1000000]"
};

const std::vector<KeyDef>& schema();
const KeyDef* findKey(std::string_view path);
// The section names ("run", "peers", ...), in table order.
std::vector<std::string> sections();

// The environment variable that overrides `path`: "topology.kind" -> "GRAPEVINE_TOPOLOGY_KIND".
std::string envName(std::string_view path);

// Describes a YAML node for "found ..." messages: "\"4x4\"", "a list", "a mapping", "nothing".
std::string describeNode(const YAML::Node& node);

}  // namespace grapevine::config
