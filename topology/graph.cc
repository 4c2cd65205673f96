// Graph generators and graph-only queries (connectivity, diameter).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "topology/random.h"
#include "topology/topology.h"

namespace grapevine::topology {
namespace {

using detail::uniform01;
using detail::uniformBelow;

std::string fmt(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

std::string joinDims(const std::vector<int>& dims) {
  std::string s;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i) s += 'x';
    s += std::to_string(dims[i]);
  }
  return s;
}

Status checkPeers(const char* kind, int n, int min = 1) {
  if (n < min) {
    return invalidArgument(std::string(kind) + ": needs at least " + std::to_string(min) + " peer" +
                           (min == 1 ? "" : "s") + ", got " + std::to_string(n));
  }
  return Status::ok();
}

// Builds a simple graph from pairs that may repeat or come in both orientations; drops duplicates.
Graph fromPairs(int n, const std::vector<std::pair<int, int>>& pairs) {
  Graph g;
  g.n = n;
  g.adj.assign(static_cast<size_t>(n), {});
  for (const auto& [a, b] : pairs) {
    if (a == b) continue;
    g.adj[static_cast<size_t>(a)].push_back(b);
    g.adj[static_cast<size_t>(b)].push_back(a);
  }
  for (auto& row : g.adj) {
    std::sort(row.begin(), row.end());
    row.erase(std::unique(row.begin(), row.end()), row.end());
  }
  return g;
}

std::uint64_t edgeKey(int a, int b) {
  if (a > b) std::swap(a, b);
  return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(a)) << 32) |
         static_cast<std::uint32_t>(b);
}

// Component label of each vertex (labels 0..count-1 in order of their smallest vertex).
int components(const std::vector<std::vector<int>>& adj, std::vector<int>& label) {
  const int n = static_cast<int>(adj.size());
  label.assign(static_cast<size_t>(n), -1);
  int count = 0;
  std::vector<int> stack;
  for (int s = 0; s < n; ++s) {
    if (label[static_cast<size_t>(s)] >= 0) continue;
    label[static_cast<size_t>(s)] = count;
    stack.push_back(s);
    while (!stack.empty()) {
      const int u = stack.back();
      stack.pop_back();
      for (int v : adj[static_cast<size_t>(u)]) {
        if (label[static_cast<size_t>(v)] < 0) {
          label[static_cast<size_t>(v)] = count;
          stack.push_back(v);
        }
      }
    }
    ++count;
  }
  return count;
}

// A simple d-regular graph (not necessarily connected) by pairing stubs at random, rejecting pairs
// that would make a loop or a double edge, and restarting when only such pairs remain. Fine for
// d <= (n-1)/2 (the caller takes complements above that). Unsorted adjacency; empty on failure.
std::vector<std::vector<int>> pairStubs(int n, int d, std::mt19937_64& rng) {
  constexpr int kRestarts = 1000;
  constexpr int kBlindFailures = 100;
  for (int attempt = 0; attempt < kRestarts; ++attempt) {
    std::vector<int> stubs;
    stubs.reserve(static_cast<size_t>(n) * static_cast<size_t>(d));
    for (int v = 0; v < n; ++v) stubs.insert(stubs.end(), static_cast<size_t>(d), v);
    std::vector<std::vector<int>> adj(static_cast<size_t>(n));
    std::unordered_set<std::uint64_t> edges;
    edges.reserve(stubs.size());
    bool stuck = false;
    int failures = 0;
    auto take = [&](size_t i, size_t j) {  // i != j, indices into stubs
      const int u = stubs[i], v = stubs[j];
      adj[static_cast<size_t>(u)].push_back(v);
      adj[static_cast<size_t>(v)].push_back(u);
      edges.insert(edgeKey(u, v));
      // Swap-remove the larger index first so the smaller one stays valid.
      const size_t hi = std::max(i, j), lo = std::min(i, j);
      stubs[hi] = stubs.back();
      stubs.pop_back();
      stubs[lo] = stubs.back();
      stubs.pop_back();
    };
    while (!stubs.empty() && !stuck) {
      const size_t r = stubs.size();
      size_t i = uniformBelow(rng, r);
      size_t j = uniformBelow(rng, r - 1);
      if (j >= i) ++j;
      const int u = stubs[i], v = stubs[j];
      if (u != v && !edges.count(edgeKey(u, v))) {
        take(i, j);
        failures = 0;
        continue;
      }
      if (++failures < kBlindFailures) continue;
      // Many misses in a row: list the valid pairs that remain and pick one, or restart if none.
      std::vector<std::pair<size_t, size_t>> valid;
      for (size_t a = 0; a < r; ++a) {
        for (size_t b = a + 1; b < r; ++b) {
          if (stubs[a] != stubs[b] && !edges.count(edgeKey(stubs[a], stubs[b]))) {
            valid.emplace_back(a, b);
          }
        }
      }
      if (valid.empty()) {
        stuck = true;
      } else {
        const auto [a, b] = valid[uniformBelow(rng, valid.size())];
        take(a, b);
        failures = 0;
      }
    }
    if (!stuck) return adj;
  }
  return {};
}

