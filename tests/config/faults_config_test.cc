// faults.events (issue 15): the form of each item, and every combination that would not work,
// refused with the key and the reason; a good schedule loads (also as `faults:` given as a list,
// and through --set, which is how a sweep sets it).
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <string>

#include "runtime/config/loader.h"
#include "runtime/config/report.h"

using namespace grapevine::config;

namespace {

const std::string kBase = R"(
run: { rounds: 100 }
peers: { count: 8 }
topology: { kind: ring }
checkpoint: { every: 10 }
)";

LoadResult load(const std::string& faults, const std::vector<std::string>& overrides = {}) {
  LoadOptions o;
  o.useEnvironment = false;
  o.overrides = overrides;
  return loadString(kBase + faults, "faults.yaml", o);
}

// The diagnostics of a refused schedule; fails the test when it loads.
std::string refused(const std::string& faults) {
  const auto r = load(faults);
  const std::string text = formatDiagnostics(r.diagnostics);
  INFO(faults << "\n" << text);
  CHECK_FALSE(r.ok());
  CHECK(text.find("faults.events") != std::string::npos);
  return text;
}

bool has(const std::string& text, const std::string& what) {
  return text.find(what) != std::string::npos;
}

}  // namespace

TEST_CASE("a fault schedule loads, as a list or as faults.events", "[faults]") {
  const auto r = load(R"(
faults:
  - { kind: pause, peer: 3, at_round: 20, rounds: 15 }
  - { kind: link-down, link: [0, 1], at_round: 30, rounds: 10 }
  - { kind: restart, peer: 5, at_round: 50, rounds: 10 }
  - { kind: kill, peer: 7, at_round: 90 }
)");
  INFO(formatDiagnostics(r.diagnostics));
  REQUIRE(r.ok());
  const auto& e = r.config.faults.events;
  REQUIRE(e.size() == 4);
  CHECK(e[0].kind == FaultKind::kPause);
  CHECK(e[0].peer == 3);
  CHECK(*e[0].atRound == 20);
  CHECK(*e[0].rounds == 15);
  CHECK(e[1].kind == FaultKind::kLinkDown);
  CHECK(e[1].linkA == 0);
  CHECK(e[1].linkB == 1);
  CHECK(e[3].kind == FaultKind::kKill);
  CHECK(e[3].describe() == "kill peer 7 at round 90");

  const auto seconds = load(R"(
faults:
  events:
    - { kind: pause, peer: 3, at_seconds: 1.5, seconds: 2 }
    - { kind: link-down, link: [4, 3], at_seconds: 1, seconds: 0.5 }
)");
  INFO(formatDiagnostics(seconds.diagnostics));
  REQUIRE(seconds.ok());
  CHECK(*seconds.config.faults.events[0].atSeconds == 1.5);
  CHECK(seconds.config.faults.events[1].describe() == "link-down link [4, 3] at 1 s for 0.5 s");

  // --set (and so a sweep axis) takes the list as flow YAML.
  const auto set = load("", {"faults.events=[{kind: pause, peer: 2, at_round: 5, rounds: 3}]"});
  INFO(formatDiagnostics(set.diagnostics));
  REQUIRE(set.ok());
  REQUIRE(set.config.faults.events.size() == 1);
  CHECK(set.config.faults.events[0].peer == 2);
}

