// The config loader: every shipped config validates, every bad file gets compiler-style diagnostics
// naming file:line:col and the key, and no input crashes or hangs it.
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>

#include "runtime/config/loader.h"
#include "runtime/config/schema.h"
#include "tests/test_util/skip.h"

using namespace grapevine::config;
namespace fs = std::filesystem;

namespace {
LoadOptions noEnv() {
  LoadOptions o;
  o.useEnvironment = false;
  return o;
}

std::string allDiagnostics(const LoadResult& r) { return formatDiagnostics(r.diagnostics); }

LoadResult loadInvalid(const std::string& name) {
  return loadFile(std::string(GRAPEVINE_SOURCE_DIR) + "/tests/config/invalid/" + name, noEnv());
}

bool contains(const std::string& hay, const std::string& needle) {
  return hay.find(needle) != std::string::npos;
}
}  // namespace

TEST_CASE("every shipped config in configs/ loads and validates") {
  int count = 0;
  for (const auto& entry :
       fs::recursive_directory_iterator(std::string(GRAPEVINE_SOURCE_DIR) + "/configs")) {
    if (entry.path().extension() != ".yaml") continue;
    if (entry.path().parent_path().filename() == "sweeps")
      continue;  // sweep files, not run configs
    INFO(entry.path().string());
    LoadResult r = loadFile(entry.path().string(), noEnv());
    INFO(allDiagnostics(r));
    CHECK(r.ok());
    ++count;
  }
  CHECK(count >= 4);
}

TEST_CASE("ring8 has the values of its file and the defaults elsewhere") {
  LoadResult r = loadFile(std::string(GRAPEVINE_SOURCE_DIR) + "/configs/ring8.yaml", noEnv());
  REQUIRE(r.ok());
  const Config& c = r.config;
  CHECK(c.peers.count == 8);
  CHECK(c.peers.addresses()[7].port == 29507);
  CHECK(c.topology.kind == grapevine::topology::Kind::kRing);
  CHECK(c.compression.method == grapevine::compress::Method::kTopK);
  CHECK(c.compression.ratio == Approx(0.01));
  CHECK(c.optimizer.nesterov);
  CHECK(c.run.rounds == 2000);
  CHECK(c.transport.busyPoll == false);  // default
}

TEST_CASE("bad value: file:line:col, key path, expected and found") {
  LoadResult r = loadInvalid("bad_dims.yaml");
  CHECK_FALSE(r.ok());
  const std::string d = allDiagnostics(r);
  CHECK(contains(d,
                 "bad_dims.yaml:5:9: error: topology.dims: expected a list of positive integers, "
                 "found \"4x4\""));
}

TEST_CASE("unknown keys and sections suggest the closest name") {
  LoadResult r = loadInvalid("unknown_keys.yaml");
  const std::string d = allDiagnostics(r);
  INFO(d);
  CHECK(contains(d, ":3:13: error: topology.kidn: unknown key; did you mean 'topology.kind'?"));
  CHECK(contains(d, ":4:1: error: compresion: unknown section; did you mean 'compression'?"));
}

TEST_CASE("every problem is reported, not just the first") {
  LoadResult r = loadInvalid("wrong_types.yaml");
  const std::string d = allDiagnostics(r);
  INFO(d);
  CHECK(contains(d, "run.rounds: expected an integer in [1, 1000000000], found \"many\""));
  CHECK(contains(d, "peers.count: expected an integer in [1, 100000], found \"-3\""));
  CHECK(contains(d, "optimizer.lr: expected a number"));
  CHECK(contains(d, "optimizer.nesterov: expected true or false, found \"maybe\""));
  CHECK(contains(d, "compression.method: expected one of none, fp16"));
  CHECK(contains(d, "compression.ratio: expected a number in [1e-06, 1], found \"2.0\""));
  CHECK(r.diagnostics.size() == 6);
}

TEST_CASE("duplicate keys are errors naming the first occurrence") {
  const std::string d = allDiagnostics(loadInvalid("duplicate_keys.yaml"));
  CHECK(contains(d, ":4:1: error: topology: duplicate key (first set at line 3)"));
}

TEST_CASE("a disconnected graph is refused") {
  const std::string d = allDiagnostics(loadInvalid("disconnected.yaml"));
  INFO(d);
  CHECK(contains(d, "disconnected"));
}

TEST_CASE("a graph too dense to build is refused, not built") {
  const std::string d = allDiagnostics(loadInvalid("huge_complete.yaml"));
  INFO(d);
  CHECK(contains(d, "complete: 20000 peers make 199990000 peer pairs to build, above the limit"));
}

TEST_CASE("peers with the same host:port are refused") {
  const std::string d = allDiagnostics(loadInvalid("duplicate_peers.yaml"));
  CHECK(contains(d, "peers.list: peers 0 and 2 have the same address 10.0.0.1:29500"));
}

TEST_CASE("peers.rendezvous: refused beside a peers list; host auto needs it") {
  LoadOptions o = noEnv();
  o.overrides = {"peers.rendezvous=/shared/rdv"};
  const std::string listed = allDiagnostics(loadString(
      "peers:\n  - { host: 10.0.0.1, port: 29500 }\n  - { host: 10.0.0.2, port: 29500 }\n",
      "r.yaml", o));
  CHECK(contains(listed, "peers.rendezvous: cannot be combined with an explicit peers list"));
  const std::string autoHost =
      allDiagnostics(loadString("peers: { count: 4, host: auto }\n", "a.yaml", noEnv()));
  CHECK(contains(autoHost, "peers.host: `auto` (this machine's address) needs peers.rendezvous"));
  auto ok =
      loadString("peers: { count: 4, host: auto, rendezvous: /shared/rdv }\n", "a.yaml", noEnv());
  INFO(allDiagnostics(ok));
  CHECK(ok.ok());
  CHECK(ok.config.peers.rendezvous == "/shared/rdv");
}

