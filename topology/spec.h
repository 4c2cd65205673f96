// What a user asks for: the plain description of a topology, as read from the config's `topology:`
// section or from `grapevine topo` flags. Pure data; building and analysing it is in topology.h.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

namespace grapevine::topology {

enum class Kind {
  kRing,
  kTorus,               // dims: 2 or 3 sizes
  kRandomRegular,       // degree, seed
  kErdosRenyi,          // probability, seed
  kExponential,         // static: i <-> i +- 2^k
  kOnePeerExponential,  // time-varying: round t, i talks to i + 2^(t mod log2 n)
  kComplete,
  kEdges,  // explicit edge list
};

// kLazyMetropolis: (I + W_metropolis) / 2, every eigenvalue in [0, 1] (Metropolis weights on a ring
// reach down to -1/3, the mode that oscillates first under heavy momentum).
enum class WeightsKind { kMetropolis, kUniform, kExplicit, kLazyMetropolis };

struct WeightedEdge {
  int a = 0;
  int b = 0;
  std::optional<double> weight;  // only with WeightsKind::kExplicit
};

struct Spec {
  Kind kind = Kind::kRing;
  int peers = 0;
  std::vector<int> dims;     // kTorus
  int degree = 0;            // kRandomRegular
  double probability = 0.0;  // kErdosRenyi
  std::uint64_t seed = 1;    // random kinds
  WeightsKind weights = WeightsKind::kMetropolis;
  std::vector<WeightedEdge> edges;  // kEdges
  // kEdges only: [a, b] means a sends to b (and b does not send to a unless [b, a] is listed too).
  // Row i of the weights then holds i's in-neighbours at 1/(in_degree_i + 1): row stochastic, not
  // column stochastic, so only push-sum (which uses its own column weights) can run on it.
  bool directed = false;
};

// Names as they appear in configs and flags: "ring", "torus", "random-regular", "erdos-renyi",
// "exponential", "one-peer-exponential", "complete", "edges"; "metropolis", "uniform", "explicit",
// "lazy-metropolis".
std::string_view kindName(Kind kind);
std::optional<Kind> parseKind(std::string_view name);
std::string_view weightsName(WeightsKind kind);
std::optional<WeightsKind> parseWeights(std::string_view name);
// Every kind name, in declaration order (for "expected one of ..." messages and docs).
const std::vector<std::string_view>& kindNames();
const std::vector<std::string_view>& weightsNames();

}  // namespace grapevine::topology
