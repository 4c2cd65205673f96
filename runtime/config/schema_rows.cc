#include "runtime/config/schema_rows.h"

#include <charconv>
#include <cmath>
#include <cstdio>

namespace grapevine::config::rows {

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

KeyDef rowHead(std::string path, ValueType type, std::string doc) {
  KeyDef k;
  k.path = std::move(path);
  k.type = type;
  k.doc = std::move(doc);
  return k;
}

KeyDef customKey(std::string path, ValueType type, std::string doc,
                 std::optional<std::string> (*apply)(Config&, const YAML::Node&),
                 std::string (*show)(const Config&)) {
  KeyDef k = rowHead(std::move(path), type, std::move(doc));
  k.optional = true;
  k.apply = apply;
  k.show = show;
  return k;
}

KeyDef required(KeyDef k) {
  k.required = true;
  return k;
}

KeyDef withRange(KeyDef k, double min, double max) {
  k.min = min;
  k.max = max;
  return k;
}

}  // namespace grapevine::config::rows