TEST_CASE("torus sizes must multiply to the peer count") {
  const std::string d = allDiagnostics(loadInvalid("torus_mismatch.yaml"));
  CHECK(contains(d, "topology.dims: sizes multiply to 9 but peers.count is 8"));
}

TEST_CASE("a torus without dims takes the squarest factorisation") {
  auto dims = [](int n) {
    auto r = loadString("peers: { count: " + std::to_string(n) + " }\ntopology: { kind: torus }\n",
                        "t.yaml", noEnv());
    return r.ok() ? r.config.topology.dims : std::vector<int>{};
  };
  CHECK(dims(16) == std::vector<int>{4, 4});
  CHECK(dims(64) == std::vector<int>{8, 8});
  CHECK(dims(32) == std::vector<int>{4, 8});
  CHECK(dims(6) == std::vector<int>{2, 3});
  auto prime = loadString("peers: { count: 13 }\ntopology: { kind: torus }\n", "t.yaml", noEnv());
  CHECK_FALSE(prime.ok());
  CHECK(contains(allDiagnostics(prime), "peers.count 13 has no a x b factorisation"));
  auto tiny = loadString("peers: { count: 2 }\ntopology: { kind: torus }\n", "t.yaml", noEnv());
  CHECK_FALSE(tiny.ok());
}

TEST_CASE("network overrides: per peer and per link, validated") {
  const std::string base =
      "peers: { count: 4 }\ntopology: { kind: ring }\nnetwork:\n  bandwidth_mbit: 100\n";
  auto ok = loadString(base +
                           "  peers: [{rank: 3, bandwidth_mbit: 10, compute_scale: 2}]\n"
                           "  edges: [{between: [0, 1], latency_ms: 50, loss_percent: 1}]\n",
                       "net.yaml", noEnv());
  REQUIRE(ok.ok());
  CHECK(ok.config.network.peers.size() == 1);
  CHECK(ok.config.network.link(2, 3).bandwidthMbit == 10);
  CHECK(ok.config.network.link(1, 2).bandwidthMbit == 100);
  CHECK(ok.config.network.link(1, 0).latencyMs == 50);
  CHECK(ok.config.network.link(1, 0).lossPercent == 1);
  CHECK(ok.config.network.computeScaleOf(3) == 2);
  // Shown as YAML that loads back to the same links.
  const KeyDef* k = findKey("network.peers");
  REQUIRE(k);
  CHECK(k->show(ok.config) == "[{rank: 3, bandwidth_mbit: 10, compute_scale: 2}]");

  auto unknown =
      loadString(base + "  peers: [{rank: 1, bandwith_mbit: 10}]\n", "net.yaml", noEnv());
  CHECK_FALSE(unknown.ok());
  CHECK(contains(allDiagnostics(unknown),
                 "net.yaml:5:10: error: network.peers: expected a list of {rank: R, ...}"));
  auto range =
      loadString(base + "  edges: [{between: [0, 2], loss_percent: 150}]\n", "net.yaml", noEnv());
  CHECK_FALSE(range.ok());
  CHECK(contains(allDiagnostics(range), "network.edges: expected"));
  auto self =
      loadString(base + "  edges: [{between: [2, 2], latency_ms: 5}]\n", "net.yaml", noEnv());
  CHECK_FALSE(self.ok());
  auto rank = loadString(base + "  peers: [{rank: 9, latency_ms: 5}]\n", "net.yaml", noEnv());
  CHECK_FALSE(rank.ok());
  CHECK(contains(allDiagnostics(rank), "network.peers: rank 9 is not a peer (peers.count is 4)"));
  auto edge =
      loadString(base + "  edges: [{between: [0, 7], latency_ms: 5}]\n", "net.yaml", noEnv());
  CHECK(contains(allDiagnostics(edge), "network.edges: [0, 7] names a peer >= peers.count (4)"));
}

TEST_CASE("transport.ucx.rndv_thresh: 2 MiB by default, bytes, 0 for UCX's own, never negative") {
  const std::string base = "peers: { count: 4 }\ntopology: { kind: ring }\n";
  auto def = loadString(base, "rndv.yaml", noEnv());
  REQUIRE(def.ok());
  CHECK(def.config.transport.ucxRndvThresh == 2 * 1024 * 1024);
  auto set = loadString(base + "transport: { ucx: { rndv_thresh: 0 } }\n", "rndv.yaml", noEnv());
  REQUIRE(set.ok());
  CHECK(set.config.transport.ucxRndvThresh == 0);
  auto bad = loadString(base + "transport: { ucx: { rndv_thresh: -1 } }\n", "rndv.yaml", noEnv());
  CHECK_FALSE(bad.ok());
  CHECK(contains(allDiagnostics(bad), "transport.ucx.rndv_thresh"));
  auto word = loadString(base + "transport: { ucx: { rndv_thresh: 2mb } }\n", "rndv.yaml", noEnv());
  CHECK_FALSE(word.ok());
  CHECK(contains(allDiagnostics(word), "transport.ucx.rndv_thresh"));
}

