// Graphs, mixing weights, per-round schedules and their spectral analysis. Pure functions, no I/O.
//
// A Schedule is what the runtime consumes: for round t, each peer's neighbours and mixing weights.
// Static kinds return the same plan every round; time-varying kinds (one-peer exponential) cycle
// through `period()` plans.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "runtime/common/status.h"
#include "topology/spec.h"

namespace grapevine::topology {

// An undirected simple graph: sorted neighbour lists, no self loops, no duplicate edges.
struct Graph {
  int n = 0;
  std::vector<std::vector<int>> adj;

  int degree(int i) const { return static_cast<int>(adj[i].size()); }
  std::int64_t edgeCount() const;  // undirected edges
};

// Generators. Each validates its arguments and returns kInvalidArgument with a readable message
// ("torus: dims 3x3 give 9 peers but peers is 8").
Result<Graph> ring(int n);
Result<Graph> torus(
    const std::vector<int>& dims);  // 2 or 3 dims; a size-2 dim adds one edge, not two
// The dims a torus of `peers` gets when none are given: the squarest a x b = peers with
// 2 <= a <= b (16 -> 4x4, 64 -> 8x8, 32 -> 4x8); empty when there is none (primes, < 4). The config
// loader and `grapevine topo --peers N` both call it, so a config and the flags agree.
std::vector<int> squarestTorusDims(int peers);
Result<Graph> randomRegular(int n, int degree, std::uint64_t seed);  // connected, seeded
Result<Graph> erdosRenyi(int n, double p, std::uint64_t seed);       // connected or an error
Result<Graph> exponential(int n);                                    // i <-> i +- 2^k (mod n)
Result<Graph> complete(int n);
Result<Graph> fromEdges(int n, const std::vector<WeightedEdge>& edges);

// Mixing weights of one round, sparse: row i holds (j, w_ij) for each neighbour j, and self[i] =
// w_ii.
struct Weights {
  std::vector<double> self;
  std::vector<std::vector<std::pair<int, double>>> rows;  // sorted by j
};

Weights metropolis(const Graph& g);  // w_ij = 1 / (1 + max(d_i, d_j)), w_ii = 1 - sum
Weights uniform(const Graph& g);     // w_ij = 1 / (d_max + 1)
// (I + W) / 2: the same fixed point and support, eigenvalues moved from [-1, 1] into [0, 1].
Weights lazy(Weights w);
// Explicit weights from the edge list; edges without a weight get Metropolis weights.
Result<Weights> explicitWeights(const Graph& g, const std::vector<WeightedEdge>& edges);
// Metropolis weights recomputed over the live edges only (a dead edge is dropped by both ends).
Weights metropolisOver(const Graph& g, const std::vector<std::vector<bool>>& live);

// What peer i does in one round.
struct PeerPlan {
  std::vector<int> sendTo;                      // peers i sends its message to
  std::vector<int> recvFrom;                    // peers i expects a message from
  std::vector<std::pair<int, double>> weights;  // (j, w_ij) for j in recvFrom
  double selfWeight = 1.0;
};

class Schedule {
 public:
  virtual ~Schedule() = default;
  virtual int peers() const = 0;
  virtual int period() const = 0;  // 1 for static graphs
  virtual const Graph& graph(std::int64_t round) const = 0;
  virtual const Weights& weights(std::int64_t round) const = 0;
  PeerPlan plan(int peer, std::int64_t round) const;
  // The union of all rounds' neighbours of `peer` (whom it ever talks to), sorted.
  std::vector<int> allNeighbours(int peer) const;
};

// Builds the schedule a Spec describes; every error is a readable message.
Result<std::unique_ptr<Schedule>> makeSchedule(const Spec& spec);

struct Checks {
  bool symmetric = false;
  bool nonNegative = false;
  bool doublyStochastic = false;  // rows and columns sum to 1 within 1e-12
  bool connected = false;
};
Checks check(const Graph& g, const Weights& w);

struct Analysis {
  int peers = 0;
  std::int64_t edges = 0;  // undirected, round 0 (union over the period for time-varying kinds)
  int degreeMin = 0;
  int degreeMax = 0;
  int diameter = -1;  // -1 when disconnected
  bool connected = false;
  bool doublyStochastic = false;
  double lambda2 = 0.0;      // second-largest eigenvalue modulus of W (round 0)
  double spectralGap = 0.0;  // 1 - lambda2
  int period = 1;
  double periodLambda2 = 0.0;  // of the product W_{p-1}...W_0, time-varying kinds only
  double periodGap = 0.0;
  std::string kind;
  std::string weights;
  // Added beyond the first contract; all appear in the JSON (docs/topologies.md).
  bool symmetric = false;             // every round's W is symmetric
  bool timeVarying = false;           // the kind changes its graph from round to round
  std::string lambda2Method;          // "exact" or "power-iteration"
  bool lambda2Converged = true;       // false: power iteration hit its iteration cap
  int sendsPerRound = 0;              // most messages one peer sends in one round
  std::optional<std::uint64_t> seed;  // random kinds only
  // Who sends to whom (the union of the rounds' sendTo lists over one period): equal to the
  // degrees and `connected` above on undirected graphs; what matters on directed ones.
  bool directed = false;  // topology.directed
  int inDegreeMin = 0, inDegreeMax = 0, outDegreeMin = 0, outDegreeMax = 0;
  bool stronglyConnected = false;  // every peer's messages reach every other peer
};

// Exact eigenvalues (Eigen) up to a few thousand peers, power iteration on the deflated operator
// beyond. Runs on the calling thread; dense O(n^3) work below kExactSpectrumLimit peers.
Analysis analyze(const Schedule& schedule, const Spec& spec);
// lambda2 of one round's W: max |eigenvalue| of W - J (J = 11^T/n), i.e. max(|lambda_2|,
// |lambda_n|) for a symmetric doubly-stochastic W. Non-symmetric W: the largest singular value of W
// - J.
double secondLargestEigenvalueModulus(const Graph& g, const Weights& w);

// Up to this many peers the spectrum is computed densely; above, by power iteration.
inline constexpr int kExactSpectrumLimit = 3000;
enum class SpectralMethod { kAuto, kExact, kPowerIteration };
struct SpectralEstimate {
  double value = 0.0;  // ||M - J||_2 for M = W_{k-1} ... W_0
  bool exact = false;
  bool converged = true;  // power iteration only
  int iterations = 0;     // power iteration only
};
// The contraction factor of applying `rounds` in order (rounds[0] first) to a vector, measured on
// the mean-zero subspace: the largest singular value of M - J. For one symmetric doubly-stochastic
// W this is its second-largest eigenvalue modulus; for a normal W (the one-peer shifts) it is the
// second-largest eigenvalue modulus too. Exact: SelfAdjointEigenSolver (symmetric single round) or
// an SVD of the dense product. Power iteration: on M^T M restricted to the mean-zero subspace with
// sparse matvecs, stopping when the predicted remaining change is below 1e-12.
// Every Weights must be n x n and doubly stochastic for the mean-zero subspace to be invariant.
SpectralEstimate secondLargestModulus(int n, const std::vector<const Weights*>& rounds,
                                      SpectralMethod method = SpectralMethod::kAuto,
                                      int maxIterations = 20000);
int diameter(const Graph& g);  // BFS; -1 when disconnected
// The union of a schedule's graphs over one period: whom each peer ever talks to.
Graph unionGraph(const Schedule& schedule);
// The breadth-first spanning tree of `g` from `root`, each vertex's neighbours taken in increasing
// rank (so every peer that computes it gets the same tree). Unreachable vertices have parent -2.
struct SpanningTree {
  std::vector<int> parent;  // -1 at the root
  std::vector<int> depth;   // 0 at the root
  int height = 0;           // the largest depth
  bool spans = false;       // every vertex is reachable from the root
  // v's children in increasing rank.
  std::vector<int> children(int v) const;
};
SpanningTree breadthFirstTree(const Graph& g, int root = 0);
// Whether g has every edge (r, r + 1 mod n): the ring 0 -> 1 -> ... -> n-1 -> 0 runs over it.
bool hasRingEdges(const Graph& g);
// The directed graph of who sends to whom over one period: out[i] = the union of
// plan(i, t).sendTo for t in 0..period-1, sorted.
std::vector<std::vector<int>> sendGraph(const Schedule& schedule);
// Every vertex reaches every other along out-edges (forward and backward search from vertex 0).
bool isStronglyConnected(const std::vector<std::vector<int>>& out);
bool isConnected(const Graph& g);

std::string toJson(const Analysis& a);  // one object; keys in docs/topologies.md
std::string toText(const Analysis& a);  // human summary, a few lines
std::string toDot(const Schedule& schedule, std::int64_t round = 0);

}  // namespace grapevine::topology