TEST_CASE("the form of each fault item is checked, naming the item and why", "[faults]") {
  CHECK(has(refused("faults: [{kind: crash, peer: 1, at_round: 3}]"), "unknown kind \"crash\""));
  CHECK(has(refused("faults: [{kind: kill, peer: 1, at_round: 3, color: red}]"),
            "unknown key \"color\""));
  CHECK(has(refused("faults: [{kind: pause, at_round: 3, rounds: 2}]"), "pause needs peer"));
  CHECK(has(refused("faults: [{kind: link-down, peer: 1, at_round: 3, rounds: 2}]"),
            "link-down needs link"));
  CHECK(has(refused("faults: [{kind: pause, link: [0, 1], peer: 1, at_round: 3, rounds: 2}]"),
            "pause takes peer, not link"));
  CHECK(has(refused("faults: [{kind: link-down, link: [1, 1], at_round: 3, rounds: 2}]"),
            "two different ranks"));
  CHECK(has(refused("faults: [{kind: pause, peer: 1, rounds: 2}]"),
            "exactly one of at_round and at_seconds"));
  CHECK(has(refused("faults: [{kind: pause, peer: 1, at_round: 1, at_seconds: 1, rounds: 2}]"),
            "exactly one of at_round and at_seconds"));
  CHECK(has(refused("faults: [{kind: pause, peer: 1, at_round: 3, seconds: 2}]"),
            "seconds with at_round"));
  CHECK(has(refused("faults: [{kind: pause, peer: 1, at_seconds: 3, rounds: 2}]"),
            "rounds with at_seconds"));
  CHECK(has(refused("faults: [{kind: pause, peer: 1, at_round: 3}]"), "pause needs rounds"));
  CHECK(has(refused("faults: [{kind: kill, peer: 1, at_round: 3, rounds: 4}]"),
            "kill takes no length"));
  CHECK(has(refused("faults: [{kind: pause, peer: 1, at_round: 3, rounds: 0}]"),
            "rounds is not an integer >= 1"));
  CHECK(has(refused("faults: [{kind: pause, peer: 1, at_seconds: -1, seconds: 1}]"),
            "at_seconds is not a number >= 0"));
  CHECK(has(refused("faults: [{kind: kill, peer: 1, at_round: 3}, 7]"), "item 1: not a mapping"));
  // corrupt: a peer and how long, like a pause.
  CHECK(has(refused("faults: [{kind: corrupt, peer: 1, at_round: 3}]"), "corrupt needs rounds"));
  CHECK(has(refused("faults: [{kind: corrupt, link: [0, 1], at_round: 3, rounds: 2}]"),
            "corrupt needs peer"));
}

TEST_CASE("fault schedules that cannot work are refused, naming the items and why", "[faults]") {
  // Ranks and links.
  CHECK(has(refused("faults: [{kind: kill, peer: 8, at_round: 3}]"),
            "names a peer >= peers.count (8)"));
  CHECK(has(refused("faults: [{kind: link-down, link: [0, 9], at_round: 3, rounds: 2}]"),
            "names a peer >= peers.count"));
  CHECK(has(refused("faults: [{kind: link-down, link: [0, 4], at_round: 3, rounds: 2}]"),
            "0 and 4 are not neighbours in the graph"));
  // Never happens.
  CHECK(has(refused("faults: [{kind: kill, peer: 1, at_round: 100}]"),
            "never happens: run.rounds is 100"));
  // Overlaps on one peer, on one link; anything after a kill.
  CHECK(has(refused(R"(
faults:
  - { kind: pause, peer: 3, at_round: 20, rounds: 15 }
  - { kind: pause, peer: 3, at_round: 34, rounds: 5 }
)"),
            "overlap on the same peer"));
  CHECK(has(refused(R"(
faults:
  - { kind: link-down, link: [0, 1], at_round: 20, rounds: 15 }
  - { kind: link-down, link: [1, 0], at_round: 25, rounds: 5 }
)"),
            "overlap on the same link"));
  CHECK(has(refused(R"(
faults:
  - { kind: kill, peer: 2, at_round: 20 }
  - { kind: pause, peer: 2, at_round: 50, rounds: 5 }
)"),
            "(a killed peer stays dead)"));
  // Back to back on one peer, or at once on different peers: fine.
  const auto fine = load(R"(
faults:
  - { kind: pause, peer: 3, at_round: 20, rounds: 15 }
  - { kind: pause, peer: 3, at_round: 35, rounds: 5 }
  - { kind: pause, peer: 4, at_round: 20, rounds: 15 }
)");
  INFO(formatDiagnostics(fine.diagnostics));
  CHECK(fine.ok());
  // Rounds and seconds mixed: no runner does both.
  CHECK(has(refused(R"(
faults:
  - { kind: pause, peer: 3, at_round: 20, rounds: 15 }
  - { kind: kill, peer: 4, at_seconds: 3 }
)"),
            "not both"));
  // restart needs checkpoints, and one taken before it.
  {
    LoadOptions o;
    o.useEnvironment = false;
    const auto r = loadString(
        "peers: { count: 4 }\nfaults: [{kind: restart, peer: 1, at_round: 30, rounds: 5}]\n",
        "f.yaml", o);
    const std::string text = formatDiagnostics(r.diagnostics);
    INFO(text);
    CHECK_FALSE(r.ok());
    CHECK(has(text, "needs checkpoint.every > 0"));
  }
  CHECK(has(refused("faults: [{kind: restart, peer: 1, at_round: 5, rounds: 5}]"),
            "comes before the peer's first checkpoint"));
}

