// Mixing weights and the checks every weight matrix must pass before a run uses it.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <unordered_map>
#include <vector>

#include "topology/topology.h"

namespace grapevine::topology {
namespace {

constexpr double kTolerance = 1e-12;

std::string fmt(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

std::uint64_t edgeKey(int a, int b) {
  if (a > b) std::swap(a, b);
  return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(a)) << 32) |
         static_cast<std::uint32_t>(b);
}

// Self weights from the rows: w_ii = 1 - sum_j w_ij.
void fillSelf(Weights& w) {
  w.self.assign(w.rows.size(), 1.0);
  for (size_t i = 0; i < w.rows.size(); ++i) {
    double sum = 0.0;
    for (const auto& [j, v] : w.rows[i]) sum += v;
    w.self[i] = 1.0 - sum;
  }
}

int maxDegree(const Graph& g) {
  int d = 0;
  for (int i = 0; i < g.n; ++i) d = std::max(d, g.degree(i));
  return d;
}

}  // namespace

Weights metropolis(const Graph& g) {
  Weights w;
  w.rows.resize(static_cast<size_t>(g.n));
  for (int i = 0; i < g.n; ++i) {
    for (int j : g.adj[static_cast<size_t>(i)]) {
      w.rows[static_cast<size_t>(i)].emplace_back(j,
                                                  1.0 / (1.0 + std::max(g.degree(i), g.degree(j))));
    }
  }
  // Each w_ij <= 1/(1 + d_i), so the self weight is at least 1/(1 + d_i) > 0.
  fillSelf(w);
  return w;
}

Weights lazy(Weights w) {
  for (double& s : w.self) s = 0.5 * (1.0 + s);
  for (auto& row : w.rows) {
    for (auto& [j, v] : row) v *= 0.5;
  }
  return w;
}

Weights uniform(const Graph& g) {
  Weights w;
  const int dmax = maxDegree(g);
  const double share = 1.0 / (dmax + 1.0);
  w.rows.resize(static_cast<size_t>(g.n));
  w.self.resize(static_cast<size_t>(g.n));
  for (int i = 0; i < g.n; ++i) {
    for (int j : g.adj[static_cast<size_t>(i)])
      w.rows[static_cast<size_t>(i)].emplace_back(j, share);
    // Computed as a ratio rather than 1 - sum, so a peer of degree d_max gets exactly 1/(d_max + 1)
    // and never a rounding-negative weight.
    w.self[static_cast<size_t>(i)] = (dmax + 1.0 - g.degree(i)) / (dmax + 1.0);
  }
  return w;
}

Result<Weights> explicitWeights(const Graph& g, const std::vector<WeightedEdge>& edges) {
  std::unordered_map<std::uint64_t, double> given;
  for (size_t k = 0; k < edges.size(); ++k) {
    const WeightedEdge& e = edges[k];
    if (!e.weight) continue;
    const std::string name = "explicit weights: entry " + std::to_string(k) + " (" +
                             std::to_string(e.a) + "-" + std::to_string(e.b) + ")";
    const double v = *e.weight;
    if (!std::isfinite(v) || v < 0.0 || v > 1.0) {
      return invalidArgument(name + " has weight " + fmt(v) + "; weights must be in [0, 1]");
    }
    if (e.a < 0 || e.a >= g.n || e.b < 0 || e.b >= g.n ||
        !std::binary_search(g.adj[static_cast<size_t>(e.a)].begin(),
                            g.adj[static_cast<size_t>(e.a)].end(), e.b)) {
      return invalidArgument(name + " is not an edge of the graph");
    }
    auto [it, inserted] = given.emplace(edgeKey(e.a, e.b), v);
    if (!inserted && it->second != v) {
      return invalidArgument(name + " repeats an edge with a different weight");
    }
  }
  Weights w = metropolis(g);
  for (int i = 0; i < g.n; ++i) {
    for (auto& [j, v] : w.rows[static_cast<size_t>(i)]) {
      auto it = given.find(edgeKey(i, j));
      if (it != given.end()) v = it->second;
    }
  }
  fillSelf(w);
  for (int i = 0; i < g.n; ++i) {
    double& self = w.self[static_cast<size_t>(i)];
    if (self < -kTolerance) {
      return invalidArgument("explicit weights: the weights on peer " + std::to_string(i) +
                             "'s edges sum to " + fmt(1.0 - self) +
                             "; they must sum to at most 1 (the rest is its self weight)");
    }
    if (self < 0.0) self = 0.0;  // rounding noise within tolerance
  }
  return w;
}

