#include "runtime/config/checks.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <cstddef>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "runtime/security/key.h"
#include "topology/topology.h"

namespace grapevine::config {
namespace {

using algorithms::AlgorithmKind;
using topology::Kind;

// Peers' hosts are numeric IP addresses (or localhost, or `auto` with a rendezvous): the
// transports do not resolve names, so a hostname would pass here and fail every peer at start.
void checkHosts(const Config& c, Report& report) {
  auto numeric = [](std::string host) {
    if (host == "localhost") return true;
    if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
      host = host.substr(1, host.size() - 2);
    }
    unsigned char buf[sizeof(in6_addr)];
    return inet_pton(AF_INET, host.c_str(), buf) == 1 ||
           inet_pton(AF_INET6, host.c_str(), buf) == 1;
  };
  const std::string why =
      ": hosts must be numeric IP addresses (or localhost); names are not resolved. On machines "
      "a scheduler assigns, use peers.host: auto with peers.rendezvous";
  if (c.peers.list.empty()) {
    if (c.peers.host != "auto" && !numeric(c.peers.host)) {
      report.error(report.keyWhere("peers.host"), "peers.host", "\"" + c.peers.host + "\"" + why);
    }
    return;
  }
  for (std::size_t r = 0; r < c.peers.list.size(); ++r) {
    if (!numeric(c.peers.list[r].host)) {
      report.error(report.keyWhere("peers.list"), "peers.list",
                   "peer " + std::to_string(r) + "'s host \"" + c.peers.list[r].host + "\"" + why);
    }
  }
}

// A control port inside this machine's ephemeral range (net.ipv4.ip_local_port_range) can be
// taken as the local port of an outgoing connection before its peer listens on it: the peer then
// fails with "address already in use" at random. Warned, not refused: the range is this
// machine's, the peers may run elsewhere.
void checkEphemeralPorts(const Config& c, Report& report) {
  std::ifstream in("/proc/sys/net/ipv4/ip_local_port_range");
  int low = 0, high = 0;
  if (!(in >> low >> high) || low <= 0 || high < low) return;
  std::vector<int> ports;
  for (const auto& a : c.peers.addresses()) ports.push_back(a.port);
  if (ports.empty()) return;
  const auto [lo, hi] = std::minmax_element(ports.begin(), ports.end());
  const bool inside =
      std::any_of(ports.begin(), ports.end(), [&](int p) { return p >= low && p <= high; });
  if (!inside) return;
  const std::string key = c.peers.list.empty() ? "peers.base_port" : "peers.list";
  report.warning(report.keyWhere(key), key,
                 "control ports " + std::to_string(*lo) + "-" + std::to_string(*hi) +
                     " overlap this machine's ephemeral port range " + std::to_string(low) + "-" +
                     std::to_string(high) +
                     " (net.ipv4.ip_local_port_range): an outgoing connection can take a peer's "
                     "port before it listens; use ports below " +
                     std::to_string(low));
}

// peers.*: a count or a list that agree, ports that fit, one address per peer, numeric hosts, a
// rendezvous exactly where addresses are not known in advance, heartbeats more frequent than the
// death timeout. False when no peers are given at all: no other rule means anything then.
bool checkPeers(const Config& c, Report& report) {
  if (!report.wasSet("peers.count") && !report.wasSet("peers.list")) {
    report.error(report.fileWhere(), "peers.count",
                 "required: set peers.count or give peers as a list");
    return false;
  }
  if (report.wasSet("peers.list") && report.wasSet("peers.count") &&
      c.peers.count != static_cast<int>(c.peers.list.size())) {
    // The list sets count too; an explicit count that disagrees is a mistake.
    report.error(report.keyWhere("peers.count"), "peers.count",
                 "is " + std::to_string(c.peers.count) + " but peers lists " +
                     std::to_string(c.peers.list.size()) + " addresses");
  }
  if (c.peers.list.empty()) {
    if (c.peers.basePort + 2LL * c.peers.count - 1 > 65535) {
      report.error(report.keyWhere("peers.base_port"), "peers.base_port",
                   std::to_string(c.peers.basePort) + " + ports for " +
                       std::to_string(c.peers.count) + " peers passes 65535");
    }
  } else {
    std::map<std::pair<std::string, int>, int> first;
    for (size_t r = 0; r < c.peers.list.size(); ++r) {
      auto [it, ok] = first.emplace(std::make_pair(c.peers.list[r].host, c.peers.list[r].port), r);
      if (!ok) {
        report.error(report.keyWhere("peers.list"), "peers.list",
                     "peers " + std::to_string(it->second) + " and " + std::to_string(r) +
                         " have the same address " + c.peers.list[r].host + ":" +
                         std::to_string(c.peers.list[r].port));
      }
    }
  }
  checkEphemeralPorts(c, report);
  checkHosts(c, report);
  // A rendezvous publishes addresses that a list would fix in advance: two sources of truth.
  if (!c.peers.rendezvous.empty() && !c.peers.list.empty()) {
    report.error(report.keyWhere("peers.rendezvous"), "peers.rendezvous",
                 "cannot be combined with an explicit peers list: the list already gives every "
                 "address; use one or the other");
  }
  // `auto` is each machine's own name: only a rendezvous tells the other peers what it became.
  if (c.peers.host == "auto" && c.peers.rendezvous.empty() && c.peers.list.empty()) {
    report.error(report.keyWhere("peers.host"), "peers.host",
                 "`auto` (this machine's address) needs peers.rendezvous: without it the other "
                 "peers cannot learn the address");
  }
  if (c.peers.deadAfter <= c.peers.heartbeatInterval) {
    report.error(report.keyWhere("peers.dead_after"), "peers.dead_after",
                 "must be longer than peers.heartbeat_interval (" +
                     std::to_string(c.peers.heartbeatInterval) + " s)");
  }
  return true;
}

// monitoring.prometheus_port: peer r serves on port + r at its own host, so the range must fit
// below 65536 and miss the ports the peers reserve on the same host (base_port .. base_port +
// 2 count - 1 when given by count, as checkPeers() checks; each list entry's port otherwise).
void checkMonitoring(const Config& c, Report& report) {
  if (const std::string& h = c.monitoring.prometheusHost; h != "peer") {
    in_addr ignored{};
    if (inet_pton(AF_INET, h.c_str(), &ignored) != 1) {
      report.error(report.keyWhere("monitoring.prometheus_host"), "monitoring.prometheus_host",
                   "'" + h +
                       "' is neither a numeric IPv4 address (127.0.0.1, 0.0.0.0, ...) nor peer "
                       "(the peer's own control host)");
    }
  }
  const long long first = c.monitoring.prometheusPort;
  if (first == 0) return;
  const long long n = c.peers.count;
  const long long last = first + n - 1;
  const std::string range = std::to_string(first) + ".." + std::to_string(last);
  const std::string key = "monitoring.prometheus_port";
  if (last > 65535) {
    report.error(report.keyWhere(key), key,
                 std::to_string(first) + " + one port for each of " + std::to_string(n) +
                     " peers passes 65535");
    return;
  }
  if (c.peers.list.empty()) {
    const long long base = c.peers.basePort;
    const long long baseLast = base + 2 * n - 1;
    if (first <= baseLast && base <= last) {
      report.error(report.keyWhere(key), key,
                   "ports " + range + " overlap the peers' ports " + std::to_string(base) + ".." +
                       std::to_string(baseLast) + " (peers.base_port) on host " + c.peers.host);
    }
    return;
  }
  std::map<std::pair<std::string, long long>, std::size_t> owner;  // (host, port) -> rank
  for (std::size_t s = 0; s < c.peers.list.size(); ++s)
    owner.emplace(std::make_pair(c.peers.list[s].host, c.peers.list[s].port), s);
  for (std::size_t r = 0; r < c.peers.list.size(); ++r) {
    const long long port = first + static_cast<long long>(r);
    const auto it = owner.find(std::make_pair(c.peers.list[r].host, port));
    if (it != owner.end()) {
      report.error(report.keyWhere(key), key,
                   "peer " + std::to_string(r) + "'s metrics port " + std::to_string(port) +
                       " is peer " + std::to_string(it->second) + "'s port in peers.list (host " +
                       c.peers.list[r].host + ")");
      return;
    }
  }
}

// network.peers and network.edges name existing peers.
void checkNetwork(const Config& c, Report& report) {
  for (const auto& pn : c.network.peers) {
    if (pn.rank >= c.peers.count) {
      report.error(report.keyWhere("network.peers"), "network.peers",
                   "rank " + std::to_string(pn.rank) + " is not a peer (peers.count is " +
                       std::to_string(c.peers.count) + ")");
    }
  }
  // A real peer plays a slower machine by sleeping; it cannot play a faster one.
  bool faster = c.network.computeScale < 1.0 && report.wasSet("network.compute_scale");
  for (const auto& pn : c.network.peers)
    faster = faster || (pn.computeScale && *pn.computeScale < 1.0);
  if (faster) {
    report.warning(report.keyWhere(report.wasSet("network.compute_scale") ? "network.compute_scale"
                                                                          : "network.peers"),
                   "network.compute_scale",
                   "below 1 speeds up grapevine sim only: a real peer (launch, peer) cannot "
                   "compute faster than its machine, and runs at 1");
  }
  for (const auto& e : c.network.edges) {
    if (e.a >= c.peers.count || e.b >= c.peers.count) {
      report.error(report.keyWhere("network.edges"), "network.edges",
                   "[" + std::to_string(e.a) + ", " + std::to_string(e.b) +
                       "] names a peer >= peers.count (" + std::to_string(c.peers.count) + ")");
    }
  }
}

// topology.dims: a torus has 2 or 3 sizes whose product is the peer count (resolve() chose them
// when the config did not); other kinds ignore them.
void checkTorusDims(const Config& c, Report& report) {
  const int n = c.peers.count;
  if (c.topology.kind != Kind::kTorus) {
    if (report.wasSet("topology.dims") && !c.topology.dims.empty()) {
      report.warning(
          report.keyWhere("topology.dims"), "topology.dims",
          "ignored: topology.kind is " + std::string(topology::kindName(c.topology.kind)));
    }
    return;
  }
  if (!report.wasSet("topology.dims") && c.topology.dims.empty() && n >= 4) {
    // resolve() found no factorisation.
    report.error(report.keyWhere("topology.kind"), "topology.dims",
                 "peers.count " + std::to_string(n) +
                     " has no a x b factorisation with a, b >= 2: give dims");
    return;
  }
  if (c.topology.dims.size() != 2 && c.topology.dims.size() != 3) {
    report.error(report.wasSet("topology.dims") ? report.keyWhere("topology.dims")
                                                : report.keyWhere("topology.kind"),
                 "topology.dims", "torus needs 2 or 3 sizes, e.g. dims: [4, 4]");
    return;
  }
  long long prod = 1;
  for (int d : c.topology.dims) prod *= d;
  if (prod != n) {
    report.error(
        report.keyWhere("topology.dims"), "topology.dims",
        "sizes multiply to " + std::to_string(prod) + " but peers.count is " + std::to_string(n));
  }
}

// topology.edges: kind edges needs a list of edges between existing peers, no self loops, none
// twice (a directed edge [a, b] differs from [b, a]); other kinds ignore the list.
void checkEdgeList(const Config& c, Report& report) {
  const int n = c.peers.count;
  if (c.topology.kind != Kind::kEdges) {
    if (report.wasSet("topology.edges")) {
      report.warning(
          report.keyWhere("topology.edges"), "topology.edges",
          "ignored: topology.kind is " + std::string(topology::kindName(c.topology.kind)));
    }
    return;
  }
  if (c.topology.edges.empty()) {
    report.error(report.keyWhere("topology.kind"), "topology.edges",
                 "kind edges needs a non-empty edge list");
  }
  std::set<std::pair<int, int>> seenEdges;
  for (const auto& e : c.topology.edges) {
    const std::string name = "[" + std::to_string(e.a) + ", " + std::to_string(e.b) + "]";
    if (e.a >= n || e.b >= n) {
      report.error(report.keyWhere("topology.edges"), "topology.edges",
                   "edge " + name + " names a peer >= peers.count (" + std::to_string(n) + ")");
    } else if (e.a == e.b) {
      report.error(report.keyWhere("topology.edges"), "topology.edges",
                   "edge " + name + " is a self loop");
    } else if (!seenEdges
                    .insert(c.topology.directed
                                ? std::make_pair(e.a, e.b)
                                : std::make_pair(std::min(e.a, e.b), std::max(e.a, e.b)))
                    .second) {
      report.error(report.keyWhere("topology.edges"), "topology.edges",
                   "edge " + name + " is listed twice");
    }
  }
}

// topology.directed: only push-sum mixes with weights a directed graph can have (column
// stochastic, chosen by the sender); it needs every peer's mass to reach every other peer.
void checkDirected(const Config& c, const topology::Schedule& schedule, Report& report) {
  const bool pushSum = c.algorithm.name == AlgorithmKind::kPushSum;
  if (!pushSum) {
    report.error(report.keyWhere("topology.directed"), "topology.directed",
                 "true cannot be used with algorithm.name: " +
                     std::string(algorithms::algorithmKindName(c.algorithm.name)) +
                     ": it mixes with symmetric, doubly stochastic weights w_ij = w_ji, and on a "
                     "directed graph a peer cannot weigh a neighbour that does not hear from it; "
                     "use algorithm.name: push-sum");
  } else if (!topology::isStronglyConnected(topology::sendGraph(schedule))) {
    report.error(report.keyWhere("topology.edges"), "topology.directed",
                 "the directed graph is not strongly connected: some peer's model can never "
                 "reach some other peer, so push-sum cannot average; add edges so that every peer "
                 "reaches every other along the edges' directions (`grapevine topo` reports it)");
  }
}

// The graph the topology keys describe: it can be built, is connected, and its weights suit the
// algorithm. Returns the schedule (null when it could not be built).
std::unique_ptr<topology::Schedule> checkGraph(const Config& c, Report& report) {
  auto schedule = topology::makeSchedule(c.topologySpec());
  if (!schedule.isOk()) {
    report.error(report.keyWhere("topology.kind"), "topology", schedule.status().message());
    return nullptr;
  }
  const auto& g = (*schedule)->graph(0);
  const auto& w = (*schedule)->weights(0);
  const auto checks = topology::check(g, w);
  if ((*schedule)->period() == 1 && !checks.connected) {
    report.error(report.keyWhere("topology.kind"), "topology",
                 "the graph is disconnected: some peers can never agree");
  }
  if (c.topology.directed) {
    checkDirected(c, **schedule, report);
  } else if (!checks.nonNegative || !checks.doublyStochastic) {
    report.error(report.keyWhere("topology.weights"), "topology.weights",
                 "the mixing weights are not a doubly stochastic non-negative matrix "
                 "(rows and columns must sum to 1)");
  }
  return std::move(*schedule);
}

// topology.*: each kind's own keys, then (with `build`, when nothing so far is wrong) the graph.
// Returns the schedule when it was built.
std::unique_ptr<topology::Schedule> checkTopology(const Config& c, Report& report, bool build) {
  const int n = c.peers.count;
  const Kind kind = c.topology.kind;
  const std::string kindText(topology::kindName(kind));
  checkTorusDims(c, report);
  if (kind == Kind::kRandomRegular &&
      (c.topology.degree >= n || (1LL * n * c.topology.degree) % 2 != 0)) {
    report.error(report.keyWhere("topology.degree"), "topology.degree",
                 "a random " + std::to_string(c.topology.degree) + "-regular graph on " +
                     std::to_string(n) + " peers needs degree < peers and peers x degree even");
  }
  checkEdgeList(c, report);
  if (c.topology.directed && kind != Kind::kEdges) {
    report.error(report.keyWhere("topology.directed"), "topology.directed",
                 "true needs topology.kind: edges (the edge list says who sends to whom); "
                 "topology.kind is " +
                     kindText);
  }
  if (c.topology.directed && c.topology.weights == topology::WeightsKind::kExplicit) {
    report.error(report.keyWhere("topology.weights"), "topology.weights",
                 "explicit weights cannot be used with topology.directed: true (push-sum weighs "
                 "its shares 1/(out_degree + 1)); use metropolis or uniform");
  }
  if (c.topology.weights == topology::WeightsKind::kExplicit && kind != Kind::kEdges) {
    report.error(report.keyWhere("topology.weights"), "topology.weights",
                 "explicit weights need kind: edges with [a, b, weight] entries");
  }
  if (report.errors() != 0 || !build) return nullptr;
  return checkGraph(c, report);
}

// security.*: the key file must be usable (so a peer refuses it at start, naming it); without
// one, traffic that leaves this machine is open to anyone who reaches the ports: warned.
void checkSecurity(const Config& c, Report& report) {
  if (!c.security.keyFile.empty()) {
    auto key = security::readKeyFile(c.keyFilePath());
    if (!key.isOk())
      report.error(report.keyWhere("security.key_file"), "security.key_file",
                   key.status().message());
  } else if (c.security.encrypt) {
    report.error(report.keyWhere("security.encrypt"), "security.encrypt",
                 "true needs security.key_file (the key that encrypts): create one with grapevine "
                 "keygen -o FILE");
  } else if (c.anyNonLoopbackHost()) {
    report.warning(report.keyWhere("security.key_file"), "security.key_file",
                   "not set while peers use non-loopback addresses: anyone who reaches the ports "
                   "can join the run or forge messages; create a key with grapevine keygen -o "
                   "FILE (docs/security.md)");
  }
}

// algorithm.*: the keys an algorithm ignores (warned), and what gt and the API's external workload
// need.
void checkAlgorithm(const Config& c, Report& report) {
  const AlgorithmKind name = c.algorithm.name;
  // Not the default 1 either: a resolved config (toYaml) sets every key.
  if (report.wasSet("algorithm.overlap_rounds") && c.algorithm.overlapRounds != 1 &&
      (name != AlgorithmKind::kPushSum || !c.algorithm.overlap)) {
    report.warning(report.keyWhere("algorithm.overlap_rounds"), "algorithm.overlap_rounds",
                   "has no effect: it is the staleness of overlapped push-sum (algorithm.name: "
                   "push-sum with algorithm.overlap: true)");
  }
  if (name == AlgorithmKind::kPushSum && report.wasSet("algorithm.consensus_step")) {
    report.warning(report.keyWhere("algorithm.consensus_step"), "algorithm.consensus_step",
                   "ignored by push-sum: each peer keeps 1/(out_degree + 1) of its (x, w) and "
                   "sends the same share to each out-neighbour");
  }
  // gt is the exception: uncompressed it mixes with (I + W) / 2 under auto, on purpose
  // (algorithm.h, kGtAutoStepUncompressed).
  if (name != AlgorithmKind::kDsgd && name != AlgorithmKind::kPushSum &&
      name != AlgorithmKind::kGt && c.compression.method == compress::Method::kNone &&
      c.algorithm.consensusStep && *c.algorithm.consensusStep < 1.0) {
    report.warning(report.keyWhere("algorithm.consensus_step"), "algorithm.consensus_step",
                   "below 1 without compression slows consensus for nothing");
  }
  if (name == AlgorithmKind::kGt) {
    // The tracker adds d_t - d_{t-1} once per round: with H local steps it would either see
    // only the last step's direction or count the round's changes H times.
    if (c.algorithm.localSteps != 1) {
      report.error(report.keyWhere("algorithm.local_steps"), "algorithm.local_steps",
                   "must be 1 with algorithm.name: gt (the tracker takes one gradient per gossip "
                   "round)");
    }
    // The API's caller takes its own optimizer step; gt must choose the step direction.
    if (c.workload.name == train::WorkloadKind::kExternal) {
      report.error(report.keyWhere("algorithm.name"), "algorithm.name",
                   "gt cannot be used with workload.name external: gradient tracking replaces "
                   "the step direction, and through the API the caller takes its own step");
    }
    // gt on a directed graph is refused by checkDirected() (symmetric weights needed).
  }
  if (algorithms::averagesEachRound(name)) {
    const std::string n(algorithms::algorithmKindName(name));
    if (c.compression.method != compress::Method::kNone) {
      report.error(report.keyWhere("compression.method"), "compression.method",
                   "must be none with algorithm.name " + n +
                       ": its all-reduce carries the models in f32; a compressed all-reduce (with "
                       "error feedback) is not built yet");
    }
    if (c.algorithm.overlap) {
      report.error(report.keyWhere("algorithm.overlap"), "algorithm.overlap",
                   "cannot be used with algorithm.name " + n +
                       ": the next gradient is taken at the averaged model, which exists only "
                       "after the round's all-reduce");
    }
    if (report.wasSet("algorithm.consensus_step") && c.algorithm.consensusStep &&
        *c.algorithm.consensusStep != 1.0) {
      report.warning(report.keyWhere("algorithm.consensus_step"), "algorithm.consensus_step",
                     "ignored by " + n + ": the models are averaged exactly each round");
    }
    if (name == AlgorithmKind::kDiloco && c.outer.optimizer == train::OuterKind::kNone) {
      report.error(report.keyWhere("algorithm.name"), "algorithm.name",
                   "diloco is the exact average each round with an outer optimizer: set outer: { "
                   "optimizer: nesterov, lr: 0.7, momentum: 0.9 } (DiLoCo's published values), "
                   "or use allreduce");
    }
  }
  if (c.workload.name == train::WorkloadKind::kExternal && c.algorithm.localSteps != 1) {
    report.error(report.keyWhere("algorithm.local_steps"), "algorithm.local_steps",
                 "must be 1 with workload.name external: every step() through the API is one "
                 "round (take extra local steps with your own optimizer and call mix())");
  }
}

// algorithm.robust*: the algorithms robust mixing is sound for, a neighbourhood every round, and
// enough neighbours for the rule to tell b hostile ones from the rest.
void checkRobust(const Config& c, const topology::Schedule* schedule, Report& report) {
  const auto rule = c.algorithm.robust;
  const std::string ruleText(algorithms::robustRuleName(rule));
  if (rule == algorithms::RobustRule::kNone) {
    for (const char* key :
         {"algorithm.robust_byzantine", "algorithm.robust_quarantine", "algorithm.robust_probe"}) {
      if (report.wasSet(key) && !report.wasSet("algorithm.robust"))
        report.warning(report.keyWhere(key), key,
                       "has no effect without algorithm.robust (clip or trim)");
    }
    return;
  }
  const Where where = report.keyWhere("algorithm.robust");
  const AlgorithmKind name = c.algorithm.name;
  if (name != AlgorithmKind::kDsgd && name != AlgorithmKind::kChoco) {
    const char* why =
        name == AlgorithmKind::kPushSum
            ? "push-sum's de-biasing needs every share summed as sent (the mass of x and w is "
              "conserved); clipping a share loses mass"
        : name == AlgorithmKind::kGt
            ? "the tracker must follow the exact network sum of the directions; clipped "
              "differences bias it for good"
        : algorithms::averagesEachRound(name)
            ? "it averages every model exactly over a collective: there is no neighbour's "
              "difference to weigh, and one hostile model moves the average for all"
            : "DeepSqueeze mixes error-compensated compressed models, for which no robust rule "
              "is derived; use choco";
    report.error(where, "algorithm.robust",
                 ruleText + " works with algorithm.name dsgd or choco only, not " +
                     std::string(algorithms::algorithmKindName(name)) + ": " + why);
    return;
  }
  if (c.run.finalAverage) {
    report.error(report.keyWhere("run.final_average"), "run.final_average",
                 "cannot be used with algorithm.robust " + ruleText +
                     ": the exact final average sums every member's model, a hostile or "
                     "quarantined one's too, and one hostile model moves it for all");
  }
  if (c.algorithm.robustProbe > 0 && !train::isFashionMnist(c.workload.name)) {
    report.error(report.keyWhere("algorithm.robust_probe"), "algorithm.robust_probe",
                 "loss screening evaluates models on the peer's own training shard, and "
                 "workload.name " +
                     std::string(train::workloadKindName(c.workload.name)) +
                     " has none (only the Fashion-MNIST workloads do; set it to 0)");
  }
  if (!schedule) return;
  if (schedule->period() != 1) {
    report.error(where, "algorithm.robust",
                 ruleText + " needs a static graph: topology." +
                     std::string(topology::kindName(c.topology.kind)) +
                     " changes each round's neighbours, and the radius is taken from the round's "
                     "neighbourhood");
    return;
  }
  const int b = c.algorithm.robustByzantine;
  const int need = rule == algorithms::RobustRule::kTrim ? 2 * b + 1 : b + 1;
  for (int r = 0; r < c.peers.count; ++r) {
    const int degree = static_cast<int>(schedule->allNeighbours(r).size());
    if (degree >= need) continue;
    report.error(where, "algorithm.robust",
                 ruleText + " with algorithm.robust_byzantine = " + std::to_string(b) +
                     " needs every peer to have at least " + std::to_string(need) +
                     " neighbours (" +
                     (rule == algorithms::RobustRule::kTrim
                          ? "b of the neighbours' values trimmed at each end and one left; on "
                            "a ring use clip"
                          : "more than b, so that the radius is an honest neighbour's distance") +
                     "); peer " + std::to_string(r) + " has " + std::to_string(degree));
    return;
  }
}

// allreduce, diloco: a graph their collectives run over. Around the ring 0 - 1 - ... - n-1 - 0 when
// the graph has it (each peer sends 2 (n - 1) / n of the model a round), else up and down a
// breadth-first spanning tree from rank 0 (the root takes each child's model and sends the average
// back), which must fit the collectives' window of 64 steps: at most 16 deep.
void checkAveraged(const Config& c, const topology::Schedule* schedule, Report& report) {
  if (!algorithms::averagesEachRound(c.algorithm.name)) return;
  if (c.algorithm.adaptiveTimeout && report.wasSet("algorithm.adaptive_timeout")) {
    report.warning(report.keyWhere("algorithm.adaptive_timeout"), "algorithm.adaptive_timeout",
                   "has no effect with algorithm.name: " +
                       std::string(algorithms::algorithmKindName(c.algorithm.name)) +
                       ": its rounds wait for every message of the average (no round goes on "
                       "without a neighbour)");
  }
  if (!schedule) return;
  const topology::Graph g = topology::unionGraph(*schedule);
  if (g.n <= 2 || topology::hasRingEdges(g)) return;
  const topology::SpanningTree tree = topology::breadthFirstTree(g, 0);
  constexpr int kMaxHeight = 16;
  if (!tree.spans || tree.height > kMaxHeight) {
    report.error(report.keyWhere("topology.kind"), "topology.kind",
                 std::string(algorithms::algorithmKindName(c.algorithm.name)) +
                     " averages over the ring 0-1-...-n-1 (not in this graph) or a spanning tree "
                     "at most 16 deep: this graph is " +
                     (tree.spans ? "deeper (" + std::to_string(tree.height) + ")"
                                 : std::string("disconnected")) +
                     "; use topology.kind ring");
  }
}

// compression.*: what the algorithm can send. dsgd and push-sum send exact values. Error feedback
// (a per-sender residual e added to the next delta) helps an algorithm that would otherwise lose
// the compression error. CHOCO and DeepSqueeze never lose it, so a second residual feeds the same
// error back twice and the models run away (sim, 8-peer ring MLP, sign, step 0.4, 300 rounds:
// CHOCO 85% -> 17% with it, DeepSqueeze 81% -> 11%). docs/algorithms.md lists which option each
// algorithm uses.
void checkCompression(const Config& c, Report& report) {
  const AlgorithmKind name = c.algorithm.name;
  const bool dsgd = name == AlgorithmKind::kDsgd;
  const bool pushSum = name == AlgorithmKind::kPushSum;
  const std::string method(compress::methodName(c.compression.method));
  if (dsgd && c.compression.method != compress::Method::kNone) {
    report.error(report.keyWhere("compression.method"), "compression.method",
                 "dsgd exchanges full models uncompressed; use algorithm.name: choco or "
                 "deepsqueeze with " +
                     method);
  }
  // push-sum sums the shares it receives, so every byte must arrive as sent.
  if (pushSum && c.compression.method != compress::Method::kNone) {
    report.error(report.keyWhere("compression.method"), "compression.method",
                 method +
                     " cannot be used with algorithm.name: push-sum: push-sum sums the (x, w) "
                     "shares it receives, and a lossy compressor's error would change the total "
                     "mass and bias the average; use compression.method: none "
                     "(compression.lossless is fine)");
  }
  if (pushSum && c.compression.errorFeedback) {
    report.warning(report.keyWhere("compression.error_feedback"), "compression.error_feedback",
                   "has no effect: push-sum sends exact fp32 shares, there is no residual");
  }
  if (c.compression.errorFeedback && !dsgd && !pushSum) {
    const bool choco = name == AlgorithmKind::kChoco;
    report.error(
        report.keyWhere("compression.error_feedback"), "compression.error_feedback",
        std::string("true cannot be used with algorithm.name: ") +
            std::string(algorithms::algorithmKindName(name)) + ": " +
            (choco ? "CHOCO's public copies already carry the compression residual (each "
                     "round sends C(x - x_hat), the part not yet delivered)"
             : name == AlgorithmKind::kGt
                 ? "gt's public copies of x and y already carry the compression residual "
                   "(each round sends C(x - x_hat) and C(y - y_hat))"
                 : "DeepSqueeze already feeds its compression error back (e <- v - C(v))") +
            ", so a second residual counts it twice and diverges; set "
            "compression.error_feedback: false");
  }
  // The blocks of int8, int4 and sign are whole 64-element words (compress::validate).
  if (c.compression.blockSize % 64 != 0) {
    report.error(report.keyWhere("compression.block_size"), "compression.block_size",
                 std::to_string(c.compression.blockSize) +
                     " is not a multiple of 64 (the quantizers pack whole 64-element words)");
  }
  // compression.explore changes which positions top-k sends; another method has none to change.
  const bool topK = c.compression.method == compress::Method::kTopK ||
                    (c.compression.method == compress::Method::kLowRank &&
                     c.compression.fallback == compress::Method::kTopK);
  if (c.compression.explore > 0.0 && !topK) {
    report.error(report.keyWhere("compression.explore"), "compression.explore",
                 "is top-k's exploration set (Slim-DP): it needs compression.method: top-k (or "
                 "low-rank with fallback: top-k), not " +
                     method);
  }
  if (c.compression.errorFeedback && dsgd && c.compression.method == compress::Method::kNone) {
    report.warning(report.keyWhere("compression.error_feedback"), "compression.error_feedback",
                   "has no effect: dsgd sends exact fp32 models, there is no residual");
  }
}

// optimizer.*: a step schedule needs milestones; nesterov needs momentum.
void checkOptimizer(const Config& c, Report& report) {
  if (c.optimizer.schedule == train::LrScheduleKind::kStep && c.optimizer.stepMilestones.empty()) {
    report.error(report.keyWhere("optimizer.schedule"), "optimizer.step_milestones",
                 "the step schedule needs milestones, e.g. step_milestones: [1000, 2000]");
  }
  if (c.optimizer.nesterov && c.optimizer.momentum == 0.0 && report.wasSet("optimizer.nesterov")) {
    report.warning(report.keyWhere("optimizer.nesterov"), "optimizer.nesterov",
                   "has no effect with momentum 0");
  }
  if (c.optimizer.kind == train::OptimizerKind::kAdamw) {
    if (c.optimizer.nesterov && report.wasSet("optimizer.nesterov")) {
      report.error(report.keyWhere("optimizer.nesterov"), "optimizer.nesterov",
                   "optimizer.kind adamw has no Nesterov form (drop optimizer.nesterov)");
    }
    if (c.optimizer.momentumKind != train::MomentumKind::kLocal) {
      report.error(report.keyWhere("optimizer.momentum_kind"), "optimizer.momentum_kind",
                   "optimizer.kind adamw keeps each peer's moments local: quasi-global momentum "
                   "is defined for sgd only");
    }
  } else {
    // (A resolved config writes every key with its value: only a value other than the default
    // is a sign that AdamW was meant.)
    const OptimizerSection defaults;
    const std::pair<const char*, bool> adamwOnly[] = {
        {"optimizer.beta2", c.optimizer.beta2 != defaults.beta2},
        {"optimizer.eps", c.optimizer.eps != defaults.eps}};
    for (const auto& [key, changed] : adamwOnly) {
      if (changed && report.wasSet(key)) {
        report.warning(report.keyWhere(key), key,
                       "has no effect with optimizer.kind sgd (it is AdamW's)");
      }
    }
  }
}

// outer.*: an outer step on the round's pseudo-gradient, where nothing else owns that change.
void checkOuter(const Config& c, Report& report) {
  if (c.outer.optimizer == train::OuterKind::kNone) {
    for (const char* key : {"outer.lr", "outer.momentum"}) {
      if (report.wasSet(key) && !report.wasSet("outer.optimizer"))
        report.warning(report.keyWhere(key), key,
                       "has no effect without outer.optimizer (sgd or nesterov)");
    }
    return;
  }
  const Where where = report.keyWhere("outer.optimizer");
  const std::string kind(train::outerKindName(c.outer.optimizer));
  if (c.algorithm.name == AlgorithmKind::kGt) {
    report.error(where, "outer.optimizer",
                 kind +
                     " cannot be used with algorithm.name gt: the tracker follows the "
                     "network sum of the local directions, and an outer step moves the model "
                     "by what the tracker never saw");
  }
  if (c.optimizer.momentumKind == train::MomentumKind::kQuasiGlobal && c.optimizer.momentum > 0.0) {
    report.error(report.keyWhere("optimizer.momentum_kind"), "optimizer.momentum_kind",
                 "quasi-global momentum and outer.optimizer " + kind +
                     " are both a momentum over the round's model change across mixing: use "
                     "one (optimizer.momentum_kind local, or outer.optimizer none)");
  }
  if (c.outer.lr == 1.0 && c.outer.momentum == 0.0) {
    report.warning(where, "outer.optimizer",
                   "with outer.lr 1 and outer.momentum 0 the outer step is the identity: the "
                   "run is the one without an outer optimizer");
  } else if (c.outer.lr == 0.0) {
    report.error(report.keyWhere("outer.lr"), "outer.lr",
                 "0 keeps every peer at its initial model: the outer step never moves");
  } else if (c.workload.name != train::WorkloadKind::kExternal && c.algorithm.localSteps == 1 &&
             c.outer.momentum > 0.0 && c.optimizer.momentum > 0.0) {
    // (Through the API the caller's own steps between mix() calls are the inner steps.)
    report.warning(where, "outer.optimizer",
                   "with algorithm.local_steps 1 the outer momentum compounds optimizer.momentum "
                   "on every step (an effective step of about lr * outer.lr / ((1 - momentum) * "
                   "(1 - outer.momentum))); an outer optimizer is meant for many local steps a "
                   "round (DiLoCo: tens to hundreds)");
  }
}

// workload.*: the quadratic workload's data file exists (relative to the config file).
void checkWorkload(const Config& c, Report& report) {
  if (c.workload.name != train::WorkloadKind::kQuadratic) return;
  if (c.workload.data.empty()) {
    report.error(report.keyWhere("workload.name"), "workload.data",
                 "the quadratic workload needs a data file");
  } else if (!std::ifstream(report.pathInConfig(c.workload.data))) {
    report.error(report.keyWhere("workload.data"), "workload.data",
                 "cannot open \"" + c.workload.data + "\"");
  }
}

std::string faultItem(std::size_t i) { return "item " + std::to_string(i) + " ("; }

// Two events on one peer, or on one link, at the same time; a killed peer takes no later event.
// O(n log n): the events grouped by what they hit (a peer or a link, counted in rounds or seconds)
// and sorted by start; each overlaps the one of its group reaching furthest before it, if any does
// (comparing every pair took 3.2 GB for 3,000 events).
void checkFaultOverlaps(const std::vector<FaultEvent>& events, Report& report) {
  const Where where = report.keyWhere("faults.events");
  const std::string key = "faults.events";
  const auto target = [&](std::size_t i) {
    const FaultEvent& e = events[i];
    const bool link = e.kind == FaultKind::kLinkDown;
    const auto [a, b] = link ? std::minmax(e.linkA, e.linkB) : std::minmax(e.peer, e.peer);
    return std::make_tuple(e.byRound(), link, a, b);
  };
  std::vector<std::size_t> order(events.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](std::size_t i, std::size_t j) {
    return std::make_tuple(target(i), events[i].start(), i) <
           std::make_tuple(target(j), events[j].start(), j);
  });
  std::size_t furthest = 0;  // of the current group so far: the event that ends last
  for (std::size_t k = 0; k < order.size(); ++k) {
    const std::size_t j = order[k];
    if (k == 0 || target(order[k - 1]) != target(j)) {
      furthest = j;
      continue;
    }
    const FaultEvent& x = events[furthest];
    const FaultEvent& y = events[j];
    if (y.start() < x.end() && x.start() < y.end()) {
      const std::size_t first = std::min(furthest, j), second = std::max(furthest, j);
      report.error(where, key,
                   faultItem(first) + events[first].describe() + ") and " + faultItem(second) +
                       events[second].describe() + ") overlap on " +
                       (y.kind == FaultKind::kLinkDown ? "the same link" : "the same peer") +
                       (x.kind == FaultKind::kKill || y.kind == FaultKind::kKill
                            ? " (a killed peer stays dead)"
                            : ""));
    }
    if (y.end() > x.end()) furthest = j;
  }
}

