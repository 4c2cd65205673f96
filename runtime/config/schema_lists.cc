// The converters of the keys whose values are lists of structured items (peers.list,
// topology.edges, network.peers, network.edges, faults.events) and of the optional topology.seed.
#include <cmath>
#include <cstddef>

#include "runtime/config/schema_rows.h"

namespace grapevine::config::rows {
namespace {

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

// faults.events (also `faults:` given as a list): [{kind, peer | link, at_round | at_seconds,
// rounds | seconds}, ...]. The form of each item is checked here (the returned text says which item
// and why); what depends on other keys (ranks, edges, overlaps, checkpoints) in checks.cc
// (checkFaults).
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
    } else if (key == "scale") {
      auto v = toDouble(value);
      if (!v || !std::isfinite(*v) || *v < 0 || *v > 1e6)
        return std::string("scale is not a number from 0 to 1e6");
      ev.scale = *v;
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
  if (ev.scale && !isAttack(ev.kind)) return kindText + " takes no scale (an attack's strength)";
  if (ev.scale && ev.kind == FaultKind::kReplay)
    return std::string("replay takes no scale (it sends its model of the first round again)");
  if (isAttack(ev.kind)) return std::nullopt;  // without a length: to the end of the run
  if (ev.kind == FaultKind::kKill && hasLength)
    return "kill takes no length (a killed peer stays dead; use kind: restart)";
  if (ev.kind != FaultKind::kKill && !hasLength)
    return kindText + (ev.atRound ? " needs rounds" : " needs seconds") +
           (ev.kind == FaultKind::kRestart ? " (how long it stays down)" : " (how long)");
  return std::nullopt;
}

}  // namespace

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
    if (e.scale) s += ", scale: " + formatNumber(*e.scale);
    if (e.rounds) s += ", rounds: " + std::to_string(*e.rounds);
    if (e.seconds) s += ", seconds: " + formatNumber(*e.seconds);
    s += "}";
  }
  return s + "]";
}

}  // namespace grapevine::config::rows
