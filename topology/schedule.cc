// Round schedules: the static one (same graph and weights every round) and the one-peer exponential
// one (a directed shift by 2^(t mod tau) each round), and makeSchedule() that builds either from a
// Spec.
#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "topology/topology.h"

namespace grapevine::topology {
namespace {

std::string joinDims(const std::vector<int>& dims) {
  std::string s;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i) s += 'x';
    s += std::to_string(dims[i]);
  }
  return s;
}

std::int64_t roundIndex(std::int64_t round, int period) {
  const std::int64_t r = round % period;
  return r < 0 ? r + period : r;
}

class StaticSchedule final : public Schedule {
 public:
  StaticSchedule(Graph g, Weights w) : graph_(std::move(g)), weights_(std::move(w)) {}
  int peers() const override { return graph_.n; }
  int period() const override { return 1; }
  const Graph& graph(std::int64_t) const override { return graph_; }
  const Weights& weights(std::int64_t) const override { return weights_; }

 private:
  Graph graph_;
  Weights weights_;
};

// Round t (k = t mod tau, tau = ceil(log2 n)): peer i sends to i + 2^k and receives from i - 2^k,
// keeping 1/2 of its own value and taking 1/2 of the received one. W_t = (I + P^(2^k)) / 2 with P
// the cyclic shift: doubly stochastic, not symmetric (except when 2^k = n/2). For n a power of two
// the product over one period is exactly the averaging matrix J = 11^T/n.
class OnePeerExponentialSchedule final : public Schedule {
 public:
  explicit OnePeerExponentialSchedule(int n) {
    int tau = 0;
    while ((std::int64_t{1} << tau) < n) ++tau;
    tau = std::max(tau, 1);
    for (int k = 0; k < tau; ++k) {
      const int hop = n > 1 ? static_cast<int>((std::int64_t{1} << k) % n) : 0;
      Graph g;
      g.n = n;
      g.adj.resize(static_cast<size_t>(n));
      Weights w;
      w.rows.resize(static_cast<size_t>(n));
      w.self.assign(static_cast<size_t>(n), n > 1 ? 0.5 : 1.0);
      for (int i = 0; i < n && n > 1; ++i) {
        const int to = (i + hop) % n;
        const int from = (i - hop + n) % n;
        g.adj[static_cast<size_t>(i)] = {to, from};
        auto& row = g.adj[static_cast<size_t>(i)];
        std::sort(row.begin(), row.end());
        row.erase(std::unique(row.begin(), row.end()), row.end());
        w.rows[static_cast<size_t>(i)].emplace_back(from, 0.5);
      }
      graphs_.push_back(std::move(g));
      weights_.push_back(std::move(w));
    }
  }
  int peers() const override { return graphs_.front().n; }
  int period() const override { return static_cast<int>(graphs_.size()); }
  const Graph& graph(std::int64_t round) const override {
    return graphs_[static_cast<size_t>(roundIndex(round, period()))];
  }
  const Weights& weights(std::int64_t round) const override {
    return weights_[static_cast<size_t>(roundIndex(round, period()))];
  }

 private:
  std::vector<Graph> graphs_;
  std::vector<Weights> weights_;
};

// topology.directed: [a, b] means a sends to b. The round graph is the undirected support (whom a
// peer has a connection with); row i of the weights holds i's in-neighbours at 1/(in_degree + 1),
// so Schedule::plan() gives sendTo = out-neighbours and recvFrom = in-neighbours. Row stochastic
// only: plain gossip on it converges to a weighted average, push-sum ignores these weights.
Result<std::unique_ptr<Schedule>> makeDirectedSchedule(const Spec& spec) {
  const int n = spec.peers;
  std::vector<std::vector<int>> in(static_cast<size_t>(n));
  std::vector<std::pair<int, int>> seen;
  Graph g;
  g.n = n;
  g.adj.resize(static_cast<size_t>(n));
  for (size_t k = 0; k < spec.edges.size(); ++k) {
    const WeightedEdge& e = spec.edges[k];
    const std::string name = "edges: entry " + std::to_string(k) + " (" + std::to_string(e.a) +
                             " -> " + std::to_string(e.b) + ")";
    if (e.a < 0 || e.a >= n || e.b < 0 || e.b >= n) {
      return invalidArgument(name + " names a peer outside 0.." + std::to_string(n - 1));
    }
    if (e.a == e.b) return invalidArgument(name + " is a self loop");
    if (std::find(seen.begin(), seen.end(), std::make_pair(e.a, e.b)) != seen.end()) {
      return invalidArgument(name + " is listed twice");
    }
    seen.emplace_back(e.a, e.b);
    in[static_cast<size_t>(e.b)].push_back(e.a);
    g.adj[static_cast<size_t>(e.a)].push_back(e.b);
    g.adj[static_cast<size_t>(e.b)].push_back(e.a);
  }
  Weights w;
  w.rows.resize(static_cast<size_t>(n));
  w.self.resize(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    auto& row = g.adj[static_cast<size_t>(i)];
    std::sort(row.begin(), row.end());
    row.erase(std::unique(row.begin(), row.end()), row.end());
    auto& from = in[static_cast<size_t>(i)];
    std::sort(from.begin(), from.end());
    const double share = 1.0 / (static_cast<double>(from.size()) + 1.0);
    w.self[static_cast<size_t>(i)] = share;
    for (int j : from) w.rows[static_cast<size_t>(i)].emplace_back(j, share);
  }
  if (!isConnected(g)) {
    return invalidArgument("edges: the directed graph on " + std::to_string(n) +
                           " peers is disconnected even ignoring directions; every peer must "
                           "reach every other (add edges)");
  }
  return std::unique_ptr<Schedule>(new StaticSchedule(std::move(g), std::move(w)));
}