TEST_CASE("network.node_bandwidth_mbit: default, per peer, refused where it means nothing") {
  const std::string base = "peers: { count: 4 }\ntopology: { kind: ring }\nnetwork:\n";
  auto none = loadString(base + "  bandwidth_mbit: 100\n", "cap.yaml", noEnv());
  REQUIRE(none.ok());
  CHECK_FALSE(none.config.network.anyNodeCap());
  CHECK(none.config.network.nodeBandwidthOf(2) == 0);

  auto ok =
      loadString(base +
                     "  node_bandwidth_mbit: 100\n"
                     "  peers: [{rank: 1, node_bandwidth_mbit: 20}, {rank: 2, latency_ms: 5}]\n",
                 "cap.yaml", noEnv());
  INFO(allDiagnostics(ok));
  REQUIRE(ok.ok());
  CHECK(ok.config.network.anyNodeCap());
  CHECK(ok.config.network.nodeBandwidthOf(0) == 100);
  CHECK(ok.config.network.nodeBandwidthOf(1) == 20);  // the peer's own wins
  CHECK(ok.config.network.nodeBandwidthOf(2) == 100);
  CHECK(ok.config.network.link(0, 1).bandwidthMbit == 0);  // a link's own bandwidth is untouched
  const KeyDef* k = findKey("network.peers");
  REQUIRE(k);
  CHECK(k->show(ok.config) == "[{rank: 1, node_bandwidth_mbit: 20}, {rank: 2, latency_ms: 5}]");
  // Only a per-peer cap: still a cap.
  auto onlyPeer =
      loadString(base + "  peers: [{rank: 3, node_bandwidth_mbit: 50}]\n", "cap.yaml", noEnv());
  REQUIRE(onlyPeer.ok());
  CHECK(onlyPeer.config.network.anyNodeCap());
  CHECK(onlyPeer.config.network.nodeBandwidthOf(3) == 50);
  CHECK(onlyPeer.config.network.nodeBandwidthOf(0) == 0);

  auto negative = loadString(base + "  node_bandwidth_mbit: -5\n", "cap.yaml", noEnv());
  CHECK_FALSE(negative.ok());
  CHECK(contains(allDiagnostics(negative), "network.node_bandwidth_mbit: expected a number in"));
  auto word = loadString(base + "  node_bandwidth_mbit: fast\n", "cap.yaml", noEnv());
  CHECK_FALSE(word.ok());
  CHECK(contains(allDiagnostics(word), "network.node_bandwidth_mbit"));
  auto huge =
      loadString(base + "  peers: [{rank: 0, node_bandwidth_mbit: 2e6}]\n", "cap.yaml", noEnv());
  CHECK_FALSE(huge.ok());
  CHECK(contains(allDiagnostics(huge), "node_bandwidth_mbit [0, 1e6]"));
  // An interface belongs to a peer, not to a link.
  auto onEdge = loadString(base + "  edges: [{between: [0, 1], node_bandwidth_mbit: 10}]\n",
                           "cap.yaml", noEnv());
  CHECK_FALSE(onEdge.ok());
  CHECK(contains(allDiagnostics(onEdge), "node_bandwidth_mbit is a peer's: network.peers"));
}

TEST_CASE("tabs, syntax errors, empty files and cross-key rules") {
  CHECK(contains(allDiagnostics(loadInvalid("tabs.yaml")),
                 "tabs.yaml:2:1: error: tab character in indentation"));
  CHECK(contains(allDiagnostics(loadInvalid("syntax.yaml")), "error: YAML syntax:"));
  CHECK(contains(allDiagnostics(loadInvalid("empty.yaml")), "the file is empty"));
  CHECK(contains(allDiagnostics(loadInvalid("dsgd_compressed.yaml")),
                 "compression.method: dsgd exchanges full models uncompressed"));
  CHECK(contains(allDiagnostics(loadFile("/nonexistent/x.yaml", noEnv())), "cannot open the file"));
  // A directory, a device that never ends, a pipe: refused or read within the limit (issue 41).
  CHECK(contains(allDiagnostics(loadFile("/tmp", noEnv())), "is a directory"));
  {
    LoadOptions small = noEnv();
    small.maxFileBytes = 100000;
    CHECK(contains(allDiagnostics(loadFile("/dev/zero", small)), "the limit is 100000"));
  }
}

TEST_CASE("error feedback is refused where the algorithm already carries the residual") {
  const std::string choco = allDiagnostics(loadInvalid("choco_error_feedback.yaml"));
  CHECK(contains(choco, "choco_error_feedback.yaml:5:"));
  CHECK(contains(choco,
                 "error: compression.error_feedback: true cannot be used with "
                 "algorithm.name: choco: CHOCO's public copies already carry the "
                 "compression residual"));
  CHECK(contains(choco, "set compression.error_feedback: false"));
  const std::string deep = allDiagnostics(loadInvalid("deepsqueeze_error_feedback.yaml"));
  CHECK(contains(deep,
                 "error: compression.error_feedback: true cannot be used with "
                 "algorithm.name: deepsqueeze: DeepSqueeze already feeds its compression "
                 "error back"));
  // The same configs without error feedback are fine; dsgd (uncompressed) only gets a warning.
  const std::string ok =
      "peers: { count: 8 }\nalgorithm: { name: choco }\n"
      "compression: { method: sign, error_feedback: false }\n";
  CHECK(loadString(ok, "ok.yaml", noEnv()).ok());
  const auto dsgd = loadString(
      "peers: { count: 4 }\nalgorithm: { name: dsgd }\n"
      "compression: { error_feedback: true }\n",
      "dsgd.yaml", noEnv());
  CHECK(dsgd.ok());
  CHECK(contains(allDiagnostics(dsgd), "warning: compression.error_feedback: has no effect"));
}

TEST_CASE("topology.weights: lazy-metropolis validates, and is refused where weights are fixed") {
  CHECK(loadString("peers: { count: 8 }\ntopology: { kind: ring, weights: lazy-metropolis }\n",
                   "lazy.yaml", noEnv())
            .ok());
  const auto one = loadString(
      "peers: { count: 8 }\ntopology: { kind: one-peer-exponential, weights: lazy-metropolis }\n",
      "one.yaml", noEnv());
  CHECK_FALSE(one.ok());
  const std::string d = allDiagnostics(one);
  INFO(d);
  CHECK(contains(d, "lazy-metropolis"));
  CHECK(contains(d, "fixed at 1/2"));
}