// Joins the components of a d-regular graph (d >= 2) with degree-preserving double-edge swaps:
// edge a-b in the first component and c-d in another become a-c and b-d. The swap joins the two
// components unless both removed edges were bridges; then it is undone and another pair is tried.
bool repairConnectivity(std::vector<std::vector<int>>& adj, std::mt19937_64& rng) {
  auto removeEdge = [&](int a, int b) {
    auto& ra = adj[static_cast<size_t>(a)];
    ra.erase(std::find(ra.begin(), ra.end(), b));
    auto& rb = adj[static_cast<size_t>(b)];
    rb.erase(std::find(rb.begin(), rb.end(), a));
  };
  auto addEdge = [&](int a, int b) {
    adj[static_cast<size_t>(a)].push_back(b);
    adj[static_cast<size_t>(b)].push_back(a);
  };
  auto edgesOf = [&](const std::vector<int>& label, int comp) {
    std::vector<std::pair<int, int>> out;
    for (int u = 0; u < static_cast<int>(adj.size()); ++u) {
      if (label[static_cast<size_t>(u)] != comp) continue;
      std::vector<int> row = adj[static_cast<size_t>(u)];
      std::sort(row.begin(), row.end());  // deterministic order, independent of history
      for (int v : row) {
        if (u < v) out.emplace_back(u, v);
      }
    }
    return out;
  };
  std::vector<int> label;
  int count = components(adj, label);
  constexpr int kTriesPerJoin = 1000;
  while (count > 1) {
    const std::vector<std::pair<int, int>> first = edgesOf(label, 0);
    const std::vector<std::pair<int, int>> other = edgesOf(label, 1);
    if (first.empty() || other.empty()) return false;
    bool joined = false;
    for (int t = 0; t < kTriesPerJoin && !joined; ++t) {
      auto [a, b] = first[uniformBelow(rng, first.size())];
      auto [c, d] = other[uniformBelow(rng, other.size())];
      if (rng() & 1) std::swap(c, d);  // both pairings are valid; pick one at random
      removeEdge(a, b);
      removeEdge(c, d);
      addEdge(a, c);
      addEdge(b, d);
      std::vector<int> newLabel;
      const int newCount = components(adj, newLabel);
      if (newCount < count) {
        count = newCount;
        label = std::move(newLabel);
        joined = true;
      } else {
        removeEdge(a, c);
        removeEdge(b, d);
        addEdge(a, b);
        addEdge(c, d);
      }
    }
    if (!joined) return false;
  }
  return true;
}

}  // namespace

std::int64_t Graph::edgeCount() const {
  std::int64_t sum = 0;
  for (const auto& row : adj) sum += static_cast<std::int64_t>(row.size());
  return sum / 2;
}