TEST_CASE("a schedule of thousands of events is checked in n log n, its diagnostics capped",
          "[faults]") {
  // Issue 41: validate compared every pair of 3,000 events (3.2 GB, 800 MB printed). Every event
  // here overlaps its neighbours on peer 3 (and 1,000 more every other), and half count seconds.
  std::string faults = "faults:\n";
  for (int i = 0; i < 3000; ++i) {
    faults += "  - { kind: pause, peer: 3, " +
              (i % 2 ? "at_seconds: " + std::to_string(i) + ", seconds: 5"
                     : "at_round: " + std::to_string(i % 90) + ", rounds: 5") +
              " }\n";
  }
  const auto r = load(faults);
  CHECK_FALSE(r.ok());
  const std::string text = formatDiagnostics(r.diagnostics);
  // At most kMaxPerKey diagnostics of faults.events, then one line with the count of the others.
  CHECK(std::count(text.begin(), text.end(), '\n') <= Report::kMaxPerKey + 2);
  CHECK((has(text, "overlap on the same peer") || has(text, "not both")));
  CHECK(has(text, "more of this key not shown"));
  // The same rule on a small schedule still names both items.
  CHECK(has(refused(R"(
faults:
  - { kind: pause, peer: 3, at_round: 20, rounds: 15 }
  - { kind: pause, peer: 4, at_round: 20, rounds: 15 }
  - { kind: pause, peer: 3, at_round: 30, rounds: 2 }
  - { kind: pause, peer: 3, at_round: 40, rounds: 2 }
)"),
            "item 0 (pause peer 3"));
}

TEST_CASE("attacks load with their scale, for a length or the rest of the run", "[faults]") {
  const auto r = load(R"(
faults:
  - { kind: sign-flip, peer: 3, at_round: 0 }
  - { kind: noise, peer: 4, at_round: 10, rounds: 20, scale: 0.5 }
  - { kind: replay, peer: 5, at_round: 7 }
  - { kind: ipm, peer: 6, at_round: 0 }
)");
  INFO(formatDiagnostics(r.diagnostics));
  REQUIRE(r.ok());
  const auto& e = r.config.faults.events;
  REQUIRE(e.size() == 4);
  CHECK(e[0].kind == FaultKind::kSignFlip);
  CHECK(isAttack(e[0].kind));
  CHECK_FALSE(isAttack(FaultKind::kCorrupt));
  CHECK(e[0].attackScale() == 1.0);
  CHECK(std::isinf(e[0].end()));
  CHECK(e[0].describe() == "sign-flip peer 3 at round 0 (scale 1) for the rest of the run");
  CHECK(e[1].attackScale() == 0.5);
  CHECK(e[1].end() == 30.0);
  CHECK(e[1].describe() == "noise peer 4 at round 10 (scale 0.5) for 20 rounds");
  CHECK(e[2].describe() == "replay peer 5 at round 7 for the rest of the run");
  CHECK(e[3].attackScale() == 0.1);  // IPM's epsilon
  for (const char* kind : {"alie", "dissensus", "bias"}) {
    const auto k = load(std::string("faults: [{kind: ") + kind + ", peer: 1, at_seconds: 2}]");
    INFO(kind << "\n" << formatDiagnostics(k.diagnostics));
    CHECK(k.ok());
  }
  // A scale is an attack's, and replay has none; two attacks of one peer overlap.
  CHECK(has(refused("faults: [{kind: pause, peer: 1, at_round: 3, rounds: 2, scale: 2}]"),
            "pause takes no scale"));
  CHECK(has(refused("faults: [{kind: replay, peer: 1, at_round: 3, scale: 2}]"),
            "replay takes no scale"));
  CHECK(has(refused("faults: [{kind: bias, peer: 1, at_round: 3, scale: -1}]"),
            "scale is not a number from 0 to 1e6"));
  CHECK(has(refused("faults: [{kind: bias, peer: 1, at_round: 3}, "
                    "{kind: noise, peer: 1, at_round: 50, rounds: 5}]"),
            "overlap on the same peer"));
}

