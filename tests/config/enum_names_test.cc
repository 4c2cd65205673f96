// Every enum key of the schema takes its allowed values from the library that owns the concept:
// the schema's choices equal that library's name table (same names, same order), every name
// round-trips through the library (parse -> name) and through the schema (YAML -> typed field ->
// YAML), and nothing outside the table is accepted. A new enum key must be added here.
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <functional>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/config/config.h"
#include "runtime/config/schema.h"
#include "runtime/transport/backend_names.h"
#include "runtime/transport/registry.h"

namespace gv = grapevine;
using gv::config::Config;

namespace {

// One enum key and its owner: the owner's names, and a check of one name through the owner's
// parse/name functions and through the schema row into the typed field.
struct Owner {
  std::string key;
  std::vector<std::string> names;
  std::function<void(const gv::config::KeyDef&, const std::string&)> roundTrip;
};

template <typename E>
Owner owner(std::string key, const std::vector<std::string_view>& names,
            std::function<std::optional<E>(std::string_view)> parse,
            std::function<std::string_view(E)> name, std::function<E(const Config&)> field) {
  Owner o;
  o.key = std::move(key);
  for (auto n : names) o.names.emplace_back(n);
  o.roundTrip = [parse, name, field](const gv::config::KeyDef& k, const std::string& n) {
    const std::optional<E> value = parse(n);
    REQUIRE(value.has_value());
    CHECK(name(*value) == n);
    Config c;
    REQUIRE_FALSE(k.apply(c, YAML::Node(n)).has_value());
    CHECK(field(c) == *value);
    CHECK(YAML::Load(k.show(c)).Scalar() == n);
  };
  // Names outside the table are refused by the owner too.
  CHECK_FALSE(parse("no-such-name").has_value());
  return o;
}

// compress's tables are {name, value, doc} rows and its parsers return Result.
template <typename E>
std::vector<std::string_view> namesOf(std::span<const gv::compress::NamedValue<E>> rows,
                                      bool (*keep)(E) = nullptr) {
  std::vector<std::string_view> out;
  for (const auto& r : rows) {
    if (keep == nullptr || keep(r.value)) out.push_back(r.name);
  }
  return out;
}

template <typename E>
std::function<std::optional<E>(std::string_view)> optionalOf(
    gv::Result<E> (*parse)(std::string_view)) {
  return [parse](std::string_view n) -> std::optional<E> {
    auto r = parse(n);
    if (!r.isOk()) return std::nullopt;
    return *r;
  };
}

std::vector<Owner> owners() {
  namespace alg = gv::algorithms;
  namespace cmp = gv::compress;
  namespace topo = gv::topology;
  namespace train = gv::train;
  std::vector<Owner> v;
  v.push_back(owner<gv::log::Level>("run.log_level", gv::log::levelNames(), gv::log::parseLevel,
                                    gv::log::levelName,
                                    [](const Config& c) { return c.run.logLevel; }));
  v.push_back(owner<topo::Kind>("topology.kind", topo::kindNames(), topo::parseKind, topo::kindName,
                                [](const Config& c) { return c.topology.kind; }));
  v.push_back(owner<topo::WeightsKind>("topology.weights", topo::weightsNames(), topo::parseWeights,
                                       topo::weightsName,
                                       [](const Config& c) { return c.topology.weights; }));
  v.push_back(owner<alg::AlgorithmKind>("algorithm.name", alg::algorithmKindNames(),
                                        alg::parseAlgorithmKind, alg::algorithmKindName,
                                        [](const Config& c) { return c.algorithm.name; }));
  v.push_back(owner<alg::RobustRule>("algorithm.robust", alg::robustRuleNames(),
                                     alg::parseRobustRule, alg::robustRuleName,
                                     [](const Config& c) { return c.algorithm.robust; }));
  v.push_back(owner<train::OptimizerKind>("optimizer.kind", train::optimizerKindNames(),
                                          train::parseOptimizerKind, train::optimizerKindName,
                                          [](const Config& c) { return c.optimizer.kind; }));
  v.push_back(owner<train::MomentumKind>("optimizer.momentum_kind", train::momentumKindNames(),
                                         train::parseMomentumKind, train::momentumKindName,
                                         [](const Config& c) { return c.optimizer.momentumKind; }));
  v.push_back(owner<train::OuterKind>("outer.optimizer", train::outerKindNames(),
                                      train::parseOuterKind, train::outerKindName,
                                      [](const Config& c) { return c.outer.optimizer; }));
  v.push_back(owner<train::LrScheduleKind>("optimizer.schedule", train::lrScheduleKindNames(),
                                           train::parseLrScheduleKind, train::lrScheduleKindName,
                                           [](const Config& c) { return c.optimizer.schedule; }));
  v.push_back(owner<cmp::Method>("compression.method", namesOf(cmp::methodNames()),
                                 optionalOf(cmp::parseMethod), cmp::methodName,
                                 [](const Config& c) { return c.compression.method; }));
  v.push_back(owner<cmp::Selector>("compression.selector", namesOf(cmp::selectorNames()),
                                   optionalOf(cmp::parseSelector), cmp::selectorName,
                                   [](const Config& c) { return c.compression.selector; }));
  v.push_back(owner<cmp::Rounding>("compression.rounding", namesOf(cmp::roundingNames()),
                                   optionalOf(cmp::parseRounding), cmp::roundingName,
                                   [](const Config& c) { return c.compression.rounding; }));
  v.push_back(owner<cmp::Method>("compression.fallback",
                                 namesOf(cmp::methodNames(), cmp::isFallbackMethod),
                                 optionalOf(cmp::parseMethod), cmp::methodName,
                                 [](const Config& c) { return c.compression.fallback; }));
  v.push_back(owner<cmp::Lossless>("compression.lossless", namesOf(cmp::losslessNames()),
                                   optionalOf(cmp::parseLossless), cmp::losslessName,
                                   [](const Config& c) { return c.compression.lossless; }));
  v.push_back(owner<train::WorkloadKind>("workload.name", train::workloadKindNames(),
                                         train::parseWorkloadKind, train::workloadKindName,
                                         [](const Config& c) { return c.workload.name; }));
  v.push_back(owner<train::PartitionKind>("workload.partition", train::partitionKindNames(),
                                          train::parsePartitionKind, train::partitionKindName,
                                          [](const Config& c) { return c.workload.partition; }));
  v.push_back(owner<gv::config::Emulation>("network.emulate", gv::config::emulationNames(),
                                           gv::config::parseEmulation, gv::config::emulationName,
                                           [](const Config& c) { return c.network.emulate; }));
  // transport.backend stays a string (backends are looked up by name); its names are the
  // transport library's list.
  Owner backend;
  backend.key = "transport.backend";
  for (auto n : gv::transport::kBackendNames) backend.names.emplace_back(n);
  backend.roundTrip = [](const gv::config::KeyDef& k, const std::string& n) {
    Config c;
    REQUIRE_FALSE(k.apply(c, YAML::Node(n)).has_value());
    CHECK(c.transport.backend == n);
    CHECK(YAML::Load(k.show(c)).Scalar() == n);
  };
  v.push_back(backend);
  return v;
}

}  // namespace

