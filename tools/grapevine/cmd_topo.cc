// `grapevine topo`: build a topology from a config file or from flags and print its analysis
// (degrees, diameter, spectral gap, per-round cost) as text, one JSON object, or Graphviz.
//
//   grapevine topo CONFIG [flags]       flags override the config's topology:/peers: sections
//   grapevine topo --kind KIND --peers N [--dims R,C[,D]] [--degree D] [--probability P] [--seed S]
//                  [--weights metropolis|uniform] [--json | --dot [--round T]]
//
// A torus takes --peers, --dims or both: --dims alone implies --peers (their product), --peers
// alone gets the dims a config would get (topology::squarestTorusDims), both must agree.
//
// Exit codes: 0 ok, 2 bad flags / config / a topology that cannot be built, 1 anything else.
#include <algorithm>
#include <exception>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "tools/grapevine/command.h"
#include "tools/grapevine/load_config.h"
#include "topology/spec.h"
#include "topology/topology.h"

namespace grapevine::cli {
namespace {

struct TopoOptions {
  std::string config;
  std::string kind;
  int peers = 0;
  std::string dims;
  int degree = 0;
  double probability = 0.0;
  std::uint64_t seed = 1;
  std::string weights;
  bool json = false;
  bool dot = false;
  std::int64_t round = 0;
};

std::string joinNames(const std::vector<std::string_view>& names) {
  std::string s;
  for (size_t i = 0; i < names.size(); ++i) {
    if (i) s += ", ";
    s += names[i];
  }
  return s;
}

// "4,4", "4x4" or "2,4,4" -> sizes; an empty result means it did not parse.
std::vector<int> parseDims(const std::string& text) {
  std::vector<int> dims;
  std::string cur;
  auto flush = [&]() -> bool {
    if (cur.empty()) return false;
    for (char c : cur) {
      if (c < '0' || c > '9') return false;
      if (cur.size() > 7) return false;
    }
    dims.push_back(std::stoi(cur));
    cur.clear();
    return true;
  };
  for (char c : text) {
    if (c == ',' || c == 'x' || c == 'X') {
      if (!flush()) return {};
    } else if (c != ' ') {
      cur += c;
    }
  }
  if (!flush()) return {};
  return dims;
}

int badInput(const std::string& message) {
  std::cerr << "grapevine topo: " << message << "\n";
  return kExitBadInput;
}

int runTopo(const TopoOptions& o, const CLI::App& app) {
  auto given = [&](const char* flag) { return app.count(flag) > 0; };
  topology::Spec spec;
  bool hasPeers = false;
  if (!o.config.empty()) {
    auto c = loadConfig(o.config, {});
    if (!c.isOk()) return kExitBadInput;
    spec = c->topologySpec();
    hasPeers = true;
  } else if (!given("--kind") || !(given("--peers") || given("--dims"))) {
    return badInput(
        "give a CONFIG file or both --kind and --peers (e.g. --kind ring --peers 8; a torus may "
        "give --dims R,C instead of --peers)");
  }

  if (given("--kind")) {
    auto k = topology::parseKind(o.kind);
    if (!k) {
      return badInput("unknown kind '" + o.kind +
                      "'; expected one of: " + joinNames(topology::kindNames()));
    }
    spec.kind = *k;
  }
  if (given("--peers")) {
    if (o.peers < 1) return badInput("--peers must be at least 1, got " + std::to_string(o.peers));
    spec.peers = o.peers;
    hasPeers = true;
  }
  if (given("--weights")) {
    auto w = topology::parseWeights(o.weights);
    if (!w) {
      return badInput("unknown weights '" + o.weights +
                      "'; expected one of: " + joinNames(topology::weightsNames()));
    }
    spec.weights = *w;
  }
  const std::string kind(topology::kindName(spec.kind));
  // A flag that the kind ignores is almost always a typo in --kind: say so instead of ignoring it.
  if (given("--dims")) {
    if (spec.kind != topology::Kind::kTorus)
      return badInput("--dims only applies to --kind torus, not " + kind);
    spec.dims = parseDims(o.dims);
    if (spec.dims.size() != 2 && spec.dims.size() != 3) {
      return badInput("--dims expects R,C or R,C,D (e.g. --dims 4,4), got '" + o.dims + "'");
    }
    // Without a config or --peers the dims say how many peers there are (a mismatch with a given
    // count is makeSchedule's error below).
    if (!hasPeers) {
      long long product = 1;
      for (int d : spec.dims) product = std::min<long long>(product * d, 1LL << 30);
      spec.peers = static_cast<int>(product);
      hasPeers = true;
    }
  }
  if (!hasPeers) return badInput("give --peers N");
  if (given("--degree")) {
    if (spec.kind != topology::Kind::kRandomRegular) {
      return badInput("--degree only applies to --kind random-regular, not " + kind);
    }
    spec.degree = o.degree;
  }
  if (given("--probability")) {
    if (spec.kind != topology::Kind::kErdosRenyi) {
      return badInput("--probability only applies to --kind erdos-renyi, not " + kind);
    }
    spec.probability = o.probability;
  }
  if (given("--seed")) {
    if (spec.kind != topology::Kind::kRandomRegular && spec.kind != topology::Kind::kErdosRenyi) {
      return badInput("--seed only applies to --kind random-regular or erdos-renyi, not " + kind);
    }
    spec.seed = o.seed;
  }
  // A torus without dims (flags only, or --kind torus over a config of another kind) gets the same
  // default as a config without topology.dims.
  if (spec.kind == topology::Kind::kTorus && spec.dims.empty()) {
    spec.dims = topology::squarestTorusDims(spec.peers);
    if (spec.dims.empty()) {
      return badInput("--kind torus needs --dims R,C or R,C,D: " + std::to_string(spec.peers) +
                      " peers have no a x b factorisation with a, b >= 2");
    }
  }
  // Parameters without a config default must come from a flag.
  if (o.config.empty()) {
    if (spec.kind == topology::Kind::kRandomRegular && !given("--degree")) {
      return badInput("--kind random-regular needs --degree D");
    }
    if (spec.kind == topology::Kind::kErdosRenyi && !given("--probability")) {
      return badInput("--kind erdos-renyi needs --probability P");
    }
    if (spec.kind == topology::Kind::kEdges) {
      return badInput("--kind edges needs an edge list: give it in a CONFIG file (topology.edges)");
    }
  }
  if (given("--round") && !o.dot) return badInput("--round only applies to --dot");

  auto schedule = topology::makeSchedule(spec);
  if (!schedule.isOk()) return badInput(schedule.status().message());

  if (o.dot) {
    std::cout << topology::toDot(**schedule, o.round);
    return kExitOk;
  }
  const topology::Analysis a = topology::analyze(**schedule, spec);
  std::cout << (o.json ? topology::toJson(a) + "\n" : topology::toText(a));
  // makeSchedule only builds connected, doubly-stochastic schedules (directed ones: connected,
  // row stochastic); anything else is a bug.
  return a.connected && (a.doublyStochastic || a.directed) ? kExitOk : kExitFailure;
}

}  // namespace

Command registerTopo(CLI::App& root) {
  auto opts = std::make_shared<TopoOptions>();
  CLI::App* app = root.add_subcommand(
      "topo",
      "Build a topology and print its analysis: degrees, diameter, spectral gap, cost per round");
  app->add_option("config", opts->config, "YAML config; its topology: and peers: sections are read")
      ->check(CLI::ExistingFile);
  app->add_option("--kind", opts->kind,
                  "ring | torus | random-regular | erdos-renyi | exponential | "
                  "one-peer-exponential | complete | edges");
  app->add_option(
      "--peers", opts->peers,
      "number of peers (a torus without --dims gets the squarest R x C, like a config)");
  app->add_option("--dims", opts->dims,
                  "torus sizes R,C or R,C,D (product = peers; implies --peers)");
  app->add_option("--degree", opts->degree, "random-regular: degree of every peer");
  app->add_option("--probability", opts->probability, "erdos-renyi: edge probability");
  app->add_option("--seed", opts->seed, "random kinds: seed (the same seed gives the same graph)");
  app->add_option("--weights", opts->weights,
                  "metropolis | uniform (explicit: from a CONFIG edge list)");
  auto* json =
      app->add_flag("--json", opts->json, "print one JSON object (fields in docs/topologies.md)");
  auto* dot = app->add_flag("--dot", opts->dot, "print the round's graph and weights for Graphviz");
  json->excludes(dot);
  app->add_option("--round", opts->round, "with --dot: which round to draw (time-varying kinds)");
  return Command{app, [opts, app] { return runTopo(*opts, *app); }};
}

}  // namespace grapevine::cli