TEST_CASE("robust mixing is refused where it cannot work, naming the key and why", "[faults]") {
  const auto check = [](const std::string& yaml) {
    LoadOptions o;
    o.useEnvironment = false;
    return loadString(yaml, "robust.yaml", o);
  };
  const auto refusedRobust = [&](const std::string& yaml) {
    const auto r = check(yaml);
    const std::string text = formatDiagnostics(r.diagnostics);
    INFO(yaml << "\n" << text);
    CHECK_FALSE(r.ok());
    CHECK(text.find("algorithm.robust") != std::string::npos);
    return text;
  };
  const std::string torus = "peers: { count: 16 }\ntopology: { kind: torus }\n";
  const std::string ring = "peers: { count: 8 }\ntopology: { kind: ring }\n";
  for (const char* rule : {"clip", "trim"}) {
    for (const char* algo : {"dsgd", "choco"}) {
      const auto r = check(torus + "algorithm: { name: " + algo + ", robust: " + rule + " }\n");
      INFO(rule << " " << algo << "\n" << formatDiagnostics(r.diagnostics));
      CHECK(r.ok());
      CHECK(r.config.algorithm.robust == (std::string(rule) == "clip"
                                              ? grapevine::algorithms::RobustRule::kClip
                                              : grapevine::algorithms::RobustRule::kTrim));
    }
  }
  CHECK(check(ring + "algorithm: { name: choco, robust: clip }\n").ok());
  CHECK(has(refusedRobust(ring + "algorithm: { name: choco, robust: trim }\n"),
            "needs every peer to have at least 3 neighbours"));
  CHECK(
      has(refusedRobust(torus + "algorithm: { name: choco, robust: clip, robust_byzantine: 4 }\n"),
          "at least 5 neighbours (more than b"));
  CHECK(has(refusedRobust(ring + "algorithm: { name: push-sum, robust: clip }\n"), "conserved"));
  CHECK(has(refusedRobust(ring + "algorithm: { name: gt, robust: clip }\n"), "tracker"));
  CHECK(has(refusedRobust(ring + "algorithm: { name: deepsqueeze, robust: clip }\n"), "use choco"));
  CHECK(has(refusedRobust("peers: { count: 16 }\ntopology: { kind: one-peer-exponential }\n"
                          "algorithm: { name: choco, robust: clip }\n"),
            "needs a static graph"));
  // The exact final average would sum a hostile member's model too.
  CHECK(has(refusedRobust(ring + "run: { final_average: true }\n" +
                          "algorithm: { name: choco, robust: clip }\n"),
            "run.final_average: cannot be used with algorithm.robust clip"));
  // Without a rule its other keys do nothing: warned.
  const auto idle = check(ring + "algorithm: { name: choco, robust_byzantine: 2 }\n");
  CHECK(idle.ok());
  CHECK(has(formatDiagnostics(idle.diagnostics), "has no effect without algorithm.robust"));
  const auto idleProbe = check(ring + "algorithm: { name: choco, robust_probe: 64 }\n");
  CHECK(idleProbe.ok());
  CHECK(has(formatDiagnostics(idleProbe.diagnostics),
            "algorithm.robust_probe: has no effect without algorithm.robust"));
  // Loss screening needs a shard to evaluate models on: the Fashion-MNIST workloads.
  const auto probe = check(ring + "algorithm: { name: choco, robust: clip, robust_probe: 64 }\n" +
                           "workload: { name: fashion-mnist-mlp }\n");
  INFO(formatDiagnostics(probe.diagnostics));
  CHECK(probe.ok());
  CHECK(probe.config.algorithm.robustProbe == 64);
  for (const char* workload : {"consensus", "quadratic"}) {
    const auto r = check(ring + "algorithm: { name: choco, robust: clip, robust_probe: 64 }\n" +
                         "workload: { name: " + workload + " }\n");
    const std::string text = formatDiagnostics(r.diagnostics);
    INFO(text);
    CHECK_FALSE(r.ok());
    CHECK(has(text, "algorithm.robust_probe"));
    CHECK(has(text, std::string("workload.name ") + workload + " has none"));
  }
}
