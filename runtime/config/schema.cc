#include "runtime/config/schema.h"

#include <cassert>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <span>
#include <sstream>
#include <type_traits>

#include "runtime/transport/backend_names.h"

namespace grapevine::config {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kMaxPeers = 100000;

std::string formatNumber(double v) {
  if (v == std::floor(v) && std::fabs(v) < 1e15) {
    return std::to_string(static_cast<long long>(v));
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

std::string quote(const std::string& s) {
  // Plain scalars stay bare unless they could be misread.
  if (s.empty() || s.find_first_of(":#{}[],&*!|>'\"%@`") != std::string::npos || s.front() == ' ' ||
      s.back() == ' ') {
    std::string out = "\"";
    for (char c : s) {
      if (c == '"' || c == '\\') out += '\\';
      out += c;
    }
    return out + "\"";
  }
  return s;
}

std::optional<std::int64_t> toInt(const YAML::Node& n) {
  if (!n.IsScalar()) return std::nullopt;
  const std::string& s = n.Scalar();
  std::int64_t v = 0;
  const char* b = s.data();
  const char* e = s.data() + s.size();
  if (b != e && *b == '+') ++b;
  auto [p, ec] = std::from_chars(b, e, v);
  if (ec != std::errc() || p != e || b == e) return std::nullopt;
  return v;
}

std::optional<double> toDouble(const YAML::Node& n) {
  if (!n.IsScalar()) return std::nullopt;
  const std::string& s = n.Scalar();
  double v = 0;
  const char* b = s.data();
  const char* e = s.data() + s.size();
  if (b != e && *b == '+') ++b;
  auto [p, ec] = std::from_chars(b, e, v);
  if (ec != std::errc() || p != e || b == e || !std::isfinite(v)) return std::nullopt;
  return v;
}

std::optional<bool> toBool(const YAML::Node& n) {
  if (!n.IsScalar()) return std::nullopt;
  const std::string& s = n.Scalar();
  if (s == "true" || s == "True" || s == "yes" || s == "on") return true;
  if (s == "false" || s == "False" || s == "no" || s == "off") return false;
  return std::nullopt;
}

// Row builders. `Access` is a lambda Config& -> T&.
template <typename Access>
KeyDef intKey(std::string path, Access access, double min, double max, std::string doc) {
  KeyDef k;
  k.path = std::move(path);
  k.type = ValueType::kInt;
  k.min = min;
  k.max = max;
  k.doc = std::move(doc);
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
  KeyDef k;
  k.path = std::move(path);
  k.type = ValueType::kDouble;
  k.min = min;
  k.max = max;
  k.doc = std::move(doc);
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
  KeyDef k;
  k.path = std::move(path);
  k.type = ValueType::kDoubleOrAuto;
  k.min = min;
  k.max = max;
  k.doc = std::move(doc);
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
  KeyDef k;
  k.path = std::move(path);
  k.type = ValueType::kBool;
  k.doc = std::move(doc);
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
  KeyDef k;
  k.path = std::move(path);
  k.type = ValueType::kString;
  k.doc = std::move(doc);
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
  KeyDef k;
  k.path = std::move(path);
  k.type = ValueType::kEnum;
  for (const auto& ch : choices) k.choices.push_back(ch.name);
  k.doc = std::move(doc);
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
  KeyDef k;
  k.path = std::move(path);
  k.type = ValueType::kEnum;
  for (std::string_view name : names) k.choices.emplace_back(name);
  k.doc = std::move(doc);
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
  KeyDef k;
  k.path = std::move(path);
  k.type = ValueType::kIntList;
  k.min = min;
  k.max = max;
  k.doc = std::move(doc);
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

// One key of a network override item (network.peers / network.edges); false if the key is unknown
// or its value out of range (the same ranges as the network.* defaults).
bool applyLinkOverride(LinkOverride& o, const std::string& key, const YAML::Node& value) {
  auto v = toDouble(value);
  if (!v) return false;
  if (key == "bandwidth_mbit" && *v >= 0 && *v <= 1e6) {
    o.bandwidthMbit = *v;
  } else if (key == "latency_ms" && *v >= 0 && *v <= 1e5) {
    o.latencyMs = *v;
  } else if (key == "jitter_ms" && *v >= 0 && *v <= 1e5) {
    o.jitterMs = *v;
  } else if (key == "loss_percent" && *v >= 0 && *v <= 100) {
    o.lossPercent = *v;
  } else {
    return false;
  }
  return true;
}

std::string showLinkOverride(const LinkOverride& o) {
  std::string s;
  if (o.bandwidthMbit) s += ", bandwidth_mbit: " + formatNumber(*o.bandwidthMbit);
  if (o.latencyMs) s += ", latency_ms: " + formatNumber(*o.latencyMs);
  if (o.jitterMs) s += ", jitter_ms: " + formatNumber(*o.jitterMs);
  if (o.lossPercent) s += ", loss_percent: " + formatNumber(*o.lossPercent);
  return s;
}

// Rows whose converter is written out below (lists of structured items, the optional seed).
KeyDef customKey(std::string path, ValueType type, std::string doc,
                 std::optional<std::string> (*apply)(Config&, const YAML::Node&),
                 std::string (*show)(const Config&)) {
  KeyDef k;
  k.path = std::move(path);
  k.type = type;
  k.optional = true;
  k.doc = std::move(doc);
  k.apply = apply;
  k.show = show;
  return k;
}

KeyDef required(KeyDef k) {
  k.required = true;
  return k;
}

// peers.list: [{host: H, port: P}, ...]; also sets peers.count.
std::optional<std::string> applyPeerList(Config& c, const YAML::Node& n) {
  if (!n.IsSequence() || n.size() == 0) return std::string("expected");
  std::vector<PeerAddress> out;
  for (const auto& item : n) {
    if (!item.IsMap() || !item["host"] || !item["port"] || item.size() != 2) {
      return std::string("expected");
    }
    auto port = toInt(item["port"]);
    if (!item["host"].IsScalar() || item["host"].Scalar().empty() || !port || *port < 1 ||
        *port > 65535) {
      return std::string("expected");
    }
    out.push_back({item["host"].Scalar(), static_cast<int>(*port)});
  }
  c.peers.list = std::move(out);
  c.peers.count = static_cast<int>(c.peers.list.size());
  return std::nullopt;
}

std::string showPeerList(const Config& c) {
  std::string s = "[";
  for (size_t i = 0; i < c.peers.list.size(); ++i) {
    s += (i ? ", " : "") + std::string("{host: ") + quote(c.peers.list[i].host) +
         ", port: " + std::to_string(c.peers.list[i].port) + "}";
  }
  return s + "]";
}

// topology.seed: unset means run.seed.
std::optional<std::string> applyTopologySeed(Config& c, const YAML::Node& n) {
  auto v = toInt(n);
  if (!v || *v < 0) return std::string("expected");
  c.topology.seed = static_cast<std::uint64_t>(*v);
  return std::nullopt;
}

std::string showTopologySeed(const Config& c) {
  return c.topology.seed ? std::to_string(*c.topology.seed) : std::string("run.seed");
}

// topology.edges: items [a, b], [a, b, weight] or {a: A, b: B[, weight: W]}.
std::optional<std::string> applyTopologyEdges(Config& c, const YAML::Node& n) {
  if (!n.IsSequence()) return std::string("expected");
  std::vector<topology::WeightedEdge> out;
  for (const auto& item : n) {
    YAML::Node e;  // a fresh node: assigning to a copy of `item` would rewrite the document
    if (item.IsMap()) {
      if (!item["a"] || !item["b"] || item.size() != (item["weight"] ? 3u : 2u)) {
        return std::string("expected");
      }
      e.push_back(item["a"]);
      e.push_back(item["b"]);
      if (item["weight"]) e.push_back(item["weight"]);
    } else {
      e.reset(item);
    }
    if (!e.IsSequence() || (e.size() != 2 && e.size() != 3)) return std::string("expected");
    auto a = toInt(e[0]);
    auto b = toInt(e[1]);
    if (!a || !b || *a < 0 || *b < 0 || *a >= kMaxPeers || *b >= kMaxPeers) {
      return std::string("expected");
    }
    topology::WeightedEdge we{static_cast<int>(*a), static_cast<int>(*b), std::nullopt};
    if (e.size() == 3) {
      auto w = toDouble(e[2]);
      if (!w || *w < 0 || *w > 1) return std::string("expected");
      we.weight = *w;
    }
    out.push_back(we);
  }
  c.topology.edges = std::move(out);
  return std::nullopt;
}

std::string showTopologyEdges(const Config& c) {
  std::string s = "[";
  for (size_t i = 0; i < c.topology.edges.size(); ++i) {
    const auto& e = c.topology.edges[i];
    s += (i ? ", [" : "[") + std::to_string(e.a) + ", " + std::to_string(e.b);
    if (e.weight) s += ", " + formatNumber(*e.weight);
    s += "]";
  }
  return s + "]";
}

// network.peers: [{rank: R, <link keys>, compute_scale}, ...].
std::optional<std::string> applyNetworkPeers(Config& c, const YAML::Node& n) {
  if (!n.IsSequence()) return std::string("expected");
  std::vector<PeerNetwork> out;
  for (const auto& item : n) {
    if (!item.IsMap() || !item["rank"]) return std::string("expected");
    PeerNetwork pn;
    auto rank = toInt(item["rank"]);
    if (!rank || *rank < 0 || *rank >= kMaxPeers) return std::string("expected");
    pn.rank = static_cast<int>(*rank);
    for (auto it = item.begin(); it != item.end(); ++it) {
      const std::string key = it->first.as<std::string>();  // copy: the iterator yields a temporary
      const YAML::Node value = it->second;
      if (key == "rank") continue;
      if (key == "compute_scale") {
        auto v = toDouble(value);
        if (!v || *v < 1e-3 || *v > 1e3) return std::string("expected");
        pn.computeScale = *v;
      } else if (key == "node_bandwidth_mbit") {
        auto v = toDouble(value);
        if (!v || *v < 0 || *v > 1e6) return std::string("expected");
        pn.nodeBandwidthMbit = *v;
      } else if (!applyLinkOverride(pn.link, key, value)) {
        return std::string("expected");
      }
    }
    out.push_back(pn);
  }
  c.network.peers = std::move(out);
  return std::nullopt;
}

std::string showNetworkPeers(const Config& c) {
  std::string s = "[";
  for (size_t i = 0; i < c.network.peers.size(); ++i) {
    const auto& pn = c.network.peers[i];
    s += (i ? ", " : "") + std::string("{rank: ") + std::to_string(pn.rank) +
         showLinkOverride(pn.link);
    if (pn.computeScale) s += ", compute_scale: " + formatNumber(*pn.computeScale);
    if (pn.nodeBandwidthMbit) s += ", node_bandwidth_mbit: " + formatNumber(*pn.nodeBandwidthMbit);
    s += "}";
  }
  return s + "]";
}

// network.edges: [{between: [a, b], <link keys>}, ...].
std::optional<std::string> applyNetworkEdges(Config& c, const YAML::Node& n) {
  if (!n.IsSequence()) return std::string("expected");
  std::vector<EdgeNetwork> out;
  for (const auto& item : n) {
    if (!item.IsMap() || !item["between"]) return std::string("expected");
    const YAML::Node between = item["between"];
    if (!between.IsSequence() || between.size() != 2) return std::string("expected");
    auto a = toInt(between[0]);
    auto b = toInt(between[1]);
    if (!a || !b || *a < 0 || *b < 0 || *a >= kMaxPeers || *b >= kMaxPeers || *a == *b) {
      return std::string("expected");
    }
    EdgeNetwork e;
    e.a = static_cast<int>(*a);
    e.b = static_cast<int>(*b);
    for (auto it = item.begin(); it != item.end(); ++it) {
      const std::string key = it->first.as<std::string>();
      const YAML::Node value = it->second;
      if (key == "between") continue;
      if (!applyLinkOverride(e.link, key, value)) return std::string("expected");
    }
    out.push_back(e);
  }
  c.network.edges = std::move(out);
  return std::nullopt;
}

std::string showNetworkEdges(const Config& c) {
  std::string s = "[";
  for (size_t i = 0; i < c.network.edges.size(); ++i) {
    const auto& e = c.network.edges[i];
    s += (i ? ", " : "") + std::string("{between: [") + std::to_string(e.a) + ", " +
         std::to_string(e.b) + "]" + showLinkOverride(e.link) + "}";
  }
  return s + "]";
}

// faults.events (also `faults:` given as a list): [{kind, peer | link, at_round | at_seconds,
// rounds | seconds}, ...]. The form of each item is checked here (the returned text says which item
// and why); what depends on other keys (ranks, edges, overlaps, checkpoints) in the loader's
// checks.
std::optional<std::string> applyFaultEvent(FaultEvent& ev, const YAML::Node& item) {
  if (!item.IsMap()) return std::string("not a mapping");
  if (!item["kind"] || !item["kind"].IsScalar()) return std::string("no kind");
  const auto kind = parseFaultKind(item["kind"].Scalar());
  if (!kind) return "unknown kind \"" + item["kind"].Scalar() + "\"";
  ev.kind = *kind;
  for (auto it = item.begin(); it != item.end(); ++it) {
    const std::string key = it->first.as<std::string>();
    const YAML::Node value = it->second;
    if (key == "kind") continue;
    if (key == "peer") {
      auto v = toInt(value);
      if (!v || *v < 0 || *v >= kMaxPeers) return std::string("peer is not a rank");
      ev.peer = static_cast<int>(*v);
    } else if (key == "link") {
      if (!value.IsSequence() || value.size() != 2) return std::string("link is not [a, b]");
      auto a = toInt(value[0]);
      auto b = toInt(value[1]);
      if (!a || !b || *a < 0 || *b < 0 || *a >= kMaxPeers || *b >= kMaxPeers || *a == *b)
        return std::string("link is not [a, b] with two different ranks");
      ev.linkA = static_cast<int>(*a);
      ev.linkB = static_cast<int>(*b);
    } else if (key == "at_round" || key == "rounds") {
      auto v = toInt(value);
      if (!v || *v < (key == "rounds" ? 1 : 0) || *v > 1e9)
        return key + (key == "rounds" ? " is not an integer >= 1" : " is not an integer >= 0");
      (key == "at_round" ? ev.atRound : ev.rounds) = *v;
    } else if (key == "at_seconds" || key == "seconds") {
      auto v = toDouble(value);
      if (!v || *v < 0 || *v > 1e7 || (key == "seconds" && *v <= 0))
        return key + (key == "seconds" ? " is not a number > 0" : " is not a number >= 0");
      (key == "at_seconds" ? ev.atSeconds : ev.seconds) = *v;
    } else {
      return "unknown key \"" + key + "\"";
    }
  }
  const std::string kindText(faultKindName(ev.kind));
  const bool isLink = ev.kind == FaultKind::kLinkDown;
  if (isLink && ev.linkA < 0) return kindText + " needs link: [a, b]";
  if (isLink && ev.peer >= 0) return kindText + " takes link, not peer";
  if (!isLink && ev.peer < 0) return kindText + " needs peer";
  if (!isLink && ev.linkA >= 0) return kindText + " takes peer, not link";
  if (ev.atRound.has_value() == ev.atSeconds.has_value())
    return "give exactly one of at_round and at_seconds";
  if (ev.atRound && ev.seconds) return "seconds with at_round: give rounds";
  if (ev.atSeconds && ev.rounds) return "rounds with at_seconds: give seconds";
  const bool hasLength = ev.rounds || ev.seconds;
  if (ev.kind == FaultKind::kKill && hasLength)
    return "kill takes no length (a killed peer stays dead; use kind: restart)";
  if (ev.kind != FaultKind::kKill && !hasLength)
    return kindText + (ev.atRound ? " needs rounds" : " needs seconds") +
           (ev.kind == FaultKind::kRestart ? " (how long it stays down)" : " (how long)");
  return std::nullopt;
}

std::optional<std::string> applyFaults(Config& c, const YAML::Node& n) {
  if (n.IsNull()) {
    c.faults.events.clear();
    return std::nullopt;
  }
  if (!n.IsSequence()) return std::string("expected");
  std::vector<FaultEvent> out;
  for (std::size_t i = 0; i < n.size(); ++i) {
    FaultEvent ev;
    if (auto problem = applyFaultEvent(ev, n[i]))
      return "item " + std::to_string(i) + ": " + *problem;
    out.push_back(ev);
  }
  c.faults.events = std::move(out);
  return std::nullopt;
}

std::string showFaults(const Config& c) {
  std::string s = "[";
  for (size_t i = 0; i < c.faults.events.size(); ++i) {
    const auto& e = c.faults.events[i];
    s += (i ? ", " : "") + std::string("{kind: ") + std::string(faultKindName(e.kind));
    if (e.kind == FaultKind::kLinkDown)
      s += ", link: [" + std::to_string(e.linkA) + ", " + std::to_string(e.linkB) + "]";
    else
      s += ", peer: " + std::to_string(e.peer);
    if (e.atRound) s += ", at_round: " + std::to_string(*e.atRound);
    if (e.atSeconds) s += ", at_seconds: " + formatNumber(*e.atSeconds);
    if (e.rounds) s += ", rounds: " + std::to_string(*e.rounds);
    if (e.seconds) s += ", seconds: " + formatNumber(*e.seconds);
    s += "}";
  }
  return s + "]";
}

std::vector<KeyDef> buildSchema() {
  std::vector<KeyDef> t;

  // run
  t.push_back(stringKey(
      "run.name", [](Config & c) -> auto& { return c.run.name; },
      "Name of the run, used in logs and output files"));
  t.push_back(intKey(
      "run.seed", [](Config & c) -> auto& { return c.run.seed; }, 0, 9.2e18,
      "Seed of every random choice (data shards, random graphs, rand-k, rounding)"));
  t.push_back(intKey(
      "run.rounds", [](Config & c) -> auto& { return c.run.rounds; }, 1, 1e9,
      "Number of gossip rounds each peer runs"));
  t.push_back(enumKey(
      "run.log_level", [](Config & c) -> auto& { return c.run.logLevel; },
      choicesOf(log::levelNames(), log::parseLevel), "Verbosity of each peer's log"));
  t.push_back(boolKey(
      "run.final_average", [](Config & c) -> auto& { return c.run.finalAverage; },
      "After the last round, average the peers' models exactly (a sum up a spanning tree of the "
      "graph to rank 0 and the average back down; around the ring, reduce-scatter then "
      "all-gather, when the graph has the ring 0-1-...-n-1 and the model is over 1 MiB of f64) "
      "so every peer ends with the same, deployable model; its time is the final record's "
      "average_seconds (docs/api.md)"));

  // peers
  t.push_back(required(intKey(
      "peers.count", [](Config & c) -> auto& { return c.peers.count; }, 1, kMaxPeers,
      "Number of peers (with `peers` given as a list, its length)")));
  t.push_back(stringKey(
      "peers.host", [](Config & c) -> auto& { return c.peers.host; },
      "Host of every peer when peers are given by count; with peers.rendezvous, this peer's own "
      "address: a numeric IP, or `auto` (this machine's hostname, resolved to its address)"));
  t.push_back(intKey(
      "peers.base_port", [](Config & c) -> auto& { return c.peers.basePort; }, 1, 65535,
      "Control port of peer 0; peer r listens on base_port + r"));
  t.push_back(customKey(
      "peers.list", ValueType::kPeerList,
      "Explicit peer addresses, rank order; also written as `peers: [{host: h, port: p}, ...]`",
      applyPeerList, showPeerList));
  t.push_back(stringKey(
      "peers.rendezvous", [](Config & c) -> auto& { return c.peers.rendezvous; },
      "Shared folder (one per run) where each peer writes `rank-<r>` with its host:port and reads "
      "its neighbours' (for hosts assigned by a scheduler); empty: off"));
  t.push_back(doubleKey(
      "peers.connect_timeout", [](Config & c) -> auto& { return c.peers.connectTimeout; }, 0.1,
      86400, "Seconds to keep retrying an unreachable neighbour before giving up"));
  t.push_back(doubleKey(
      "peers.heartbeat_interval", [](Config & c) -> auto& { return c.peers.heartbeatInterval; },
      0.01, 60, "Seconds between heartbeats on each control connection"));
  t.push_back(doubleKey(
      "peers.dead_after", [](Config & c) -> auto& { return c.peers.deadAfter; }, 0.05, 3600,
      "Seconds without heartbeats after which a neighbour is declared dead"));

  // topology
  t.push_back(enumKey(
      "topology.kind", [](Config & c) -> auto& { return c.topology.kind; },
      choicesOf(topology::kindNames(), topology::parseKind), "Graph of the peers"));
  t.push_back(enumKey(
      "topology.weights", [](Config & c) -> auto& { return c.topology.weights; },
      choicesOf(topology::weightsNames(), topology::parseWeights),
      "Mixing weights: Metropolis-Hastings, uniform 1/(d_max+1), per edge, or lazy Metropolis "
      "(I + W)/2, whose eigenvalues are all >= 0"));
  t.push_back(intListKey(
      "topology.dims", [](Config & c) -> auto& { return c.topology.dims; }, 1, kMaxPeers,
      "Torus sizes, 2 or 3 of them, e.g. [4, 4]; product = peers (unset: the squarest a x b)"));
  t.push_back(intKey(
      "topology.degree", [](Config & c) -> auto& { return c.topology.degree; }, 1, kMaxPeers,
      "Degree of the random-regular graph"));
  t.push_back(doubleKey(
      "topology.probability", [](Config & c) -> auto& { return c.topology.probability; }, 0.0, 1.0,
      "Edge probability of the Erdos-Renyi graph"));
  {
    KeyDef k =
        customKey("topology.seed", ValueType::kInt, "Seed of random graphs (default: run.seed)",
                  applyTopologySeed, showTopologySeed);
    k.min = 0;
    k.max = 9.2e18;
    t.push_back(k);
  }
  t.push_back(
      customKey("topology.edges", ValueType::kEdgeList,
                "Edges of kind `edges`: [[a, b], ...] or [[a, b, weight], ...] (weights: explicit)",
                applyTopologyEdges, showTopologyEdges));
  t.push_back(boolKey(
      "topology.directed", [](Config & c) -> auto& { return c.topology.directed; },
      "Kind edges: [a, b] means a sends to b only (a directed graph; algorithm.name push-sum "
      "only, and it must be strongly connected)"));

  // transport
  t.push_back(nameKey(
      "transport.backend", [](Config & c) -> auto& { return c.transport.backend; },
      transport::kBackendNames,
      "How peers exchange data; `grapevine info --transports` lists what works here"));
  t.push_back(boolKey(
      "transport.busy_poll", [](Config & c) -> auto& { return c.transport.busyPoll; },
      "Spin on the transport instead of sleeping on its event descriptor"));
  t.push_back(stringKey(
      "transport.ucx.tls", [](Config & c) -> auto& { return c.transport.ucxTls; },
      "UCX transports (UCX_TLS), e.g. tcp or posix,sysv,cma,self; empty: UCX chooses"));
  t.push_back(intKey(
      "transport.ucx.rndv_thresh", [](Config & c) -> auto& { return c.transport.ucxRndvThresh; }, 0,
      1ll << 32,
      "Bytes from which UCX uses its rendezvous protocol (UCX_RNDV_THRESH; smaller messages go "
      "eagerly). Rendezvous costs round trips per message, which dominate on links with latency; "
      "0: UCX's own choice. An UCX_RNDV_THRESH in the environment wins"));
  t.push_back(stringKey(
      "transport.libfabric.provider",
      [](Config & c) -> auto& { return c.transport.libfabricProvider; },
      "libfabric provider, e.g. tcp;ofi_rxm or shm"));
  t.push_back(intKey(
      "transport.max_frame_bytes", [](Config & c) -> auto& { return c.transport.maxFrameBytes; },
      4096, 1ll << 32,
      "Largest frame accepted from a peer; larger ones are refused before allocation"));
  t.push_back(doubleKey(
      "transport.io_timeout", [](Config & c) -> auto& { return c.transport.ioTimeout; }, 0.1, 3600,
      "Deadline in seconds of any single network operation"));

  // algorithm
  t.push_back(enumKey(
      "algorithm.name", [](Config & c) -> auto& { return c.algorithm.name; },
      choicesOf(algorithms::algorithmKindNames(), algorithms::parseAlgorithmKind),
      "Gossip algorithm: exact D-PSGD, CHOCO-SGD, DeepSqueeze, or gt (gradient tracking: DIGing, "
      "or BEER with a compressor)"));
  t.push_back(doubleOrAutoKey(
      "algorithm.consensus_step", [](Config & c) -> auto& { return c.algorithm.consensusStep; },
      0.0, 1.0,
      "Consensus step size gamma of CHOCO and DeepSqueeze; auto: CHOCO peers choose it each round "
      "from the measured compressor quality and back off when the public copies lag "
      "(docs/algorithms.md), DeepSqueeze uses 0.2, gt 0.5 uncompressed and 0.4 compressed"));
  t.push_back(boolKey(
      "algorithm.overlap", [](Config & c) -> auto& { return c.algorithm.overlap; },
      "Compute the next gradient while the round's frames are in flight; with push-sum: "
      "overlapped SGP, each share is mixed algorithm.overlap_rounds rounds after it was sent, and "
      "a round waits only for the shares that are due"));
  t.push_back(intKey(
      "algorithm.overlap_rounds", [](Config & c) -> auto& { return c.algorithm.overlapRounds; }, 1,
      32,
      "push-sum with algorithm.overlap: tau, the rounds a share stays in flight before it is "
      "mixed (a round waits for the shares sent tau rounds earlier; the last round and "
      "checkpointed ones wait for all). At most 32: a neighbour may run tau + 1 rounds ahead, and "
      "messages more than 64 rounds ahead are dropped (PeerCore::kRoundWindow)"));
  t.push_back(intKey(
      "algorithm.local_steps", [](Config & c) -> auto& { return c.algorithm.localSteps; }, 1, 1000,
      "Local optimizer steps per gossip round"));
  t.push_back(intKey(
      "algorithm.check_every", [](Config & c) -> auto& { return c.algorithm.checkEvery; }, 0, 1e9,
      "Rounds between replica-hash checks with neighbours (0: never)"));
  t.push_back(doubleKey(
      "algorithm.round_timeout", [](Config & c) -> auto& { return c.algorithm.roundTimeout; },
      0.001, 3600, "Seconds to wait for a neighbour's frames before treating it as suspect"));

  // optimizer
  t.push_back(doubleKey(
      "optimizer.lr", [](Config & c) -> auto& { return c.optimizer.lr; }, 0.0, 1e3,
      "Learning rate (peak rate with a schedule)"));
  t.push_back(doubleKey(
      "optimizer.momentum", [](Config & c) -> auto& { return c.optimizer.momentum; }, 0.0, 0.999999,
      "Momentum coefficient beta (0: plain SGD)"));
  t.push_back(boolKey(
      "optimizer.nesterov", [](Config & c) -> auto& { return c.optimizer.nesterov; },
      "Nesterov form of momentum"));
  t.push_back(enumKey(
      "optimizer.momentum_kind", [](Config & c) -> auto& { return c.optimizer.momentumKind; },
      choicesOf(train::momentumKindNames(), train::parseMomentumKind),
      "local: momentum of the local gradient; quasi-global: of the model change across mixing"));
  t.push_back(intKey(
      "optimizer.batch_size", [](Config & c) -> auto& { return c.optimizer.batchSize; }, 1, 65536,
      "Minibatch size of each local step"));
  t.push_back(enumKey(
      "optimizer.schedule", [](Config & c) -> auto& { return c.optimizer.schedule; },
      choicesOf(train::lrScheduleKindNames(), train::parseLrScheduleKind),
      "Learning-rate schedule over rounds"));
  t.push_back(intKey(
      "optimizer.warmup_rounds", [](Config & c) -> auto& { return c.optimizer.warmupRounds; }, 0,
      1e9, "Rounds of linear learning-rate warm-up"));
  t.push_back(doubleKey(
      "optimizer.weight_decay", [](Config & c) -> auto& { return c.optimizer.weightDecay; }, 0.0,
      1.0, "L2 weight decay added to the gradient"));
  t.push_back(intListKey(
      "optimizer.step_milestones", [](Config & c) -> auto& { return c.optimizer.stepMilestones; },
      1, 1e9, "Rounds at which the step schedule multiplies the rate by step_gamma"));
  t.push_back(doubleKey(
      "optimizer.step_gamma", [](Config & c) -> auto& { return c.optimizer.stepGamma; }, 0.0, 1.0,
      "Factor of the step schedule"));

  t.push_back(doubleKey(
      "optimizer.min_lr", [](Config & c) -> auto& { return c.optimizer.minLr; }, 0.0, 1e3,
      "Floor of the cosine schedule"));

  // compression
  t.push_back(enumKey(
      "compression.method", [](Config & c) -> auto& { return c.compression.method; },
      choicesOf(compress::methodNames()), "How each delta is compressed; see docs/compression.md"));
  t.push_back(doubleKey(
      "compression.ratio", [](Config & c) -> auto& { return c.compression.ratio; }, 1e-6, 1.0,
      "Fraction k/n of elements kept by top-k and rand-k"));
  t.push_back(enumKey(
      "compression.selector", [](Config & c) -> auto& { return c.compression.selector; },
      choicesOf(compress::selectorNames()),
      "top-k selection: exact, or approximate (sampled threshold, one pass)"));
  t.push_back(boolKey(
      "compression.unbiased", [](Config & c) -> auto& { return c.compression.unbiased; },
      "rand-k: scale kept values by n/k so the estimate is unbiased"));
  t.push_back(intKey(
      "compression.levels", [](Config & c) -> auto& { return c.compression.levels; }, 1, 65535,
      "QSGD quantization levels s"));
  t.push_back(intKey(
      "compression.block_size", [](Config & c) -> auto& { return c.compression.blockSize; }, 64,
      4096, "Elements per scale block of int8, int4 and sign"));
  t.push_back(enumKey(
      "compression.rounding", [](Config & c) -> auto& { return c.compression.rounding; },
      choicesOf(compress::roundingNames()), "Rounding of int8 and int4"));
  t.push_back(intKey(
      "compression.rank", [](Config & c) -> auto& { return c.compression.rank; }, 1, 1024,
      "Rank r of low-rank (PowerSGD) approximations"));
  t.push_back(enumKey(
      "compression.fallback", [](Config & c) -> auto& { return c.compression.fallback; },
      choicesOf(compress::methodNames(), compress::isFallbackMethod),
      "low-rank: method for tensors that are not matrices"));
  t.push_back(boolKey(
      "compression.error_feedback", [](Config & c) -> auto& { return c.compression.errorFeedback; },
      "Keep the compression residual and add it to the next delta"));
  t.push_back(enumKey(
      "compression.lossless", [](Config & c) -> auto& { return c.compression.lossless; },
      choicesOf(compress::losslessNames()),
      "Lossless stage after the method, used only where it pays for itself"));
  t.push_back(intKey(
      "compression.zstd_level", [](Config & c) -> auto& { return c.compression.zstdLevel; }, 1, 19,
      "zstd compression level"));
  t.push_back(intKey(
      "compression.dense_below", [](Config & c) -> auto& { return c.compression.denseBelow; }, 0,
      1e12, "Tensors with fewer elements are sent uncompressed (biases)"));
  t.push_back(intKey(
      "compression.chunk_elements", [](Config & c) -> auto& { return c.compression.chunkElements; },
      1024, 1ll << 28, "Large tensors are cut into frames of at most this many elements"));

  // workload
  t.push_back(enumKey(
      "workload.name", [](Config & c) -> auto& { return c.workload.name; },
      choicesOf(train::workloadKindNames(), train::parseWorkloadKind), "What each peer trains"));
  t.push_back(intListKey(
      "workload.hidden", [](Config & c) -> auto& { return c.workload.hidden; }, 1, 65536,
      "Hidden layer sizes of the MLP"));
  t.push_back(intListKey(
      "workload.cnn_channels", [](Config & c) -> auto& { return c.workload.cnnChannels; }, 1, 1024,
      "Output channels of the CNN's two 5x5 convolutions"));
  t.push_back(intKey(
      "workload.cnn_hidden", [](Config & c) -> auto& { return c.workload.cnnHidden; }, 1, 65536,
      "Width of the CNN's first dense layer"));
  t.push_back(enumKey(
      "workload.partition", [](Config & c) -> auto& { return c.workload.partition; },
      choicesOf(train::partitionKindNames(), train::parsePartitionKind),
      "How the training set is split across peers"));
  t.push_back(doubleKey(
      "workload.alpha", [](Config & c) -> auto& { return c.workload.alpha; }, 1e-4, 1e6,
      "Dirichlet concentration (smaller: more label skew)"));
  t.push_back(stringKey(
      "workload.data_dir", [](Config & c) -> auto& { return c.workload.dataDir; },
      "Fashion-MNIST folder (Debian package dataset-fashion-mnist)"));
  t.push_back(stringKey(
      "workload.data", [](Config & c) -> auto& { return c.workload.data; },
      "quadratic: JSON file {\"a\": [n numbers], \"b\": [n lists of d numbers]}"));
  t.push_back(doubleKey(
      "workload.noise", [](Config & c) -> auto& { return c.workload.noise; }, 0.0, 1e6,
      "quadratic: standard deviation of Gaussian gradient noise"));
  t.push_back(intKey(
      "workload.dim", [](Config & c) -> auto& { return c.workload.dim; }, 1, 1e9,
      "consensus: length of each peer's vector"));
  t.push_back(intKey(
      "workload.eval_every", [](Config & c) -> auto& { return c.workload.evalEvery; }, 0, 1e9,
      "Rounds between test evaluations (0: only at the end)"));
  t.push_back(intKey(
      "workload.eval_samples", [](Config & c) -> auto& { return c.workload.evalSamples; }, 0, 1e9,
      "Test examples used by each evaluation (0: the whole test set)"));

  // output
  t.push_back(stringKey(
      "output.dir", [](Config & c) -> auto& { return c.output.dir; },
      "Folder for summary.json and per-peer records"));
  t.push_back(intKey(
      "output.log_every", [](Config & c) -> auto& { return c.output.logEvery; }, 1, 1e9,
      "Rounds between per-peer records"));

  // monitoring
  t.push_back(intKey(
      "monitoring.prometheus_port", [](Config & c) -> auto& { return c.monitoring.prometheusPort; },
      0, 65535,
      "Prometheus /metrics of peer r on port prometheus_port + r, at the peer's own host (0: "
      "off)"));

  // checkpoint
  t.push_back(intKey(
      "checkpoint.every", [](Config & c) -> auto& { return c.checkpoint.every; }, 0, 1e9,
      "Rounds between checkpoints of every peer's state, for --resume (0: off)"));
  t.push_back(stringKey(
      "checkpoint.dir", [](Config & c) -> auto& { return c.checkpoint.dir; },
      "Folder for the checkpoints, one subfolder per rank (empty: <output.dir>/checkpoints)"));
  t.push_back(intKey(
      "checkpoint.keep", [](Config & c) -> auto& { return c.checkpoint.keep; }, 1, 1e6,
      "Newest checkpoints kept per peer (older ones are deleted, except those a restart still "
      "needs: docs/faults.md)"));
  t.push_back(boolKey(
      "checkpoint.background", [](Config & c) -> auto& { return c.checkpoint.background; },
      "Write each checkpoint on a thread of its own while training goes on (false: the round "
      "waits until it is on disk, all of its cost in checkpoint_seconds)"));

  // network
  t.push_back(enumKey(
      "network.emulate", [](Config & c) -> auto& { return c.network.emulate; },
      choicesOf(emulationNames(), parseEmulation),
      "Emulate the links below between local peers (launch)"));
  t.push_back(doubleKey(
      "network.bandwidth_mbit", [](Config & c) -> auto& { return c.network.bandwidthMbit; }, 0.0,
      1e6, "Link bandwidth in Mbit/s (0: unlimited)"));
  t.push_back(doubleKey(
      "network.latency_ms", [](Config & c) -> auto& { return c.network.latencyMs; }, 0.0, 1e5,
      "One-way link latency in ms"));
  t.push_back(doubleKey(
      "network.jitter_ms", [](Config & c) -> auto& { return c.network.jitterMs; }, 0.0, 1e5,
      "Extra one-way delay in ms, uniform in [0, jitter_ms], added to latency_ms"));
  t.push_back(doubleKey(
      "network.loss_percent", [](Config & c) -> auto& { return c.network.lossPercent; }, 0.0, 100.0,
      "Packet loss in percent"));
  t.push_back(doubleKey(
      "network.node_bandwidth_mbit",
      [](Config & c) -> auto& { return c.network.nodeBandwidthMbit; }, 0.0, 1e6,
      "Each peer's interface in Mbit/s, shared by all of its links, egress and ingress capped "
      "separately (one NIC), on top of each link's bandwidth_mbit (0: no cap)"));
  t.push_back(doubleKey(
      "network.compute_scale", [](Config & c) -> auto& { return c.network.computeScale; }, 1e-3,
      1e3, "Multiplier of compute time (simulated heterogeneous peers)"));
  t.push_back(doubleKey(
      "network.compute_ms", [](Config & c) -> auto& { return c.network.computeMs; }, 0.0, 1e6,
      "Fixed compute time per step in ms for the simulator (0: measured)"));
  t.push_back(customKey("network.peers", ValueType::kNetPeerList,
                        "Per-peer overrides: [{rank: R, bandwidth_mbit, latency_ms, jitter_ms, "
                        "loss_percent, compute_scale, node_bandwidth_mbit}, ...] (any subset); a "
                        "link takes the slower end's values; compute_scale and "
                        "node_bandwidth_mbit are the peer's own",
                        applyNetworkPeers, showNetworkPeers));
  t.push_back(customKey("network.edges", ValueType::kNetEdgeList,
                        "Per-link overrides (both directions; win over network.peers): "
                        "[{between: [a, b], bandwidth_mbit, latency_ms, jitter_ms, "
                        "loss_percent}, ...]",
                        applyNetworkEdges, showNetworkEdges));

  // security (docs/security.md)
  t.push_back(stringKey(
      "security.key_file", [](Config & c) -> auto& { return c.security.keyFile; },
      "Pre-shared key (grapevine keygen -o FILE; mode 0600): peers authenticate each other and "
      "every message; relative to the config file. Empty: no authentication"));
  t.push_back(boolKey(
      "security.encrypt", [](Config & c) -> auto& { return c.security.encrypt; },
      "Also encrypt every message (ChaCha20-Poly1305); needs security.key_file"));

  t.push_back(doubleKey(
      "security.max_delta_ratio", [](Config & c) -> auto& { return c.security.maxDeltaRatio; }, 0,
      1e30,
      "Refuse a neighbour's message that changes any value by more than this times "
      "max(1, largest |value| of the model); 0: no bound"));

  // faults (docs/faults.md). Each section's keys stay together: toYaml writes a section per run.
  t.push_back(customKey(
      "faults.events", ValueType::kFaultList,
      "Fault schedule (also `faults:` as a list; docs/faults.md): [{kind: pause, kill, restart, "
      "link-down or corrupt; peer: R or link: [a, b]; at_round: N (sim) or at_seconds: S "
      "(launch); rounds: N or seconds: S (pause, link-down, corrupt; restart: time down)}, ...]",
      applyFaults, showFaults));
  return t;
}

}  // namespace

std::string KeyDef::typeName() const {
  switch (type) {
    case ValueType::kBool:
      return "bool";
    case ValueType::kInt:
      return "int";
    case ValueType::kDouble:
      return "number";
    case ValueType::kDoubleOrAuto:
      return "number or auto";
    case ValueType::kString:
      return "string";
    case ValueType::kEnum:
      return "enum";
    case ValueType::kIntList:
      return "list of int";
    case ValueType::kEdgeList:
      return "list of edges";
    case ValueType::kPeerList:
      return "list of {host, port}";
    case ValueType::kNetPeerList:
      return "list of {rank, link keys}";
    case ValueType::kNetEdgeList:
      return "list of {between, link keys}";
    case ValueType::kFaultList:
      return "list of fault events";
  }
  return "?";
}

std::string KeyDef::rangeText() const {
  switch (type) {
    case ValueType::kInt:
    case ValueType::kDouble:
    case ValueType::kDoubleOrAuto:
    case ValueType::kIntList: {
      if (min == -kInf && max == kInf) return "";
      std::string lo = min == -kInf ? "-inf" : formatNumber(min);
      std::string hi = max == kInf ? "inf" : formatNumber(max);
      return "[" + lo + ", " + hi + "]";
    }
    case ValueType::kEnum: {
      std::string s;
      for (size_t i = 0; i < choices.size(); ++i) s += (i ? " | " : "") + choices[i];
      return s;
    }
    default:
      return "";
  }
}

std::string KeyDef::expected() const {
  switch (type) {
    case ValueType::kBool:
      return "true or false";
    case ValueType::kInt:
      return "an integer in " + rangeText();
    case ValueType::kDouble:
      return "a number in " + rangeText();
    case ValueType::kDoubleOrAuto:
      return "a number in " + rangeText() + " or auto";
    case ValueType::kString:
      return "a string";
    case ValueType::kEnum: {
      std::string s = "one of ";
      for (size_t i = 0; i < choices.size(); ++i) s += (i ? ", " : "") + choices[i];
      return s;
    }
    case ValueType::kIntList:
      return min >= 1 ? "a list of positive integers" : "a list of integers in " + rangeText();
    case ValueType::kEdgeList:
      return "a list of edges [a, b], [a, b, weight] or {a, b, weight} with ranks >= 0 and weight "
             "in [0, 1]";
    case ValueType::kPeerList:
      return "a non-empty list of {host: NAME, port: 1..65535}";
    case ValueType::kNetPeerList:
      return "a list of {rank: R, ...} with only bandwidth_mbit [0, 1e6], latency_ms [0, 1e5], "
             "jitter_ms [0, 1e5], loss_percent [0, 100], compute_scale [0.001, 1000], "
             "node_bandwidth_mbit [0, 1e6]";
    case ValueType::kNetEdgeList:
      return "a list of {between: [a, b], ...} (a != b) with only bandwidth_mbit [0, 1e6], "
             "latency_ms [0, 1e5], jitter_ms [0, 1e5], loss_percent [0, 100] (node_bandwidth_mbit "
             "is a peer's: network.peers)";
    case ValueType::kFaultList:
      return "a list of {kind: pause, kill, restart, link-down or corrupt; peer: R or "
             "link: [a, b]; at_round: N or at_seconds: S; rounds: N or seconds: S (not for kill)}";
  }
  return "?";
}

const std::vector<KeyDef>& schema() {
  static const std::vector<KeyDef> table = buildSchema();
  return table;
}

const KeyDef* findKey(std::string_view path) {
  for (const auto& k : schema()) {
    if (k.path == path) return &k;
  }
  return nullptr;
}

std::vector<std::string> sections() {
  std::vector<std::string> out;
  for (const auto& k : schema()) {
    std::string s = k.path.substr(0, k.path.find('.'));
    if (out.empty() || out.back() != s) out.push_back(s);
  }
  return out;
}

std::string envName(std::string_view path) {
  std::string s = "GRAPEVINE_";
  for (char c : path) {
    s += (c == '.' || c == '-') ? '_'
                                : static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  }
  return s;
}

std::string describeNode(const YAML::Node& node) {
  if (!node || node.IsNull()) return "nothing";
  if (node.IsSequence()) return "a list";
  if (node.IsMap()) return "a mapping";
  std::string s = node.Scalar();
  if (s.size() > 40) s = s.substr(0, 37) + "...";
  std::string out = "\"";
  for (char c : s) {
    if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned char>(c));
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

}  // namespace grapevine::config
