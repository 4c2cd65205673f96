// The parts the schema's rows (schema.h) are built from: the scalar converters, one row builder
// per value type, the converters of the list-valued keys, and one table of rows per config section.
// Internal to runtime/config/: schema.cc concatenates the section tables into the one schema.
#pragma once

#include <yaml-cpp/yaml.h>

#include <cassert>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "compress/options.h"
#include "runtime/config/config.h"
#include "runtime/config/schema.h"

namespace grapevine::config::rows {

inline constexpr double kInf = std::numeric_limits<double>::infinity();
inline constexpr double kMaxPeers = 100000;

// A number as docs and `show` print it: integers without a fraction, others as %g.
std::string formatNumber(double v);
// A string as a YAML flow scalar: bare unless it could be misread, else double-quoted.
std::string quote(const std::string& s);
// A YAML scalar as an integer, a finite number or a bool; nullopt for anything else.
std::optional<std::int64_t> toInt(const YAML::Node& n);
std::optional<double> toDouble(const YAML::Node& n);
std::optional<bool> toBool(const YAML::Node& n);

// Row builders. `Access` is a lambda Config& -> T&.
// A row's path, type and doc: what every builder below starts from.
KeyDef rowHead(std::string path, ValueType type, std::string doc);
// `k`, with the range its docs state (also a custom key that converts an integer).
KeyDef withRange(KeyDef k, double min, double max);

template <typename Access>
KeyDef intKey(std::string path, Access access, double min, double max, std::string doc) {
  KeyDef k = withRange(rowHead(std::move(path), ValueType::kInt, std::move(doc)), min, max);
  k.apply = [access, min, max](Config& c, const YAML::Node& n) -> std::optional<std::string> {
    auto v = toInt(n);
    if (!v || *v < min || *v > max) return std::string("expected");
    access(c) = static_cast<std::remove_reference_t<decltype(access(c))>>(*v);
    return std::nullopt;
  };
  k.show = [access](const Config& c) { return std::to_string(access(const_cast<Config&>(c))); };
  return k;
}

template <typename Access>
KeyDef doubleKey(std::string path, Access access, double min, double max, std::string doc) {
  KeyDef k = withRange(rowHead(std::move(path), ValueType::kDouble, std::move(doc)), min, max);
  k.apply = [access, min, max](Config& c, const YAML::Node& n) -> std::optional<std::string> {
    auto v = toDouble(n);
    if (!v || *v < min || *v > max) return std::string("expected");
    access(c) = *v;
    return std::nullopt;
  };
  k.show = [access](const Config& c) { return formatNumber(access(const_cast<Config&>(c))); };
  return k;
}

// A number in [min, max] or `auto`; the field is a std::optional<double>, empty for auto.
template <typename Access>
KeyDef doubleOrAutoKey(std::string path, Access access, double min, double max, std::string doc) {
  KeyDef k =
      withRange(rowHead(std::move(path), ValueType::kDoubleOrAuto, std::move(doc)), min, max);
  k.apply = [access, min, max](Config& c, const YAML::Node& n) -> std::optional<std::string> {
    if (n.IsScalar() && n.Scalar() == "auto") {
      access(c).reset();
      return std::nullopt;
    }
    auto v = toDouble(n);
    if (!v || *v < min || *v > max) return std::string("expected");
    access(c) = *v;
    return std::nullopt;
  };
  k.show = [access](const Config& c) {
    const auto& v = access(const_cast<Config&>(c));
    return v ? formatNumber(*v) : std::string("auto");
  };
  return k;
}

template <typename Access>
KeyDef boolKey(std::string path, Access access, std::string doc) {
  KeyDef k = rowHead(std::move(path), ValueType::kBool, std::move(doc));
  k.apply = [access](Config& c, const YAML::Node& n) -> std::optional<std::string> {
    auto v = toBool(n);
    if (!v) return std::string("expected");
    access(c) = *v;
    return std::nullopt;
  };
  k.show = [access](const Config& c) {
    return std::string(access(const_cast<Config&>(c)) ? "true" : "false");
  };
  return k;
}

template <typename Access>
KeyDef stringKey(std::string path, Access access, std::string doc) {
  KeyDef k = rowHead(std::move(path), ValueType::kString, std::move(doc));
  k.apply = [access](Config& c, const YAML::Node& n) -> std::optional<std::string> {
    if (!n.IsScalar()) return std::string("expected");
    access(c) = n.Scalar();
    return std::nullopt;
  };
  k.show = [access](const Config& c) { return quote(access(const_cast<Config&>(c))); };
  return k;
}

// One allowed value of an enum key: its name in configs and the typed value it stands for.
template <typename E>
struct Choice {
  std::string name;
  E value;
};

// The choices of an enum key from the owning library's name list and parser (topology, train,
// algorithms, log, config's own emulation). A name its own parser rejects would be a bug in that
// library; it is left out, and tests/config/enum_names_test.cc fails on the difference.
template <typename Parse>
auto choicesOf(const std::vector<std::string_view>& names, Parse parse) {
  using E = std::remove_cvref_t<decltype(*parse(std::string_view{}))>;
  std::vector<Choice<E>> out;
  for (std::string_view name : names) {
    const auto value = parse(name);
    assert(value && "a name table's parser rejects one of its own names");
    if (value) out.push_back({std::string(name), *value});
  }
  return out;
}

// The choices of an enum key from compress's {name, value, doc} rows, optionally only those that
// pass `keep`.
template <typename E>
std::vector<Choice<E>> choicesOf(std::span<const compress::NamedValue<E>> rows,
                                 bool (*keep)(E) = nullptr) {
  std::vector<Choice<E>> out;
  for (const auto& row : rows) {
    if (keep == nullptr || keep(row.value)) out.push_back({std::string(row.name), row.value});
  }
  return out;
}

// A typed enum key: the YAML scalar must be one of the choices' names; the field holds its value.
template <typename E, typename Access>
KeyDef enumKey(std::string path, Access access, std::vector<Choice<E>> choices, std::string doc) {
  KeyDef k = rowHead(std::move(path), ValueType::kEnum, std::move(doc));
  for (const auto& ch : choices) k.choices.push_back(ch.name);
  k.apply = [access, choices](Config& c, const YAML::Node& n) -> std::optional<std::string> {
    if (!n.IsScalar()) return std::string("expected");
    for (const auto& ch : choices) {
      if (n.Scalar() == ch.name) {
        access(c) = ch.value;
        return std::nullopt;
      }
    }
    return std::string("expected");
  };
  k.show = [access, choices](const Config& c) {
    const E value = access(const_cast<Config&>(c));
    for (const auto& ch : choices) {
      if (ch.value == value) return quote(ch.name);
    }
    return std::string("?");  // unreachable: apply() only stores listed values
  };
  return k;
}

// A string key restricted to `names`, for names that stay strings in the program
// (transport.backend: backends are registered and looked up by name).
template <typename Access, typename Names>
KeyDef nameKey(std::string path, Access access, const Names& names, std::string doc) {
  KeyDef k = rowHead(std::move(path), ValueType::kEnum, std::move(doc));
  for (std::string_view name : names) k.choices.emplace_back(name);
  k.apply = [access, choices = k.choices](Config& c,
                                          const YAML::Node& n) -> std::optional<std::string> {
    if (!n.IsScalar()) return std::string("expected");
    for (const auto& ch : choices) {
      if (n.Scalar() == ch) {
        access(c) = ch;
        return std::nullopt;
      }
    }
    return std::string("expected");
  };
  k.show = [access](const Config& c) { return quote(access(const_cast<Config&>(c))); };
  return k;
}

template <typename Access>
KeyDef intListKey(std::string path, Access access, double min, double max, std::string doc) {
  KeyDef k = withRange(rowHead(std::move(path), ValueType::kIntList, std::move(doc)), min, max);
  k.apply = [access, min, max](Config& c, const YAML::Node& n) -> std::optional<std::string> {
    if (!n.IsSequence()) return std::string("expected");
    std::vector<int> out;
    for (const auto& item : n) {
      auto v = toInt(item);
      if (!v || *v < min || *v > max) return std::string("expected");
      out.push_back(static_cast<int>(*v));
    }
    access(c) = std::move(out);
    return std::nullopt;
  };
  k.show = [access](const Config& c) {
    std::string s = "[";
    const auto& v = access(const_cast<Config&>(c));
    for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
    return s + "]";
  };
  return k;
}

// Rows whose converter is written out (schema_lists.cc: lists of structured items, the optional
// seed).
KeyDef customKey(std::string path, ValueType type, std::string doc,
                 std::optional<std::string> (*apply)(Config&, const YAML::Node&),
                 std::string (*show)(const Config&));
// `k`, with no default: every config must set it.
KeyDef required(KeyDef k);

// The list-valued keys' converters (schema_lists.cc); each apply() returns "expected", or what is
// wrong in words, on failure.
std::optional<std::string> applyPeerList(Config& c, const YAML::Node& n);  // also sets peers.count
std::string showPeerList(const Config& c);
std::optional<std::string> applyTopologySeed(Config& c, const YAML::Node& n);
std::string showTopologySeed(const Config& c);
std::optional<std::string> applyTopologyEdges(Config& c, const YAML::Node& n);
std::string showTopologyEdges(const Config& c);
std::optional<std::string> applyNetworkPeers(Config& c, const YAML::Node& n);
std::string showNetworkPeers(const Config& c);
std::optional<std::string> applyNetworkEdges(Config& c, const YAML::Node& n);
std::string showNetworkEdges(const Config& c);
std::optional<std::string> applyFaults(Config& c, const YAML::Node& n);
std::string showFaults(const Config& c);

// One table of rows per section (schema_tables.cc), as UCX keeps one config table per component.
// schema() is their concatenation in this order, which is the order of docs/config.md.
std::vector<KeyDef> runKeys();
std::vector<KeyDef> peersKeys();
std::vector<KeyDef> topologyKeys();
std::vector<KeyDef> transportKeys();
std::vector<KeyDef> algorithmKeys();
std::vector<KeyDef> optimizerKeys();
std::vector<KeyDef> outerKeys();
std::vector<KeyDef> compressionKeys();
std::vector<KeyDef> workloadKeys();
std::vector<KeyDef> outputKeys();
std::vector<KeyDef> monitoringKeys();
std::vector<KeyDef> checkpointKeys();
std::vector<KeyDef> networkKeys();
std::vector<KeyDef> securityKeys();
std::vector<KeyDef> faultsKeys();

}  // namespace grapevine::config::rows