TEST_CASE("algorithm.overlap_rounds outside overlapped push-sum: a warning unless it is 1") {
  const auto three = loadString(
      "peers: { count: 4 }\nalgorithm: { name: dsgd, overlap_rounds: 3 }\n"
      "compression: { method: none }\n",
      "three.yaml", noEnv());
  CHECK(three.ok());
  CHECK(contains(allDiagnostics(three), "warning: algorithm.overlap_rounds: has no effect"));
  // 1 (the default) is what a resolved config (toYaml) writes for every run: no warning.
  const auto one = loadString(
      "peers: { count: 4 }\nalgorithm: { name: dsgd, overlap_rounds: 1 }\n"
      "compression: { method: none }\n",
      "one.yaml", noEnv());
  CHECK(one.ok());
  CHECK(allDiagnostics(one).empty());
  const auto again = loadString(toYaml(one.config), "again.yaml", noEnv());
  CHECK(allDiagnostics(again).empty());
}

TEST_CASE("outer.*: refused where it cannot work, warned where it does nothing, naming the key") {
  const auto load = [](const std::string& extra) {
    return loadString("peers: { count: 4 }\nalgorithm: { name: dsgd, local_steps: 8 }\n" + extra,
                      "outer.yaml", noEnv());
  };
  const auto ok = load("outer: { optimizer: nesterov, lr: 0.7, momentum: 0.9 }\n");
  CHECK(ok.ok());
  CHECK(allDiagnostics(ok).empty());
  CHECK(ok.config.outer.optimizer == grapevine::train::OuterKind::kNesterov);
  // A resolved config writes every key: it loads without a word, as the run it came from.
  const auto again = loadString(toYaml(ok.config), "again.yaml", noEnv());
  CHECK(allDiagnostics(again).empty());
  CHECK(again.config.outer.lr == 0.7);

  const auto gt =
      loadString("peers: { count: 4 }\nalgorithm: { name: gt }\nouter: { optimizer: sgd }\n",
                 "gt.yaml", noEnv());
  CHECK_FALSE(gt.ok());
  CHECK(contains(allDiagnostics(gt),
                 "error: outer.optimizer: sgd cannot be used with "
                 "algorithm.name gt: the tracker"));
  const auto qg = load(
      "optimizer: { momentum_kind: quasi-global, nesterov: false }\n"
      "outer: { optimizer: nesterov }\n");
  CHECK_FALSE(qg.ok());
  CHECK(contains(allDiagnostics(qg),
                 "error: optimizer.momentum_kind: quasi-global momentum and "
                 "outer.optimizer nesterov are both"));
  const auto zero = load("outer: { optimizer: sgd, lr: 0 }\n");
  CHECK_FALSE(zero.ok());
  CHECK(contains(allDiagnostics(zero), "error: outer.lr: 0 keeps every peer"));
  const auto bad = load("outer: { optimizer: adam }\n");
  CHECK_FALSE(bad.ok());
  CHECK(contains(allDiagnostics(bad), "outer.optimizer"));

  const auto unused = load("outer: { lr: 0.5, momentum: 0.5 }\n");
  CHECK(unused.ok());
  CHECK(
      contains(allDiagnostics(unused), "warning: outer.lr: has no effect without outer.optimizer"));
  CHECK(contains(allDiagnostics(unused),
                 "warning: outer.momentum: has no effect without outer.optimizer"));
  const auto identity = load("outer: { optimizer: sgd, lr: 1, momentum: 0 }\n");
  CHECK(identity.ok());
  CHECK(contains(allDiagnostics(identity),
                 "warning: outer.optimizer: with outer.lr 1 and "
                 "outer.momentum 0 the outer step is the identity"));
  const auto oneStep =
      loadString("peers: { count: 4 }\nalgorithm: { name: dsgd }\nouter: { optimizer: nesterov }\n",
                 "one.yaml", noEnv());
  CHECK(oneStep.ok());
  CHECK(contains(allDiagnostics(oneStep),
                 "warning: outer.optimizer: with algorithm.local_steps 1 "
                 "the outer momentum compounds optimizer.momentum"));
}

TEST_CASE("allreduce and diloco: refused where they cannot run, naming the key and why") {
  const auto load = [](const std::string& yaml) { return loadString(yaml, "ar.yaml", noEnv()); };
  const auto ok =
      load("peers: { count: 8 }\nalgorithm: { name: allreduce }\ncompression: { method: none }\n");
  CHECK(ok.ok());
  CHECK(allDiagnostics(ok).empty());
  const auto diloco = load(
      "peers: { count: 8 }\nalgorithm: { name: diloco, local_steps: 50 }\n"
      "compression: { method: none }\nouter: { optimizer: nesterov }\n");
  CHECK(diloco.ok());
  CHECK(allDiagnostics(diloco).empty());
  const auto again = loadString(toYaml(diloco.config), "again.yaml", noEnv());
  CHECK(allDiagnostics(again).empty());

  const auto noOuter =
      load("peers: { count: 8 }\nalgorithm: { name: diloco }\ncompression: { method: none }\n");
  CHECK_FALSE(noOuter.ok());
  CHECK(contains(allDiagnostics(noOuter),
                 "error: algorithm.name: diloco is the exact average "
                 "each round with an outer optimizer"));
  const auto compressed =
      load("peers: { count: 8 }\nalgorithm: { name: allreduce }\ncompression: { method: sign }\n");
  CHECK_FALSE(compressed.ok());
  CHECK(contains(allDiagnostics(compressed),
                 "error: compression.method: must be none with algorithm.name allreduce"));
  const auto overlap = load(
      "peers: { count: 8 }\nalgorithm: { name: allreduce, overlap: true }\n"
      "compression: { method: none }\n");
  CHECK_FALSE(overlap.ok());
  CHECK(contains(allDiagnostics(overlap),
                 "error: algorithm.overlap: cannot be used with "
                 "algorithm.name allreduce"));
  const auto robust = load(
      "peers: { count: 8 }\nalgorithm: { name: allreduce, robust: clip }\n"
      "compression: { method: none }\n");
  CHECK_FALSE(robust.ok());
  CHECK(contains(allDiagnostics(robust), "it averages every model exactly"));
  // A graph without the ring whose spanning tree is too deep: a path of 20 peers.
  std::string path =
      "peers: { count: 20 }\nalgorithm: { name: allreduce }\n"
      "compression: { method: none }\ntopology: { kind: edges, edges: [";
  for (int i = 0; i + 1 < 20; ++i)
    path += (i ? ", [" : "[") + std::to_string(i) + ", " + std::to_string(i + 1) + "]";
  path += "] }\n";
  const auto deep = load(path);
  CHECK_FALSE(deep.ok());
  CHECK(contains(allDiagnostics(deep), "error: topology.kind: allreduce averages over the ring"));
  const auto torus = load(
      "peers: { count: 16 }\nalgorithm: { name: allreduce }\ncompression: { method: none }\n"
      "topology: { kind: torus }\n");
  CHECK(torus.ok());  // no ring 0-1-...-15, but a spanning tree 4 deep
}