// faults.events: every event names existing peers and links of the graph (`schedule`, when it was
// built), happens within the run, overlaps no other event on the same peer or link, and uses the
// unit of the others (rounds or seconds: a runner supports one, checked by the runner); a restart
// needs checkpoints.
void checkFaults(const Config& c, const topology::Schedule* schedule, Report& report) {
  const auto& events = c.faults.events;
  if (events.empty()) return;
  const Where where = report.keyWhere("faults.events");
  const std::string key = "faults.events";
  bool ranksOk = true;
  for (std::size_t i = 0; i < events.size(); ++i) {
    const FaultEvent& e = events[i];
    const std::string what = faultItem(i) + e.describe() + ")";
    if (e.byRound() != events.front().byRound()) {
      report.error(where, key,
                   what + " counts " + (e.byRound() ? "rounds" : "seconds") +
                       " but item 0 counts " + (events.front().byRound() ? "rounds" : "seconds") +
                       ": a schedule is by round (grapevine sim) or by time (grapevine launch "
                       "--emulate), not both");
    }
    const bool isLink = e.kind == FaultKind::kLinkDown;
    const int a = isLink ? e.linkA : e.peer;
    const int b = isLink ? e.linkB : e.peer;
    if (a >= c.peers.count || b >= c.peers.count) {
      report.error(where, key,
                   what + " names a peer >= peers.count (" + std::to_string(c.peers.count) + ")");
      ranksOk = false;
      continue;
    }
    if (isLink && schedule) {
      const auto na = schedule->allNeighbours(a);
      const auto nb = schedule->allNeighbours(b);
      if (std::find(na.begin(), na.end(), b) == na.end() &&
          std::find(nb.begin(), nb.end(), a) == nb.end()) {
        report.error(where, key,
                     what + ": " + std::to_string(a) + " and " + std::to_string(b) +
                         " are not neighbours in the graph (topology." +
                         std::string(topology::kindName(c.topology.kind)) + ")");
      }
    }
    if (e.byRound() && *e.atRound >= c.run.rounds) {
      report.error(where, key,
                   what + " never happens: run.rounds is " + std::to_string(c.run.rounds));
    }
    if (e.kind == FaultKind::kRestart) {
      if (c.checkpoint.every <= 0) {
        report.error(where, key,
                     what +
                         " needs checkpoint.every > 0: a restarted peer comes back from its last "
                         "checkpoint");
      } else if (e.byRound() && *e.atRound < c.checkpoint.every) {
        report.error(where, key,
                     what + " comes before the peer's first checkpoint (after round " +
                         std::to_string(c.checkpoint.every - 1) +
                         ", checkpoint.every): it would have nothing to come back from");
      }
    }
  }
  if (ranksOk) checkFaultOverlaps(events, report);
}

}  // namespace