Weights metropolisOver(const Graph& g, const std::vector<std::vector<bool>>& live) {
  auto liveAt = [&](int i, size_t k) {
    return static_cast<size_t>(i) < live.size() && k < live[static_cast<size_t>(i)].size() &&
           live[static_cast<size_t>(i)][k];
  };
  // An edge is live only when both ends say so; that keeps W symmetric even if the two ends
  // disagree for a moment about a failing neighbour.
  Graph liveGraph;
  liveGraph.n = g.n;
  liveGraph.adj.resize(static_cast<size_t>(g.n));
  for (int i = 0; i < g.n; ++i) {
    const auto& row = g.adj[static_cast<size_t>(i)];
    for (size_t k = 0; k < row.size(); ++k) {
      const int j = row[k];
      if (!liveAt(i, k)) continue;
      const auto& back = g.adj[static_cast<size_t>(j)];
      const size_t kj =
          static_cast<size_t>(std::lower_bound(back.begin(), back.end(), i) - back.begin());
      if (kj < back.size() && back[kj] == i && liveAt(j, kj)) {
        liveGraph.adj[static_cast<size_t>(i)].push_back(j);
      }
    }
  }
  return metropolis(liveGraph);
}

Checks check(const Graph& g, const Weights& w) {
  Checks c;
  const size_t n = static_cast<size_t>(g.n);
  if (w.rows.size() != n || w.self.size() != n) return c;
  c.nonNegative = true;
  c.symmetric = true;
  std::vector<double> colSum(n, 0.0);
  bool rowsOk = true;
  Graph support;  // edges carrying positive weight in either direction
  support.n = g.n;
  support.adj.resize(n);
  for (size_t i = 0; i < n; ++i) {
    double rowSum = w.self[i];
    colSum[i] += w.self[i];
    if (w.self[i] < 0.0) c.nonNegative = false;
    for (const auto& [j, v] : w.rows[i]) {
      if (j < 0 || static_cast<size_t>(j) >= n) return Checks{};
      rowSum += v;
      colSum[static_cast<size_t>(j)] += v;
      if (v < 0.0) c.nonNegative = false;
      if (v > 0.0) {
        support.adj[i].push_back(j);
        support.adj[static_cast<size_t>(j)].push_back(static_cast<int>(i));
      }
      const auto& back = w.rows[static_cast<size_t>(j)];
      auto it = std::lower_bound(back.begin(), back.end(),
                                 std::pair<int, double>(static_cast<int>(i), -1e300));
      if (it == back.end() || it->first != static_cast<int>(i) ||
          std::abs(it->second - v) > kTolerance) {
        c.symmetric = false;
      }
    }
    if (std::abs(rowSum - 1.0) > kTolerance) rowsOk = false;
  }
  bool colsOk = true;
  for (double s : colSum) {
    if (std::abs(s - 1.0) > kTolerance) colsOk = false;
  }
  c.doublyStochastic = rowsOk && colsOk && c.nonNegative;
  for (auto& row : support.adj) {
    std::sort(row.begin(), row.end());
    row.erase(std::unique(row.begin(), row.end()), row.end());
  }
  c.connected = isConnected(support);
  return c;
}

}  // namespace grapevine::topology