TEST_CASE("peers' hosts must be numeric addresses: a hostname is refused, naming the key") {
  const auto named = loadString("peers: { count: 2, host: node1 }\n", "named.yaml", noEnv());
  CHECK_FALSE(named.ok());
  CHECK(contains(allDiagnostics(named), "error: peers.host: \"node1\": hosts must be numeric IP"));
  const auto list = loadString(
      "peers:\n  - { host: 10.0.0.1, port: 29500 }\n"
      "  - { host: node2, port: 29500 }\n",
      "list.yaml", noEnv());
  CHECK_FALSE(list.ok());
  CHECK(contains(allDiagnostics(list), "error: peers.list: peer 1's host \"node2\""));
  for (const char* ok : {"127.0.0.1", "localhost", "::1", "10.1.2.3"}) {
    INFO(ok);
    CHECK(loadString(std::string("peers: { count: 2, host: \"") + ok + "\" }\n", "ok.yaml", noEnv())
              .ok());
  }
}

TEST_CASE("control ports inside this machine's ephemeral port range get a warning") {
  std::ifstream in("/proc/sys/net/ipv4/ip_local_port_range");
  int low = 0, high = 0;
  if (!(in >> low >> high) || low <= 1100) {
    GV_SKIP("no ephemeral port range readable in /proc/sys/net/ipv4/ip_local_port_range");
  }
  const auto inside = loadString(
      "peers: { count: 4, base_port: " + std::to_string(low + 10) + " }\n", "inside.yaml", noEnv());
  CHECK(inside.ok());  // a warning, not an error: the peers may run on other machines
  CHECK(contains(allDiagnostics(inside),
                 "warning: peers.base_port: control ports " + std::to_string(low + 10) + "-" +
                     std::to_string(low + 13) + " overlap this machine's ephemeral port range"));
  const auto below = loadString(
      "peers: { count: 4, base_port: " + std::to_string(low - 100) + " }\n", "below.yaml", noEnv());
  CHECK(below.ok());
  CHECK_FALSE(contains(allDiagnostics(below), "ephemeral"));
  const auto list =
      loadString("peers:\n  - { host: 10.0.0.1, port: 1000 }\n  - { host: 10.0.0.2, port: " +
                     std::to_string(high) + " }\n",
                 "list.yaml", noEnv());
  CHECK(contains(allDiagnostics(list),
                 "warning: peers.list: control ports 1000-" + std::to_string(high)));
}

TEST_CASE("hostile input: deep nesting, huge files, binary garbage never crash") {
  SECTION("deep flow nesting") {
    std::string deep = "run: " + std::string(100000, '[') + std::string(100000, ']') + "\n";
    LoadResult r = loadString(deep, "deep.yaml", noEnv());
    CHECK(contains(allDiagnostics(r), "nested deeper than 32 levels"));
  }
  SECTION("deep block nesting") {
    std::string deep;
    for (int i = 0; i < 500; ++i) deep += std::string(2 * i, ' ') + "k" + std::to_string(i) + ":\n";
    LoadResult r = loadString(deep, "deepblock.yaml", noEnv());
    CHECK_FALSE(r.ok());
  }
  SECTION("huge file") {
    LoadOptions o = noEnv();
    o.maxFileBytes = 1000;
    std::string big = "peers: { count: 4 }\n" + std::string(5000, '#') + "\n";
    CHECK(contains(allDiagnostics(loadString(big, "big.yaml", o)), "the limit is 1000"));
  }
  SECTION("binary garbage, seeded") {
    std::mt19937 rng(1234);
    for (int trial = 0; trial < 200; ++trial) {
      std::string junk(1 + rng() % 400, '\0');
      for (auto& ch : junk) ch = static_cast<char>(rng());
      LoadResult r = loadString(junk, "junk.yaml", noEnv());
      CHECK_FALSE(r.ok());
    }
  }
  SECTION("mutated valid config, seeded: never crashes, errors carry a location or key") {
    std::ifstream in(std::string(GRAPEVINE_SOURCE_DIR) + "/configs/ring8.yaml");
    std::stringstream ss;
    ss << in.rdbuf();
    const std::string base = ss.str();
    std::mt19937 rng(99);
    const std::string alphabet = "{}[]:,-#\"' \n\tabc019.";
    for (int trial = 0; trial < 300; ++trial) {
      std::string m = base;
      for (int k = 0; k < 3; ++k) m[rng() % m.size()] = alphabet[rng() % alphabet.size()];
      LoadResult r = loadString(m, "mut.yaml", noEnv());
      for (const auto& d : r.diagnostics) CHECK(!d.message.empty());
    }
  }
}