Result<Graph> ring(int n) {
  GV_RETURN_IF_ERROR(checkPeers("ring", n));
  std::vector<std::pair<int, int>> pairs;
  for (int i = 0; i < n; ++i) pairs.emplace_back(i, (i + 1) % n);
  return fromPairs(n, pairs);  // n == 2: the two pairs are one edge; n == 1: a loop, dropped
}

Result<Graph> torus(const std::vector<int>& dims) {
  if (dims.size() != 2 && dims.size() != 3) {
    return invalidArgument("torus: needs 2 or 3 dims (e.g. 4x4 or 2x4x4), got " +
                           std::to_string(dims.size()) +
                           (dims.empty() ? "" : " (" + joinDims(dims) + ")"));
  }
  std::int64_t total = 1;
  for (int d : dims) {
    if (d < 2) {
      return invalidArgument("torus: every dim must be at least 2, got " + joinDims(dims) +
                             " (drop a size-1 dim instead)");
    }
    total *= d;
    if (total > (1 << 24)) {
      return invalidArgument("torus: dims " + joinDims(dims) + " give too many peers");
    }
  }
  const int n = static_cast<int>(total);
  const int nx = dims[0], ny = dims[1], nz = dims.size() == 3 ? dims[2] : 1;
  auto index = [&](int x, int y, int z) { return (x * ny + y) * nz + z; };
  std::vector<std::pair<int, int>> pairs;
  for (int x = 0; x < nx; ++x) {
    for (int y = 0; y < ny; ++y) {
      for (int z = 0; z < nz; ++z) {
        const int i = index(x, y, z);
        // +1 neighbour in each dim; the -1 neighbour is some other vertex's +1. A size-2 dim makes
        // +1 and -1 the same vertex: fromPairs keeps that edge once.
        pairs.emplace_back(i, index((x + 1) % nx, y, z));
        pairs.emplace_back(i, index(x, (y + 1) % ny, z));
        if (dims.size() == 3) pairs.emplace_back(i, index(x, y, (z + 1) % nz));
      }
    }
  }
  return fromPairs(n, pairs);
}

std::vector<int> squarestTorusDims(int peers) {
  for (int a = static_cast<int>(std::sqrt(static_cast<double>(std::max(peers, 0)))); a >= 2; --a) {
    if (peers % a == 0) return {a, peers / a};
  }
  return {};
}

Result<Graph> randomRegular(int n, int degree, std::uint64_t seed) {
  GV_RETURN_IF_ERROR(checkPeers("random-regular", n, 2));
  if (degree < 1 || degree > n - 1) {
    return invalidArgument("random-regular: degree must be in 1.." + std::to_string(n - 1) +
                           " for " + std::to_string(n) + " peers, got " + std::to_string(degree));
  }
  if ((static_cast<std::int64_t>(n) * degree) % 2 != 0) {
    return invalidArgument("random-regular: peers * degree must be even, got " + std::to_string(n) +
                           " * " + std::to_string(degree));
  }
  if (degree == 1 && n > 2) {
    return invalidArgument("random-regular: degree 1 on " + std::to_string(n) +
                           " peers is a matching and cannot be connected; use degree >= 2");
  }
  std::mt19937_64 rng(seed);
  if (2 * degree >= n) {
    // Dense: the complement is sparse, and any graph with minimum degree >= n/2 is connected.
    const int coDegree = n - 1 - degree;
    std::vector<std::vector<int>> co(static_cast<size_t>(n));
    if (coDegree > 0) co = pairStubs(n, coDegree, rng);
    if (co.empty()) {
      return internalError("random-regular: could not pair stubs for degree " +
                           std::to_string(degree) + " on " + std::to_string(n) + " peers");
    }
    std::vector<std::pair<int, int>> pairs;
    for (int i = 0; i < n; ++i) {
      std::vector<bool> absent(static_cast<size_t>(n), true);
      for (int j : co[static_cast<size_t>(i)]) absent[static_cast<size_t>(j)] = false;
      for (int j = i + 1; j < n; ++j) {
        if (absent[static_cast<size_t>(j)]) pairs.emplace_back(i, j);
      }
    }
    return fromPairs(n, pairs);
  }
  std::vector<std::vector<int>> adj = pairStubs(n, degree, rng);
  if (adj.empty()) {
    return internalError("random-regular: could not pair stubs for degree " +
                         std::to_string(degree) + " on " + std::to_string(n) + " peers");
  }
  if (!repairConnectivity(adj, rng)) {
    return internalError("random-regular: could not join the components (seed " +
                         std::to_string(seed) + ")");
  }
  Graph g;
  g.n = n;
  g.adj = std::move(adj);
  for (auto& row : g.adj) std::sort(row.begin(), row.end());
  return g;
}