Result<Graph> buildGraph(const Spec& spec) {
  switch (spec.kind) {
    case Kind::kRing:
      return ring(spec.peers);
    case Kind::kTorus: {
      GV_ASSIGN_OR_RETURN(Graph g, torus(spec.dims));
      if (g.n != spec.peers) {
        return invalidArgument("torus: dims " + joinDims(spec.dims) + " give " +
                               std::to_string(g.n) + " peers but peers is " +
                               std::to_string(spec.peers));
      }
      return g;
    }
    case Kind::kRandomRegular:
      return randomRegular(spec.peers, spec.degree, spec.seed);
    case Kind::kErdosRenyi:
      return erdosRenyi(spec.peers, spec.probability, spec.seed);
    case Kind::kExponential:
      return exponential(spec.peers);
    case Kind::kComplete:
      return complete(spec.peers);
    case Kind::kEdges:
      return fromEdges(spec.peers, spec.edges);
    case Kind::kOnePeerExponential:
      break;
  }
  return internalError("topology: no static graph for kind " + std::string(kindName(spec.kind)));
}

}  // namespace

PeerPlan Schedule::plan(int peer, std::int64_t round) const {
  PeerPlan p;
  if (peer < 0 || peer >= peers()) return p;  // precondition violated: an empty plan, self weight 1
  const Graph& g = graph(round);
  const Weights& w = weights(round);
  const auto& row = w.rows[static_cast<size_t>(peer)];
  p.weights = row;
  p.selfWeight = w.self[static_cast<size_t>(peer)];
  for (const auto& [j, v] : row) p.recvFrom.push_back(j);
  // Peer sends to every round neighbour whose row names it. The round graph is the undirected
  // support of W, so the candidates are its neighbours there.
  for (int j : g.adj[static_cast<size_t>(peer)]) {
    const auto& back = w.rows[static_cast<size_t>(j)];
    auto it =
        std::lower_bound(back.begin(), back.end(), peer,
                         [](const std::pair<int, double>& e, int key) { return e.first < key; });
    if (it != back.end() && it->first == peer) p.sendTo.push_back(j);
  }
  return p;
}