TEST_CASE("precedence: defaults < YAML < environment < --set") {
  const std::string yaml =
      "peers: { count: 16 }\ntopology: { kind: ring }\noptimizer: { lr: 0.2 }\n";
  std::map<std::string, std::string> env = {{"GRAPEVINE_TOPOLOGY_KIND", "torus"},
                                            {"GRAPEVINE_TOPOLOGY_DIMS", "[4, 4]"},
                                            {"GRAPEVINE_OPTIMIZER_LR", "0.3"}};
  LoadOptions o;
  o.getenv = [&env](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  };
  o.overrides = {"optimizer.lr=0.4"};
  LoadResult r = loadString(yaml, "p.yaml", o);
  INFO(allDiagnostics(r));
  REQUIRE(r.ok());
  CHECK(r.config.topology.kind == grapevine::topology::Kind::kTorus);
  CHECK(r.config.topology.dims == std::vector<int>{4, 4});
  CHECK(r.config.optimizer.lr == Approx(0.4));
  CHECK(r.config.optimizer.momentum == Approx(0.9));  // default

  env["GRAPEVINE_OPTIMIZER_LR"] = "fast";
  o.overrides = {"optimizer.lrr=1"};
  LoadResult bad = loadString(yaml, "p.yaml", o);
  const std::string d = allDiagnostics(bad);
  CHECK(contains(d, "environment GRAPEVINE_OPTIMIZER_LR: error: optimizer.lr: expected a number"));
  CHECK(contains(d, "optimizer.lrr: unknown key; did you mean 'optimizer.lr'?"));
}

TEST_CASE("the schema table is complete and agrees with the config defaults") {
  const Config defaults;
  for (const auto& k : schema()) {
    INFO(k.path);
    CHECK(!k.doc.empty());
    CHECK(k.apply);
    CHECK(k.show);
    if (k.optional || k.required) continue;
    // Feeding each default back through the key's parser reproduces it.
    Config c;
    YAML::Node n = YAML::Load(k.show(defaults));
    CHECK_FALSE(k.apply(c, n).has_value());
    CHECK(k.show(c) == k.show(defaults));
  }
  // docs/config.md documents every key (it is generated from this table: grapevine config --explain
  // --markdown).
  std::ifstream in(std::string(GRAPEVINE_SOURCE_DIR) + "/docs/config.md");
  std::stringstream ss;
  ss << in.rdbuf();
  for (const auto& k : schema()) {
    INFO(k.path);
    CHECK(contains(ss.str(), "`" + k.path + "`"));
  }
}

TEST_CASE("each section's keys are contiguous in the schema table (toYaml writes a section once)") {
  std::map<std::string, std::size_t> lastIndex;
  std::string previous;
  std::size_t i = 0;
  for (const auto& k : schema()) {
    const std::string section = k.path.substr(0, k.path.find('.'));
    INFO(k.path);
    if (section != previous) CHECK(lastIndex.count(section) == 0);  // a section seen before, left
    lastIndex[section] = i++;
    previous = section;
  }
}

TEST_CASE("toYaml round-trips through the loader") {
  LoadResult r = loadFile(std::string(GRAPEVINE_SOURCE_DIR) + "/configs/torus4x4.yaml", noEnv());
  REQUIRE(r.ok());
  LoadResult again = loadString(toYaml(r.config), "again.yaml", noEnv());
  INFO(toYaml(r.config));
  INFO(allDiagnostics(again));
  REQUIRE(again.ok());
  CHECK(toYaml(again.config) == toYaml(r.config));
}

TEST_CASE("algorithm.consensus_step: auto by default, a number or auto when set") {
  LoadResult byDefault = loadString("peers: { count: 4 }\n", "d.yaml", noEnv());
  REQUIRE(byDefault.ok());
  CHECK_FALSE(byDefault.config.algorithm.consensusStep.has_value());
  const KeyDef* key = findKey("algorithm.consensus_step");
  REQUIRE(key != nullptr);
  CHECK(key->show(byDefault.config) == "auto");
  CHECK(key->typeName() == "number or auto");

  LoadResult number =
      loadString("peers: { count: 4 }\nalgorithm: { consensus_step: 0.25 }\n", "n.yaml", noEnv());
  REQUIRE(number.ok());
  REQUIRE(number.config.algorithm.consensusStep.has_value());
  CHECK(*number.config.algorithm.consensusStep == 0.25);
  CHECK(key->show(number.config) == "0.25");

  LoadOptions o = noEnv();
  o.overrides = {"algorithm.consensus_step=auto"};
  LoadResult overridden =
      loadString("peers: { count: 4 }\nalgorithm: { consensus_step: 0.25 }\n", "o.yaml", o);
  REQUIRE(overridden.ok());
  CHECK_FALSE(overridden.config.algorithm.consensusStep.has_value());
  // toYaml writes `auto` back so that it loads again.
  LoadResult again = loadString(toYaml(overridden.config), "again.yaml", noEnv());
  REQUIRE(again.ok());
  CHECK_FALSE(again.config.algorithm.consensusStep.has_value());

  for (const char* bad : {"1.5", "-0.1", "automatic", "[0.1]"}) {
    INFO(bad);
    LoadResult r =
        loadString(std::string("peers: { count: 4 }\nalgorithm: { consensus_step: ") + bad + " }\n",
                   "b.yaml", noEnv());
    CHECK_FALSE(r.ok());
    CHECK(contains(allDiagnostics(r),
                   "algorithm.consensus_step: expected a number in [0, 1] or auto"));
  }
}

TEST_CASE("an external workload needs local_steps 1 (every API step is one round)") {
  LoadResult r = loadInvalid("external_local_steps.yaml");
  CHECK_FALSE(r.ok());
  const std::string d = allDiagnostics(r);
  INFO(d);
  CHECK(contains(d,
                 "external_local_steps.yaml:7:3: error: algorithm.local_steps: must be 1 with "
                 "workload.name external"));
}