Result<Graph> erdosRenyi(int n, double p, std::uint64_t seed) {
  GV_RETURN_IF_ERROR(checkPeers("erdos-renyi", n));
  if (!(p > 0.0 && p <= 1.0)) {
    return invalidArgument("erdos-renyi: probability must be in (0, 1], got " + fmt(p));
  }
  constexpr int kTries = 100;
  std::mt19937_64 rng(seed);
  for (int t = 0; t < kTries; ++t) {
    std::vector<std::pair<int, int>> pairs;
    for (int i = 0; i < n; ++i) {
      for (int j = i + 1; j < n; ++j) {
        if (uniform01(rng) < p) pairs.emplace_back(i, j);
      }
    }
    Graph g = fromPairs(n, pairs);
    if (isConnected(g)) return g;
  }
  return invalidArgument("erdos-renyi: graph with p=" + fmt(p) + " on " + std::to_string(n) +
                         " peers is disconnected after " + std::to_string(kTries) +
                         " tries with seed " + std::to_string(seed) + "; raise probability");
}

Result<Graph> exponential(int n) {
  GV_RETURN_IF_ERROR(checkPeers("exponential", n));
  std::vector<std::pair<int, int>> pairs;
  for (std::int64_t hop = 1; hop < n; hop *= 2) {
    for (int i = 0; i < n; ++i) pairs.emplace_back(i, static_cast<int>((i + hop) % n));
  }
  return fromPairs(n, pairs);
}

Result<Graph> complete(int n) {
  GV_RETURN_IF_ERROR(checkPeers("complete", n));
  Graph g;
  g.n = n;
  g.adj.assign(static_cast<size_t>(n), {});
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < n; ++j) {
      if (i != j) g.adj[static_cast<size_t>(i)].push_back(j);
    }
  }
  return g;
}

Result<Graph> fromEdges(int n, const std::vector<WeightedEdge>& edges) {
  GV_RETURN_IF_ERROR(checkPeers("edges", n));
  std::vector<std::pair<int, int>> pairs;
  std::unordered_set<std::uint64_t> seen;
  for (size_t k = 0; k < edges.size(); ++k) {
    const WeightedEdge& e = edges[k];
    const std::string name = "edges: entry " + std::to_string(k) + " (" + std::to_string(e.a) +
                             "-" + std::to_string(e.b) + ")";
    if (e.a < 0 || e.a >= n || e.b < 0 || e.b >= n) {
      return invalidArgument(name + " names a peer outside 0.." + std::to_string(n - 1));
    }
    if (e.a == e.b) return invalidArgument(name + " is a self loop");
    if (!seen.insert(edgeKey(e.a, e.b)).second) return invalidArgument(name + " is listed twice");
    pairs.emplace_back(e.a, e.b);
  }
  return fromPairs(n, pairs);
}

