#include "runtime/config/schema.h"

#include <cctype>
#include <cstdio>

#include "runtime/config/schema_rows.h"

namespace grapevine::config {
namespace {

using rows::formatNumber;
using rows::kInf;

// The section tables (schema_tables.cc), concatenated.
std::vector<KeyDef> buildSchema() {
  std::vector<KeyDef> t;
  for (auto table :
       {rows::runKeys, rows::peersKeys, rows::topologyKeys, rows::transportKeys,
        rows::algorithmKeys, rows::optimizerKeys, rows::outerKeys, rows::compressionKeys,
        rows::workloadKeys, rows::outputKeys, rows::monitoringKeys, rows::checkpointKeys,
        rows::networkKeys, rows::securityKeys, rows::faultsKeys}) {
    for (KeyDef& k : table()) t.push_back(std::move(k));
  }
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