TEST_CASE("checkpoint: off by default, keep >= 1, taken by an external workload") {
  auto off = loadString("peers: { count: 2 }\n", "k.yaml", noEnv());
  REQUIRE(off.ok());
  CHECK(off.config.checkpoint.every == 0);
  CHECK(off.config.checkpoint.keep == 2);
  CHECK(off.config.checkpoint.dir.empty());
  CHECK(off.config.checkpoint.background);
  auto on = loadString(
      "peers: { count: 2 }\ncheckpoint: { every: 50, dir: /tmp/ck, keep: 3, background: false }\n",
      "k.yaml", noEnv());
  REQUIRE(on.ok());
  CHECK(on.config.checkpoint.every == 50);
  CHECK(on.config.checkpoint.dir == "/tmp/ck");
  CHECK(on.config.checkpoint.keep == 3);
  CHECK_FALSE(on.config.checkpoint.background);
  auto notBool = loadString("peers: { count: 2 }\ncheckpoint: { every: 5, background: maybe }\n",
                            "k.yaml", noEnv());
  CHECK_FALSE(notBool.ok());
  CHECK(contains(allDiagnostics(notBool), "checkpoint.background"));
  auto keep0 =
      loadString("peers: { count: 2 }\ncheckpoint: { every: 5, keep: 0 }\n", "k.yaml", noEnv());
  CHECK_FALSE(keep0.ok());
  CHECK(contains(allDiagnostics(keep0), "checkpoint.keep"));
  auto external =
      loadString("peers: { count: 2 }\nworkload: { name: external }\ncheckpoint: { every: 5 }\n",
                 "k.yaml", noEnv());
  // A program through the API checkpoints Grapevine's side too (Options::resume continues it).
  INFO(allDiagnostics(external));
  CHECK(external.ok());
}

TEST_CASE("monitoring.prometheus_port: off by default; refused past 65535 or on the peers' ports") {
  const std::string base = "peers: { count: 4, base_port: 29500 }\ntopology: { kind: ring }\n";
  auto off = loadString(base, "m.yaml", noEnv());
  REQUIRE(off.ok());
  CHECK(off.config.monitoring.prometheusPort == 0);
  auto on = loadString(base + "monitoring: { prometheus_port: 29508 }\n", "m.yaml", noEnv());
  INFO(allDiagnostics(on));
  CHECK(on.ok());  // 29508..29511 is just past the 2 x 4 ports the peers reserve
  CHECK(on.config.monitoring.prometheusPort == 29508);

  auto past = loadString(base + "monitoring: { prometheus_port: 65533 }\n", "m.yaml", noEnv());
  CHECK_FALSE(past.ok());
  CHECK(contains(allDiagnostics(past),
                 "monitoring.prometheus_port: 65533 + one port for each of 4 peers passes 65535"));
  auto overlap = loadString(base + "monitoring: { prometheus_port: 29505 }\n", "m.yaml", noEnv());
  CHECK_FALSE(overlap.ok());
  CHECK(contains(allDiagnostics(overlap),
                 "monitoring.prometheus_port: ports 29505..29508 overlap the peers' ports "
                 "29500..29507 (peers.base_port) on host 127.0.0.1"));
  auto below = loadString(base + "monitoring: { prometheus_port: 29497 }\n", "m.yaml", noEnv());
  CHECK_FALSE(below.ok());  // 29497..29500 reaches peer 0's control port

  // It listens on loopback unless told otherwise; the build id only when asked.
  CHECK(off.config.monitoring.prometheusHost == "127.0.0.1");
  CHECK_FALSE(off.config.monitoring.prometheusBuildInfo);
  for (const char* host : {"peer", "0.0.0.0", "10.1.2.3"}) {
    auto h =
        loadString(base + "monitoring: { prometheus_port: 29508, prometheus_host: " + host + " }\n",
                   "m.yaml", noEnv());
    INFO(host << ": " << allDiagnostics(h));
    CHECK(h.ok());
  }
  auto name = loadString(base + "monitoring: { prometheus_port: 29508, prometheus_host: myhost }\n",
                         "m.yaml", noEnv());
  CHECK_FALSE(name.ok());
  CHECK(contains(allDiagnostics(name), "monitoring.prometheus_host: 'myhost' is neither"));

  // With a peers list only a port of the same host counts.
  const std::string list =
      "peers:\n  - { host: 10.0.0.1, port: 9001 }\n  - { host: 10.0.0.2, port: 9000 }\n"
      "topology: { kind: ring }\n";
  // Peer 0 serves on 10.0.0.1:9000 and peer 1 on 10.0.0.2:9001: each port is taken only on the
  // other host.
  auto other = loadString(list + "monitoring: { prometheus_port: 9000 }\n", "l.yaml", noEnv());
  INFO(allDiagnostics(other));
  CHECK(other.ok());
  auto same = loadString(list + "monitoring: { prometheus_port: 9001 }\n", "l.yaml", noEnv());
  CHECK_FALSE(same.ok());
  CHECK(contains(allDiagnostics(same),
                 "monitoring.prometheus_port: peer 0's metrics port 9001 is peer 0's port in "
                 "peers.list (host 10.0.0.1)"));
}

TEST_CASE("gt refuses error feedback, local steps and the external workload, naming the keys") {
  const auto ef = loadString(
      "peers: { count: 4 }\nalgorithm: { name: gt }\n"
      "compression: { method: sign, error_feedback: true }\n",
      "gt_ef.yaml", noEnv());
  CHECK_FALSE(ef.ok());
  CHECK(contains(allDiagnostics(ef),
                 "error: compression.error_feedback: true cannot be used with algorithm.name: gt: "
                 "gt's public copies of x and y already carry the compression residual"));
  const auto steps = loadString("peers: { count: 4 }\nalgorithm: { name: gt, local_steps: 2 }\n",
                                "gt_steps.yaml", noEnv());
  CHECK_FALSE(steps.ok());
  CHECK(contains(allDiagnostics(steps),
                 "error: algorithm.local_steps: must be 1 with algorithm.name: gt"));
  const auto external =
      loadString("peers: { count: 4 }\nalgorithm: { name: gt }\nworkload: { name: external }\n",
                 "gt_external.yaml", noEnv());
  CHECK_FALSE(external.ok());
  CHECK(contains(allDiagnostics(external),
                 "error: algorithm.name: gt cannot be used with workload.name external"));
  // Uncompressed and compressed gt with momentum are fine.
  CHECK(loadString("peers: { count: 4 }\nalgorithm: { name: gt }\n", "gt.yaml", noEnv()).ok());
  CHECK(loadString("peers: { count: 4 }\nalgorithm: { name: gt, consensus_step: 0.1 }\n"
                   "compression: { method: top-k, ratio: 0.1 }\noptimizer: { momentum: 0.9 }\n",
                   "gt_topk.yaml", noEnv())
            .ok());
}

