// `grapevine validate CONFIG`: load and check a config; print a one-screen summary, or every
// problem.
#include <cstdio>
#include <iostream>
#include <sstream>

#include "runtime/config/loader.h"
#include "tools/grapevine/command.h"
#include "topology/topology.h"

namespace grapevine::cli {
namespace {

struct ValidateArgs {
  std::string path;
  std::vector<std::string> overrides;
};

std::string fmt(double v, const char* f = "%.4g") {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

// The algorithm line and what goes with it: the averaging, the outer and the inner optimizer.
void printAlgorithm(const config::Config& c, std::ostream& os) {
  // Neither dsgd nor push-sum has a consensus step, nor the exact averages of allreduce and diloco.
  const bool dsgd = c.algorithm.name == algorithms::AlgorithmKind::kDsgd ||
                    c.algorithm.name == algorithms::AlgorithmKind::kPushSum ||
                    algorithms::averagesEachRound(c.algorithm.name);
  os << "  algorithm    " << algorithms::algorithmKindName(c.algorithm.name);
  if (!dsgd && c.algorithm.consensusStep) {
    os << ", consensus step " << fmt(*c.algorithm.consensusStep);
  } else if (!dsgd) {
    os << ", consensus step auto"
       << (c.algorithm.name == algorithms::AlgorithmKind::kChoco ? " (per edge and round)"
           : c.algorithm.name == algorithms::AlgorithmKind::kGt
               ? " (" +
                     fmt(c.compression.method == compress::Method::kNone
                             ? algorithms::kGtAutoStepUncompressed
                             : algorithms::kGtAutoStep) +
                     ")"
               : " (" + fmt(algorithms::kDeepSqueezeAutoStep) + ")");
  }
  os << ", " << c.algorithm.localSteps << " local step" << (c.algorithm.localSteps > 1 ? "s" : "")
     << (!c.algorithm.overlap ? ""
         : c.algorithm.name == algorithms::AlgorithmKind::kPushSum
             ? ", overlapped: shares mixed " + std::to_string(c.algorithm.overlapRounds) +
                   " round" + (c.algorithm.overlapRounds > 1 ? "s" : "") + " late"
             : std::string(", overlapped"))
     << (c.algorithm.staleness > 0
             ? ", asynchronous: a neighbour up to " + std::to_string(c.algorithm.staleness) +
                   " rounds behind is not waited for"
             : std::string())
     << (c.algorithm.adaptiveTimeout
             ? ", adaptive deadlines (at most " + fmt(c.algorithm.roundTimeout) + " s)"
             : std::string())
     << "\n";
  if (algorithms::averagesEachRound(c.algorithm.name))
    os << "  averaging    exact, every round (all-reduce over the ring, or a spanning tree)\n";
  if (c.algorithm.robust != algorithms::RobustRule::kNone) {
    os << "  robust       " << algorithms::robustRuleName(c.algorithm.robust) << ", b "
       << c.algorithm.robustByzantine << ", "
       << (c.algorithm.robustQuarantine > 0
               ? "quarantine at suspicion " + fmt(c.algorithm.robustQuarantine)
               : std::string("never quarantines"))
       << (c.algorithm.robustProbe > 0
               ? ", loss screening on " + std::to_string(c.algorithm.robustProbe) +
                     " samples of the own shard"
               : std::string())
       << "\n";
  }
  if (c.outer.optimizer != train::OuterKind::kNone) {
    os << "  outer        " << train::outerKindName(c.outer.optimizer) << ", lr " << fmt(c.outer.lr)
       << ", momentum " << fmt(c.outer.momentum) << "\n";
  }
  os << "  optimizer    lr " << fmt(c.optimizer.lr) << " ("
     << train::lrScheduleKindName(c.optimizer.schedule);
  if (c.optimizer.warmupRounds) os << ", " << c.optimizer.warmupRounds << " warm-up rounds";
  os << "), momentum " << fmt(c.optimizer.momentum) << (c.optimizer.nesterov ? " nesterov" : "")
     << " (" << train::momentumKindName(c.optimizer.momentumKind) << "), batch "
     << c.optimizer.batchSize << "\n";
}

void printCompression(const config::Config& c, std::ostream& os) {
  using compress::Method;
  const Method method = c.compression.method;
  os << "  compression  " << compress::methodName(method);
  if (method == Method::kTopK || method == Method::kRandK) {
    os << " ratio " << fmt(c.compression.ratio);
  }
  if (method == Method::kTopK) os << " (" << compress::selectorName(c.compression.selector) << ")";
  if (c.compression.explore > 0.0)
    os << ", " << fmt(c.compression.explore) << " of k explored at random (Slim-DP)";
  if (method == Method::kInt8 || method == Method::kInt4 || method == Method::kSign) {
    os << " block " << c.compression.blockSize;
  }
  if (method == Method::kQsgd) os << " s=" << c.compression.levels;
  if (method == Method::kLowRank) os << " rank " << c.compression.rank;
  os << ", error feedback " << (c.compression.errorFeedback ? "on" : "off") << ", lossless "
     << compress::losslessName(c.compression.lossless) << "\n";
}

void printWorkload(const config::Config& c, std::ostream& os) {
  using train::WorkloadKind;
  const WorkloadKind workload = c.workload.name;
  os << "  workload     " << train::workloadKindName(workload);
  if (workload == WorkloadKind::kFashionMnistMlp) {
    os << " hidden [";
    for (size_t i = 0; i < c.workload.hidden.size(); ++i)
      os << (i ? ", " : "") << c.workload.hidden[i];
    os << "]";
  }
  if (train::isFashionMnist(workload)) {
    os << ", " << train::partitionKindName(c.workload.partition) << " partition";
    if (c.workload.partition == train::PartitionKind::kDirichlet) {
      os << " (alpha " << fmt(c.workload.alpha) << ")";
    }
  }
  if (workload == WorkloadKind::kExternal) {
    os << " (your model, through the API: grapevine launch CONFIG -- COMMAND, docs/api.md)";
  }
  os << "\n";
}

// Heterogeneous compute: who is slower, and how each command plays it (nothing when no one is).
void printCompute(const config::Config& c, std::ostream& os) {
  std::string slower;
  if (c.network.computeScale != 1.0) slower = "every peer x" + fmt(c.network.computeScale);
  for (const auto& pn : c.network.peers) {
    if (pn.computeScale && *pn.computeScale != c.network.computeScale && pn.rank < c.peers.count)
      slower += (slower.empty() ? "peer " : ", peer ") + std::to_string(pn.rank) + " x" +
                fmt(*pn.computeScale);
  }
  if (!slower.empty()) {
    os << "  compute      peers' compute time scaled: " << slower
       << " (sim: its clock; launch/peer: a peer above 1 sleeps the difference after each step)\n";
  }
}

void printSummary(const config::Config& c, std::ostream& os) {
  const auto addrs = c.peers.addresses();
  os << "  run          " << c.run.name << ", seed " << c.run.seed << ", " << c.run.rounds
     << " rounds\n";
  os << "  peers        " << c.peers.count << " (";
  if (c.peers.list.empty()) {
    os << c.peers.host << ":" << c.peers.basePort << "-" << c.peers.basePort + c.peers.count - 1;
    if (!c.peers.rendezvous.empty()) os << ", hosts through the rendezvous " << c.peers.rendezvous;
  } else {
    os << addrs.front().host << ":" << addrs.front().port << " ... " << addrs.back().host << ":"
       << addrs.back().port;
  }
  os << ")\n";
  const topology::Spec spec = c.topologySpec();
  auto schedule = topology::makeSchedule(spec);
  if (schedule.isOk()) {
    const topology::Analysis a = topology::analyze(**schedule, spec);
    os << "  topology     " << topology::kindName(c.topology.kind) << ", "
       << topology::weightsName(c.topology.weights) << " weights: degree " << a.degreeMin;
    if (a.degreeMax != a.degreeMin) os << "-" << a.degreeMax;
    os << ", " << a.edges << " edges, diameter " << a.diameter;
    if (a.directed) {
      os << ", directed: in-degree " << a.inDegreeMin << "-" << a.inDegreeMax << ", out-degree "
         << a.outDegreeMin << "-" << a.outDegreeMax
         << (a.stronglyConnected ? ", strongly connected" : ", NOT strongly connected");
    } else {
      os << ", spectral gap " << fmt(a.spectralGap) << " (lambda2 " << fmt(a.lambda2) << ")";
    }
    if (a.period > 1) os << ", period " << a.period << " with gap " << fmt(a.periodGap);
    os << "\n";
  }
  os << "  transport    " << c.transport.backend;
  if (c.transport.backend == "ucx" && !c.transport.ucxTls.empty())
    os << " (UCX_TLS=" << c.transport.ucxTls << ")";
  if (c.transport.backend == "libfabric")
    os << " (provider " << c.transport.libfabricProvider << ")";
  os << (c.transport.busyPoll ? ", busy polling" : "") << "\n";
  printAlgorithm(c, os);
  printCompression(c, os);
  printWorkload(c, os);
  printCompute(c, os);
  os << "  output       " << c.output.dir << "\n";
}

// A fault schedule counts rounds (grapevine sim) or seconds (grapevine launch), never both
// (checks.cc): which command runs it, so that a schedule validate accepts is not a surprise later.
void printFaults(const config::Config& c, std::ostream& os) {
  const auto& events = c.faults.events;
  if (events.empty()) return;
  os << "  faults       " << events.size() << (events.size() == 1 ? " event" : " events")
     << (events.front().byRound()
             ? " by round (at_round): run by grapevine sim; grapevine launch needs at_seconds"
             : " by wall time (at_seconds): run by grapevine launch; grapevine sim needs at_round")
     << "\n";
}

int runValidate(const ValidateArgs& args) {
  config::LoadOptions options;
  options.overrides = args.overrides;
  config::LoadResult r = config::loadFile(args.path, options);
  std::cerr << config::formatDiagnostics(r.diagnostics);
  if (!r.ok()) {
    int n = 0;
    for (const auto& d : r.diagnostics) n += d.warning ? 0 : 1;
    std::cerr << args.path << ": " << n << " error" << (n == 1 ? "" : "s") << "\n";
    return kExitBadInput;
  }
  std::cout << args.path << ": ok\n";
  printSummary(r.config, std::cout);
  printFaults(r.config, std::cout);
  return kExitOk;
}

}  // namespace

Command registerValidate(CLI::App& root) {
  auto args = std::make_shared<ValidateArgs>();
  CLI::App* app =
      root.add_subcommand("validate", "Load and check a config; print a summary or every problem");
  app->add_option("config", args->path, "YAML config file")->required();
  app->add_option("--set", args->overrides,
                  "Override a key: --set topology.kind=torus (repeatable)");
  return {app, [args] { return runValidate(*args); }};
}

}  // namespace grapevine::cli