bool isStronglyConnected(const std::vector<std::vector<int>>& out) {
  const std::size_t n = out.size();
  if (n <= 1) return true;
  std::vector<std::vector<int>> in(n);
  for (std::size_t i = 0; i < n; ++i) {
    for (int j : out[i]) in[static_cast<std::size_t>(j)].push_back(static_cast<int>(i));
  }
  // Strongly connected iff vertex 0 reaches everyone along out-edges and along in-edges.
  auto reachesAll = [n](const std::vector<std::vector<int>>& adj) {
    std::vector<bool> seen(n, false);
    std::vector<int> stack{0};
    seen[0] = true;
    std::size_t count = 1;
    while (!stack.empty()) {
      const int v = stack.back();
      stack.pop_back();
      for (int u : adj[static_cast<std::size_t>(v)]) {
        if (!seen[static_cast<std::size_t>(u)]) {
          seen[static_cast<std::size_t>(u)] = true;
          ++count;
          stack.push_back(u);
        }
      }
    }
    return count == n;
  };
  return reachesAll(out) && reachesAll(in);
}

bool isConnected(const Graph& g) {
  if (g.n <= 1) return true;
  std::vector<int> label;
  return components(g.adj, label) == 1;
}

int diameter(const Graph& g) {
  if (g.n == 0) return -1;
  int best = 0;
  std::vector<int> dist(static_cast<size_t>(g.n));
  std::vector<int> queue(static_cast<size_t>(g.n));
  for (int s = 0; s < g.n; ++s) {
    std::fill(dist.begin(), dist.end(), -1);
    size_t head = 0, tail = 0;
    dist[static_cast<size_t>(s)] = 0;
    queue[tail++] = s;
    while (head < tail) {
      const int u = queue[head++];
      for (int v : g.adj[static_cast<size_t>(u)]) {
        if (dist[static_cast<size_t>(v)] < 0) {
          dist[static_cast<size_t>(v)] = dist[static_cast<size_t>(u)] + 1;
          queue[tail++] = v;
        }
      }
    }
    if (tail != static_cast<size_t>(g.n)) return -1;
    best = std::max(best, dist[static_cast<size_t>(queue[tail - 1])]);
  }
  return best;
}

Graph unionGraph(const Schedule& schedule) {
  Graph g;
  g.n = schedule.peers();
  g.adj.resize(static_cast<size_t>(g.n));
  for (int i = 0; i < g.n; ++i) g.adj[static_cast<size_t>(i)] = schedule.allNeighbours(i);
  return g;
}

SpanningTree breadthFirstTree(const Graph& g, int root) {
  SpanningTree t;
  const auto n = static_cast<size_t>(g.n);
  t.parent.assign(n, -2);
  t.depth.assign(n, 0);
  if (root < 0 || root >= g.n) return t;
  std::vector<int> queue = {root};
  t.parent[static_cast<size_t>(root)] = -1;
  for (size_t q = 0; q < queue.size(); ++q) {
    const int u = queue[q];
    std::vector<int> next = g.adj[static_cast<size_t>(u)];
    std::sort(next.begin(), next.end());
    for (int v : next) {
      if (t.parent[static_cast<size_t>(v)] != -2) continue;
      t.parent[static_cast<size_t>(v)] = u;
      t.depth[static_cast<size_t>(v)] = t.depth[static_cast<size_t>(u)] + 1;
      t.height = std::max(t.height, t.depth[static_cast<size_t>(v)]);
      queue.push_back(v);
    }
  }
  t.spans = queue.size() == n;
  return t;
}

std::vector<int> SpanningTree::children(int v) const {
  std::vector<int> out;
  for (size_t w = 0; w < parent.size(); ++w) {
    if (parent[w] == v) out.push_back(static_cast<int>(w));
  }
  return out;
}

bool hasRingEdges(const Graph& g) {
  for (int r = 0; r < g.n; ++r) {
    const auto& adj = g.adj[static_cast<size_t>(r)];
    if (std::find(adj.begin(), adj.end(), (r + 1) % g.n) == adj.end()) return false;
  }
  return true;
}

}  // namespace grapevine::topology