void resolve(Config& c, const Report& report) {
  // Unset dims: the squarest a x b = n with a >= 2 (16 -> 4x4, 64 -> 8x8, 32 -> 4x8), so a sweep
  // over peers.count needs no per-count dims.
  const int n = c.peers.count;
  if (c.topology.kind == Kind::kTorus && !report.wasSet("topology.dims") &&
      c.topology.dims.empty() && n >= 4) {
    c.topology.dims = topology::squarestTorusDims(n);
  }
}

// algorithm.staleness: asynchronous rounds are built for CHOCO on a static graph, where a
// neighbour's replica is exact whatever round it is of; each refusal says why not elsewhere.
void checkStaleness(const Config& c, const topology::Schedule* schedule, Report& report) {
  if (c.algorithm.staleness == 0) return;
  const auto refuse = [&](const std::string& key, const std::string& why) {
    report.error(report.keyWhere("algorithm.staleness"), "algorithm.staleness",
                 std::to_string(c.algorithm.staleness) + " (asynchronous rounds) cannot be used " +
                     why + " (" + key + "); set algorithm.staleness: 0");
  };
  if (c.algorithm.name != AlgorithmKind::kChoco) {
    refuse("algorithm.name",
           "with algorithm.name " + std::string(algorithms::algorithmKindName(c.algorithm.name)) +
               ": it is built for choco, which mixes each neighbour's replica, exact whatever "
               "round its last message was of; the others mix what arrived in the round");
  }
  if (c.algorithm.overlap) {
    refuse("algorithm.overlap",
           "with overlap: a round that takes no local steps has no gradient to have computed "
           "ahead");
  }
  if (c.algorithm.robust != algorithms::RobustRule::kNone) {
    refuse("algorithm.robust",
           "with robust mixing: its radius compares the neighbours of one round");
  }
  if (c.optimizer.momentumKind != train::MomentumKind::kLocal) {
    refuse("optimizer.momentum_kind",
           "with quasi-global momentum: a round without local steps would feed it the "
           "mixing alone");
  }
  if (c.workload.name == train::WorkloadKind::kExternal) {
    refuse("workload.name",
           "with the external workload: through the API the caller takes the steps, which "
           "the engine cannot skip");
  }
  if (schedule && schedule->period() != 1) {
    refuse("topology.kind",
           "on a time-varying graph: a neighbour behind is of another round's graph");
  }
}

void check(const Config& c, Report& report, bool buildTopology) {
  // Peers first: without them no other rule means anything. The topology's own keys come after
  // every key the graph depends on, so the graph is built only from keys that passed.
  if (!checkPeers(c, report)) return;
  checkMonitoring(c, report);
  checkNetwork(c, report);
  const std::unique_ptr<topology::Schedule> schedule = checkTopology(c, report, buildTopology);
  checkSecurity(c, report);
  checkAlgorithm(c, report);
  checkRobust(c, schedule.get(), report);
  checkStaleness(c, schedule.get(), report);
  checkAveraged(c, schedule.get(), report);
  checkCompression(c, report);
  checkOptimizer(c, report);
  checkOuter(c, report);
  checkWorkload(c, report);
  checkFaults(c, schedule.get(), report);
}

}  // namespace grapevine::config
