#include "topology/spec.h"

#include <string>

namespace grapevine::topology {
namespace {
template <typename E>
struct NameTable {
  std::vector<std::string_view> names;
  std::vector<E> values;
};

const NameTable<Kind>& kinds() {
  static const NameTable<Kind> t{
      {"ring", "torus", "random-regular", "erdos-renyi", "exponential", "one-peer-exponential",
       "complete", "edges"},
      {Kind::kRing, Kind::kTorus, Kind::kRandomRegular, Kind::kErdosRenyi, Kind::kExponential,
       Kind::kOnePeerExponential, Kind::kComplete, Kind::kEdges}};
  return t;
}

const NameTable<WeightsKind>& weightKinds() {
  static const NameTable<WeightsKind> t{{"metropolis", "uniform", "explicit", "lazy-metropolis"},
                                        {WeightsKind::kMetropolis, WeightsKind::kUniform,
                                         WeightsKind::kExplicit, WeightsKind::kLazyMetropolis}};
  return t;
}

template <typename E>
std::string_view nameOf(const NameTable<E>& t, E v) {
  for (size_t i = 0; i < t.values.size(); ++i) {
    if (t.values[i] == v) return t.names[i];
  }
  return "?";
}

template <typename E>
std::optional<E> parse(const NameTable<E>& t, std::string_view name) {
  for (size_t i = 0; i < t.names.size(); ++i) {
    if (t.names[i] == name) return t.values[i];
  }
  return std::nullopt;
}
}  // namespace

std::string_view kindName(Kind kind) { return nameOf(kinds(), kind); }
std::optional<Kind> parseKind(std::string_view name) { return parse(kinds(), name); }
std::string_view weightsName(WeightsKind kind) { return nameOf(weightKinds(), kind); }
std::optional<WeightsKind> parseWeights(std::string_view name) {
  return parse(weightKinds(), name);
}
const std::vector<std::string_view>& kindNames() { return kinds().names; }
const std::vector<std::string_view>& weightsNames() { return weightKinds().names; }

}  // namespace grapevine::topology