TEST_CASE("optimizer.kind adamw: Nesterov and quasi-global refused, AdamW keys warned under sgd") {
  const auto ok = loadString("peers: { count: 2 }\noptimizer: { kind: adamw, beta2: 0.95 }\n",
                             "a.yaml", noEnv());
  INFO(allDiagnostics(ok));
  CHECK(ok.ok());
  CHECK(ok.config.optimizer.kind == grapevine::train::OptimizerKind::kAdamw);
  const auto nesterov = loadString(
      "peers: { count: 2 }\noptimizer: { kind: adamw, nesterov: true }\n", "n.yaml", noEnv());
  CHECK_FALSE(nesterov.ok());
  CHECK(contains(allDiagnostics(nesterov), "optimizer.nesterov: optimizer.kind adamw has no"));
  const auto qg =
      loadString("peers: { count: 2 }\noptimizer: { kind: adamw, momentum_kind: quasi-global }\n",
                 "q.yaml", noEnv());
  CHECK_FALSE(qg.ok());
  CHECK(contains(allDiagnostics(qg), "optimizer.momentum_kind"));
  const auto sgd =
      loadString("peers: { count: 2 }\noptimizer: { beta2: 0.9 }\n", "s.yaml", noEnv());
  CHECK(sgd.ok());
  CHECK(contains(allDiagnostics(sgd), "warning: optimizer.beta2: has no effect"));
}

TEST_CASE("compression.explore: top-k's exploration set, refused with another method") {
  const auto topk =
      loadString("peers: { count: 4 }\ncompression: { method: top-k, ratio: 0.1, explore: 0.2 }\n",
                 "explore.yaml", noEnv());
  CHECK(topk.ok());
  CHECK(topk.config.compression.explore == 0.2);
  const auto lowRank = loadString(
      "peers: { count: 4 }\ncompression: { method: low-rank, fallback: top-k, explore: 0.2 }\n",
      "explore.yaml", noEnv());
  CHECK(lowRank.ok());
  const auto sign = loadString("peers: { count: 4 }\ncompression: { method: sign, explore: 0.2 }\n",
                               "explore.yaml", noEnv());
  CHECK_FALSE(sign.ok());
  CHECK(contains(allDiagnostics(sign),
                 "explore.yaml:2:30: error: compression.explore: is top-k's exploration set"));
  CHECK(contains(allDiagnostics(sign), "not sign"));
  const auto range =
      loadString("peers: { count: 4 }\ncompression: { method: top-k, explore: 0.95 }\n",
                 "explore.yaml", noEnv());
  CHECK_FALSE(range.ok());
}

TEST_CASE("algorithm.adaptive_timeout: off by default, a warning where rounds never go on early") {
  const auto plain = loadString("peers: { count: 4 }\n", "t.yaml", noEnv());
  CHECK_FALSE(plain.config.algorithm.adaptiveTimeout);
  const auto choco =
      loadString("peers: { count: 4 }\nalgorithm: { name: choco, adaptive_timeout: true }\n",
                 "t.yaml", noEnv());
  CHECK(choco.ok());
  CHECK(allDiagnostics(choco).empty());
  const auto allreduce = loadString(
      "peers: { count: 4 }\nalgorithm: { name: allreduce, adaptive_timeout: true }\n"
      "compression: { method: none }\n",
      "t.yaml", noEnv());
  CHECK(allreduce.ok());
  CHECK(contains(allDiagnostics(allreduce),
                 "warning: algorithm.adaptive_timeout: has no effect with algorithm.name: "
                 "allreduce"));
}

TEST_CASE(
    "algorithm.staleness: choco on a static graph, refused elsewhere naming the key and why") {
  const auto load = [](const std::string& yaml) { return loadString(yaml, "s.yaml", noEnv()); };
  const auto ok = load("peers: { count: 4 }\nalgorithm: { name: choco, staleness: 4 }\n");
  CHECK(ok.ok());
  CHECK(allDiagnostics(ok).empty());
  CHECK(ok.config.algorithm.staleness == 4);
  const auto dsgd = load("peers: { count: 4 }\nalgorithm: { name: dsgd, staleness: 2 }\n");
  CHECK_FALSE(dsgd.ok());
  CHECK(contains(allDiagnostics(dsgd),
                 "error: algorithm.staleness: 2 (asynchronous rounds) cannot be used with "
                 "algorithm.name dsgd"));
  const auto overlap =
      load("peers: { count: 4 }\nalgorithm: { name: choco, staleness: 2, overlap: true }\n");
  CHECK_FALSE(overlap.ok());
  CHECK(contains(allDiagnostics(overlap), "(algorithm.overlap)"));
  const auto varying = load(
      "peers: { count: 8 }\ntopology: { kind: one-peer-exponential }\n"
      "algorithm: { name: choco, staleness: 2 }\n");
  CHECK_FALSE(varying.ok());
  CHECK(contains(allDiagnostics(varying), "time-varying"));
  const auto tooMany = load("peers: { count: 4 }\nalgorithm: { name: choco, staleness: 40 }\n");
  CHECK_FALSE(tooMany.ok());
}