std::vector<int> Schedule::allNeighbours(int peer) const {
  std::vector<int> out;
  for (int t = 0; t < period(); ++t) {
    PeerPlan p = plan(peer, t);
    out.insert(out.end(), p.sendTo.begin(), p.sendTo.end());
    out.insert(out.end(), p.recvFrom.begin(), p.recvFrom.end());
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

// The most peer pairs makeSchedule visits to build a graph: complete and erdos-renyi visit
// peers * (peers - 1) / 2, random-regular peers * degree / 2 (all pairs when degree >= peers / 2).
// Above it the spec is refused (kInvalidArgument): at most 2896 peers on complete.
constexpr std::uint64_t kMaxPeerPairs = std::uint64_t{1} << 22;

Result<std::unique_ptr<Schedule>> makeSchedule(const Spec& spec) {
  const std::string kind(kindName(spec.kind));
  if (spec.peers < 1) {
    return invalidArgument(kind + ": peers must be at least 1, got " + std::to_string(spec.peers));
  }
  // Building complete and Erdos-Renyi graphs visits every peer pair, a dense random-regular one
  // too: refuse what cannot be built in bounded time and memory (20000 peers on `complete` made
  // `grapevine validate` of a 3-line config take gigabytes; found writing fuzz/fuzz_yaml_loader).
  const auto n = static_cast<std::uint64_t>(spec.peers);
  const auto degree = static_cast<std::uint64_t>(std::max(spec.degree, 0));
  std::uint64_t pairs = 0;
  if (spec.kind == Kind::kComplete || spec.kind == Kind::kErdosRenyi ||
      (spec.kind == Kind::kRandomRegular && 2 * degree >= n)) {
    pairs = n * (n - 1) / 2;
  } else if (spec.kind == Kind::kRandomRegular) {
    pairs = n * degree / 2;
  }
  if (pairs > kMaxPeerPairs) {
    return invalidArgument(kind + ": " + std::to_string(spec.peers) + " peers make " +
                           std::to_string(pairs) + " peer pairs to build, above the limit of " +
                           std::to_string(kMaxPeerPairs) +
                           "; use a sparser kind (exponential, random-regular with a small "
                           "degree, torus)");
  }
  const bool anyEdgeWeight =
      std::any_of(spec.edges.begin(), spec.edges.end(),
                  [](const WeightedEdge& e) { return e.weight.has_value(); });
  if (spec.weights == WeightsKind::kExplicit && spec.kind != Kind::kEdges) {
    return invalidArgument(kind +
                           ": weights 'explicit' need kind 'edges' (the weights come from "
                           "the edge list); use metropolis or uniform");
  }
  if (spec.kind == Kind::kEdges && anyEdgeWeight && spec.weights != WeightsKind::kExplicit) {
    return invalidArgument("edges: the edge list has per-edge weights but weights is '" +
                           std::string(weightsName(spec.weights)) + "'; set weights to 'explicit'");
  }
  if (spec.weights == WeightsKind::kLazyMetropolis &&
      (spec.directed || spec.kind == Kind::kOnePeerExponential)) {
    return invalidArgument(
        kind + ": weights 'lazy-metropolis' need an undirected graph with Metropolis weights; " +
        (spec.directed ? "a directed graph's weights are push-sum's 1/(out_degree + 1)"
                       : "one-peer-exponential's weights are fixed at 1/2 (self) + 1/2 (the one "
                         "in-neighbour)") +
        "; use weights metropolis");
  }
  if (spec.directed) {
    if (spec.kind != Kind::kEdges) {
      return invalidArgument(kind + ": directed: true needs kind 'edges' ([a, b]: a sends to b)");
    }
    if (spec.weights == WeightsKind::kExplicit) {
      return invalidArgument(
          "edges: directed graphs take no explicit weights (push-sum uses 1/(out_degree + 1) "
          "column weights); use weights metropolis or uniform");
    }
    return makeDirectedSchedule(spec);
  }
  if (spec.kind == Kind::kOnePeerExponential) {
    // Weights are fixed at 1/2 (self) + 1/2 (the one in-neighbour). That is what Metropolis and
    // uniform both give on a graph where every peer has one in- and one out-neighbour, so either
    // name is accepted.
    return std::unique_ptr<Schedule>(new OnePeerExponentialSchedule(spec.peers));
  }
  GV_ASSIGN_OR_RETURN(Graph g, buildGraph(spec));
  Weights w;
  switch (spec.weights) {
    case WeightsKind::kMetropolis:
      w = metropolis(g);
      break;
    case WeightsKind::kUniform:
      w = uniform(g);
      break;
    case WeightsKind::kLazyMetropolis:
      w = lazy(metropolis(g));
      break;
    case WeightsKind::kExplicit: {
      GV_ASSIGN_OR_RETURN(w, explicitWeights(g, spec.edges));
      break;
    }
  }
  const Checks c = check(g, w);
  if (!isConnected(g)) {
    return invalidArgument(kind + ": the graph on " + std::to_string(g.n) +
                           " peers is disconnected; every peer must reach every other (add edges)");
  }
  if (!c.connected) {
    return invalidArgument(kind +
                           ": the edges with positive weight leave the graph disconnected; "
                           "raise the zero weights");
  }
  if (!c.doublyStochastic || !c.symmetric) {
    return invalidArgument(kind + ": the mixing weights are not symmetric and doubly stochastic");
  }
  return std::unique_ptr<Schedule>(new StaticSchedule(std::move(g), std::move(w)));
}

}  // namespace grapevine::topology