TEST_CASE("every enum key's allowed values are its owning library's name table", "[config][enum]") {
  const auto all = owners();
  std::set<std::string> covered;
  for (const Owner& o : all) {
    INFO(o.key);
    covered.insert(o.key);
    const gv::config::KeyDef* k = gv::config::findKey(o.key);
    REQUIRE(k != nullptr);
    CHECK(k->type == gv::config::ValueType::kEnum);
    REQUIRE(!o.names.empty());
    CHECK(k->choices == o.names);
    for (const std::string& n : o.names) {
      INFO(n);
      o.roundTrip(*k, n);
    }
    Config c;
    CHECK(k->apply(c, YAML::Node("no-such-name")).has_value());
  }
  // Every enum key of the schema is listed above.
  for (const auto& k : gv::config::schema()) {
    if (k.type != gv::config::ValueType::kEnum) continue;
    INFO(k.path);
    CHECK(covered.count(k.path) == 1);
  }
}

TEST_CASE("low-rank is not a fallback method", "[config][enum]") {
  const gv::config::KeyDef* k = gv::config::findKey("compression.fallback");
  REQUIRE(k != nullptr);
  CHECK(std::find(k->choices.begin(), k->choices.end(), "low-rank") == k->choices.end());
  CHECK(std::find(k->choices.begin(), k->choices.end(), "top-k") != k->choices.end());
}

TEST_CASE("the transport registry registers exactly the backend names configs accept",
          "[config][enum][transport]") {
  std::set<std::string> registered;
  for (const auto& e : gv::transport::Registry::instance().entries()) registered.insert(e.name);
  const std::set<std::string> accepted(gv::transport::kBackendNames.begin(),
                                       gv::transport::kBackendNames.end());
  CHECK(registered == accepted);
}
