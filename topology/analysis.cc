// Spectral and graph analysis of a schedule, and its JSON / text / Graphviz renderings.
#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "topology/random.h"
#include "topology/topology.h"

namespace grapevine::topology {
namespace {

constexpr double kSymmetryTolerance = 1e-12;
// Power iteration stops once the predicted remaining growth of the estimate is below this, three
// iterations in a row (the rate estimate is noisy while two eigenvalues are still competing).
constexpr double kPowerTolerance = 1e-13;

bool isSymmetric(const Weights& w) {
  for (size_t i = 0; i < w.rows.size(); ++i) {
    for (const auto& [j, v] : w.rows[i]) {
      const auto& back = w.rows[static_cast<size_t>(j)];
      auto it =
          std::lower_bound(back.begin(), back.end(), static_cast<int>(i),
                           [](const std::pair<int, double>& e, int key) { return e.first < key; });
      if (it == back.end() || it->first != static_cast<int>(i) ||
          std::abs(it->second - v) > kSymmetryTolerance) {
        return false;
      }
    }
  }
  return true;
}

Eigen::MatrixXd dense(int n, const Weights& w) {
  Eigen::MatrixXd m = Eigen::MatrixXd::Zero(n, n);
  for (int i = 0; i < n; ++i) {
    m(i, i) = w.self[static_cast<size_t>(i)];
    for (const auto& [j, v] : w.rows[static_cast<size_t>(i)]) m(i, j) += v;
  }
  return m;
}

// y = W x (y_i = w_ii x_i + sum_j w_ij x_j).
void apply(const Weights& w, const std::vector<double>& x, std::vector<double>& y) {
  const size_t n = x.size();
  y.assign(n, 0.0);
  for (size_t i = 0; i < n; ++i) {
    double acc = w.self[i] * x[i];
    for (const auto& [j, v] : w.rows[i]) acc += v * x[static_cast<size_t>(j)];
    y[i] = acc;
  }
}

// y = W^T x.
void applyTransposed(const Weights& w, const std::vector<double>& x, std::vector<double>& y) {
  const size_t n = x.size();
  y.assign(n, 0.0);
  for (size_t i = 0; i < n; ++i) {
    y[i] += w.self[i] * x[i];
    for (const auto& [j, v] : w.rows[i]) y[static_cast<size_t>(j)] += v * x[i];
  }
}

void removeMean(std::vector<double>& x) {
  double mean = 0.0;
  for (double v : x) mean += v;
  mean /= static_cast<double>(x.size());
  for (double& v : x) v -= mean;
}

double norm(const std::vector<double>& x) {
  double s = 0.0;
  for (double v : x) s += v * v;
  return std::sqrt(s);
}

SpectralEstimate exactEstimate(int n, const std::vector<const Weights*>& rounds) {
  SpectralEstimate e;
  e.exact = true;
  const Eigen::MatrixXd j = Eigen::MatrixXd::Constant(n, n, 1.0 / n);
  if (rounds.size() == 1 && isSymmetric(*rounds[0])) {
    const Eigen::MatrixXd a = dense(n, *rounds[0]) - j;
    Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> solver(a, Eigen::EigenvaluesOnly);
    e.value = solver.eigenvalues().cwiseAbs().maxCoeff();
    return e;
  }
  Eigen::MatrixXd m = Eigen::MatrixXd::Identity(n, n);
  for (const Weights* w : rounds) m = dense(n, *w) * m;
  Eigen::BDCSVD<Eigen::MatrixXd> svd(m - j);
  e.value = svd.singularValues()(0);
  return e;
}

SpectralEstimate powerEstimate(int n, const std::vector<const Weights*>& rounds,
                               int maxIterations) {
  SpectralEstimate e;
  e.exact = false;
  e.converged = false;
  std::mt19937_64 rng(0x9e3779b97f4a7c15ull);  // fixed: the estimate is reproducible
  std::vector<double> x(static_cast<size_t>(n)), y, tmp;
  for (double& v : x) v = 2.0 * detail::uniform01(rng) - 1.0;
  removeMean(x);
  double nx = norm(x);
  for (double& v : x) v /= nx;
  double prev = -1.0, prevDelta = 0.0;
  int calm = 0;
  for (int it = 1; it <= maxIterations; ++it) {
    e.iterations = it;
    // y = M x
    y = x;
    for (const Weights* w : rounds) {
      apply(*w, y, tmp);
      y.swap(tmp);
    }
    // The mean-zero subspace is invariant for doubly-stochastic W; projecting again each time keeps
    // rounding from growing a component along the eigenvalue-1 direction.
    removeMean(y);
    const double rho = norm(y);  // ||M x|| with ||x|| = 1: a lower bound that rises to sigma
    e.value = std::max(e.value, rho);
    // x = M^T y / ||M^T y||
    for (auto w = rounds.rbegin(); w != rounds.rend(); ++w) {
      applyTransposed(**w, y, tmp);
      y.swap(tmp);
    }
    removeMean(y);
    const double ny = norm(y);
    if (ny == 0.0 || rho == 0.0) {
      e.value = 0.0;
      e.converged = true;
      return e;
    }
    for (size_t i = 0; i < y.size(); ++i) x[i] = y[i] / ny;
    const double delta = rho - prev;
    bool calmNow = false;
    if (it > 2) {
      if (delta <= 0.0) {
        calmNow = true;  // at the rounding floor
      } else if (prevDelta > 0.0) {
        const double r = delta / prevDelta;
        calmNow = r < 1.0 && delta * r / (1.0 - r) < kPowerTolerance;
      }
    }
    calm = calmNow ? calm + 1 : 0;
    if (calm >= 3) {
      e.converged = true;
      return e;
    }
    prevDelta = delta;
    prev = rho;
  }
  return e;
}

std::string fmtWeight(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", v);
  return buf;
}

}  // namespace

SpectralEstimate secondLargestModulus(int n, const std::vector<const Weights*>& rounds,
                                      SpectralMethod method, int maxIterations) {
  if (n <= 1 || rounds.empty()) return SpectralEstimate{0.0, true, true, 0};
  const bool exact = method == SpectralMethod::kExact ||
                     (method == SpectralMethod::kAuto && n <= kExactSpectrumLimit);
  return exact ? exactEstimate(n, rounds) : powerEstimate(n, rounds, maxIterations);
}

double secondLargestEigenvalueModulus(const Graph& g, const Weights& w) {
  return secondLargestModulus(g.n, {&w}).value;
}

Analysis analyze(const Schedule& schedule, const Spec& spec) {
  Analysis a;
  const int n = schedule.peers();
  const int period = schedule.period();
  a.peers = n;
  a.kind = std::string(kindName(spec.kind));
  a.weights = std::string(weightsName(spec.weights));
  a.period = period;
  a.timeVarying = spec.kind == Kind::kOnePeerExponential;
  if (spec.kind == Kind::kRandomRegular || spec.kind == Kind::kErdosRenyi) a.seed = spec.seed;

  // The union over one period: whom a peer ever talks to.
  Graph all;
  all.n = n;
  all.adj.resize(static_cast<size_t>(n));
  a.symmetric = true;
  a.doublyStochastic = true;
  bool supportConnected = true;
  for (int t = 0; t < period; ++t) {
    const Graph& g = schedule.graph(t);
    for (int i = 0; i < n; ++i) {
      const auto& row = g.adj[static_cast<size_t>(i)];
      all.adj[static_cast<size_t>(i)].insert(all.adj[static_cast<size_t>(i)].end(), row.begin(),
                                             row.end());
      a.sendsPerRound =
          std::max(a.sendsPerRound, static_cast<int>(schedule.plan(i, t).sendTo.size()));
    }
    const Checks c = check(g, schedule.weights(t));
    a.symmetric = a.symmetric && c.symmetric;
    a.doublyStochastic = a.doublyStochastic && c.doublyStochastic;
    if (!a.timeVarying) supportConnected = supportConnected && c.connected;
  }
  for (auto& row : all.adj) {
    std::sort(row.begin(), row.end());
    row.erase(std::unique(row.begin(), row.end()), row.end());
  }
  a.edges = all.edgeCount();
  a.degreeMin = n > 0 ? std::numeric_limits<int>::max() : 0;
  for (int i = 0; i < n; ++i) {
    a.degreeMin = std::min(a.degreeMin, all.degree(i));
    a.degreeMax = std::max(a.degreeMax, all.degree(i));
  }
  a.connected = isConnected(all) && supportConnected;
  a.diameter = diameter(all);
  a.directed = spec.directed;
  {
    const auto out = sendGraph(schedule);
    std::vector<int> inDegree(static_cast<size_t>(n), 0);
    for (const auto& row : out) {
      for (int j : row) ++inDegree[static_cast<size_t>(j)];
    }
    a.inDegreeMin = a.outDegreeMin = n > 0 ? std::numeric_limits<int>::max() : 0;
    for (int i = 0; i < n; ++i) {
      const int o = static_cast<int>(out[static_cast<size_t>(i)].size());
      const int d = inDegree[static_cast<size_t>(i)];
      a.outDegreeMin = std::min(a.outDegreeMin, o);
      a.outDegreeMax = std::max(a.outDegreeMax, o);
      a.inDegreeMin = std::min(a.inDegreeMin, d);
      a.inDegreeMax = std::max(a.inDegreeMax, d);
    }
    a.stronglyConnected = isStronglyConnected(out);
  }
  if (a.directed) {
    // The spectrum below measures contraction of a doubly stochastic W on the mean-zero subspace;
    // a directed graph's row-stochastic W has neither, so nothing meaningful is reported.
    a.lambda2 = a.spectralGap = a.periodLambda2 = a.periodGap =
        std::numeric_limits<double>::quiet_NaN();
    a.lambda2Method = "none";
    return a;
  }

  auto clamp = [](double v) { return (v > 1.0 && v < 1.0 + 1e-12) ? 1.0 : v; };
  const SpectralEstimate round0 = secondLargestModulus(n, {&schedule.weights(0)});
  a.lambda2 = clamp(round0.value);
  a.spectralGap = 1.0 - a.lambda2;
  a.lambda2Method = round0.exact ? "exact" : "power-iteration";
  a.lambda2Converged = round0.converged;
  if (a.timeVarying) {
    std::vector<const Weights*> rounds;
    for (int t = 0; t < period; ++t) rounds.push_back(&schedule.weights(t));
    const SpectralEstimate product = secondLargestModulus(n, rounds);
    a.periodLambda2 = clamp(product.value);
    a.periodGap = 1.0 - a.periodLambda2;
    a.lambda2Converged = a.lambda2Converged && product.converged;
  } else {
    a.periodLambda2 = a.lambda2;
    a.periodGap = a.spectralGap;
  }
  return a;
}

std::string toJson(const Analysis& a) {
  nlohmann::ordered_json j;
  j["kind"] = a.kind;
  j["weights"] = a.weights;
  j["peers"] = a.peers;
  if (a.seed) j["seed"] = *a.seed;
  j["edges"] = a.edges;
  j["degree_min"] = a.degreeMin;
  j["degree_max"] = a.degreeMax;
  j["diameter"] = a.diameter;
  j["connected"] = a.connected;
  j["symmetric"] = a.symmetric;
  j["doubly_stochastic"] = a.doublyStochastic;
  j["lambda2"] = a.lambda2;
  j["spectral_gap"] = a.spectralGap;
  j["lambda2_method"] = a.lambda2Method;
  j["lambda2_converged"] = a.lambda2Converged;
  j["sends_per_round"] = a.sendsPerRound;
  j["time_varying"] = a.timeVarying;
  j["directed"] = a.directed;
  j["in_degree_min"] = a.inDegreeMin;
  j["in_degree_max"] = a.inDegreeMax;
  j["out_degree_min"] = a.outDegreeMin;
  j["out_degree_max"] = a.outDegreeMax;
  j["strongly_connected"] = a.stronglyConnected;
  j["period"] = a.period;
  if (a.timeVarying) {
    j["period_lambda2"] = a.periodLambda2;
    j["period_spectral_gap"] = a.periodGap;
  }
  return j.dump();
}

std::string toText(const Analysis& a) {
  std::ostringstream o;
  char buf[256];
  o << "topology: " << a.kind << ", " << a.peers << " peers, " << a.weights << " weights";
  if (a.seed) o << ", seed " << *a.seed;
  o << "\n";
  o << "graph:    " << a.edges << " edges" << (a.timeVarying ? " over one period" : "")
    << ", degree " << a.degreeMin;
  if (a.degreeMax != a.degreeMin) o << ".." << a.degreeMax;
  o << ", diameter ";
  if (a.diameter >= 0) {
    o << a.diameter;
  } else {
    o << "infinite";
  }
  o << ", " << (a.connected ? "connected" : "DISCONNECTED") << "\n";
  if (a.directed) {  // undirected: in = out = degree, strongly connected = connected
    o << "directed: in-degree " << a.inDegreeMin;
    if (a.inDegreeMax != a.inDegreeMin) o << ".." << a.inDegreeMax;
    o << ", out-degree " << a.outDegreeMin;
    if (a.outDegreeMax != a.outDegreeMin) o << ".." << a.outDegreeMax;
    o << ", " << (a.stronglyConnected ? "strongly connected" : "NOT strongly connected") << "\n";
  }
  o << "weights:  " << (a.symmetric ? "symmetric" : "not symmetric") << ", "
    << (a.doublyStochastic ? "doubly stochastic" : "NOT doubly stochastic") << "\n";
  if (a.directed) {
    o << "spectrum: not computed (directed: the weights are row stochastic only; push-sum "
         "mixes with column weights 1/(out_degree + 1))\n";
  } else {
    std::snprintf(buf, sizeof buf, "spectrum: lambda2 %.6g, spectral gap %.6g (%s%s)\n", a.lambda2,
                  a.spectralGap, a.lambda2Method.c_str(),
                  a.lambda2Converged ? "" : ", NOT converged");
    o << buf;
  }
  if (a.timeVarying) {
    std::snprintf(buf, sizeof buf,
                  "period:   %d rounds; product over a period: lambda2 %.6g, gap %.6g\n", a.period,
                  a.periodLambda2, a.periodGap);
    o << buf;
  }
  o << "cost:     each peer sends at most " << a.sendsPerRound << " message"
    << (a.sendsPerRound == 1 ? "" : "s") << " per round\n";
  return o.str();
}

std::vector<std::vector<int>> sendGraph(const Schedule& schedule) {
  const int n = schedule.peers();
  std::vector<std::vector<int>> out(static_cast<size_t>(n));
  for (int t = 0; t < schedule.period(); ++t) {
    for (int i = 0; i < n; ++i) {
      const auto to = schedule.plan(i, t).sendTo;
      out[static_cast<size_t>(i)].insert(out[static_cast<size_t>(i)].end(), to.begin(), to.end());
    }
  }
  for (auto& row : out) {
    std::sort(row.begin(), row.end());
    row.erase(std::unique(row.begin(), row.end()), row.end());
  }
  return out;
}

std::string toDot(const Schedule& schedule, std::int64_t round) {
  const Weights& w = schedule.weights(round);
  const int n = schedule.peers();
  const bool sym = isSymmetric(w);
  std::ostringstream o;
  o << (sym ? "graph" : "digraph") << " grapevine {\n";
  o << "  // round " << round << "; edge labels are mixing weights w_ij";
  if (!sym) o << " (j -> i: i takes w_ij of j's value)";
  o << "\n  node [shape=circle];\n";
  for (int i = 0; i < n; ++i) {
    o << "  " << i << " [xlabel=\"" << fmtWeight(w.self[static_cast<size_t>(i)]) << "\"];\n";
  }
  for (int i = 0; i < n; ++i) {
    for (const auto& [j, v] : w.rows[static_cast<size_t>(i)]) {
      if (sym) {
        if (j > i) o << "  " << i << " -- " << j << " [label=\"" << fmtWeight(v) << "\"];\n";
      } else {
        o << "  " << j << " -> " << i << " [label=\"" << fmtWeight(v) << "\"];\n";
      }
    }
  }
  o << "}\n";
  return o.str();
}

}  // namespace grapevine::topology
