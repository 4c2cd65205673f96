// `grapevine bench round CONFIG`: the gossip algorithm's CPU per round for one peer of a config,
// phase by phase, with the real codec and the real model layout, and without the network or
// training.
//
// Peer 0 and each of its neighbours get the algorithm and codec a run would build
// (engine::makePeerAlgorithm). Each round every one of them moves its model by a fixed small
// pseudo-gradient step (not timed), prepares its message, and peer 0 then receives its neighbours'
// messages and mixes them with its round's weights. Timed on peer 0: prepare (encode, own decode,
// public-copy update), receive (each neighbour's message: checks and decode into its replica) and
// mix. Buffers are allocated and touched in warm-up rounds first; the medians over the timed rounds
// are reported, with the 10th-90th percentile spread.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <iomanip>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "runtime/engine/setup.h"
#include "tools/grapevine/command.h"
#include "tools/grapevine/load_config.h"

namespace grapevine::cli {
namespace {

struct RoundFlags {
  std::string config;
  std::vector<std::string> overrides;
  int rounds = 50;
  int warmup = 5;
  bool json = false;
};

struct Member {
  int rank = 0;
  std::unique_ptr<algorithms::Algorithm> algorithm;
  std::vector<float> x;
  std::vector<float> step;  // the fixed pseudo-gradient step added every round
  std::vector<std::uint8_t> out;
  std::size_t bytes = 0;
};

double quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[static_cast<std::size_t>(q * static_cast<double>(v.size() - 1) + 0.5)];
}

// Peer 0 and each of its neighbours with the algorithm and codec a run would build, at x0, each
// with its fixed pseudo-gradient step. Nothing (after a message) when an algorithm cannot be built.
std::optional<std::vector<Member>> makeMembers(const engine::RunPlan& plan,
                                               const train::Workload& workload) {
  const config::Config& c = plan.config;
  const std::size_t dim = workload.parameterCount();
  std::vector<float> x0(dim);
  workload.initParameters(x0, c.run.seed);
  std::vector<int> ranks{0};
  for (int j : plan.schedule->allNeighbours(0)) ranks.push_back(j);
  std::vector<Member> members;
  std::mt19937 rng(static_cast<std::uint32_t>(c.run.seed));
  std::normal_distribution<float> normal(0.0f, 1e-3f);
  for (int r : ranks) {
    Member m;
    m.rank = r;
    auto a = engine::makePeerAlgorithm(plan, r, workload.layout(), x0);
    if (!a.isOk()) {
      std::cerr << "bench round: " << a.status().toString() << "\n";
      return std::nullopt;
    }
    m.algorithm = std::move(*a);
    m.x = x0;
    m.step.resize(dim);
    for (float& s : m.step) s = normal(rng);
    m.out.assign(m.algorithm->maxMessageBytes(), 0);
    members.push_back(std::move(m));
  }
  return members;
}

// Peer 0's milliseconds per phase in each timed round, and its message's bytes.
struct Timings {
  std::vector<double> prepare, receive, mix;
  std::size_t wire = 0;
};

// The warm-up and timed rounds: every member steps and prepares its message, peer 0 receives its
// neighbours' and mixes. Nothing (after a message) when a phase fails.
std::optional<Timings> timeRounds(const engine::RunPlan& plan, std::vector<Member>& members,
                                  const RoundFlags& f) {
  using Clock = std::chrono::steady_clock;
  const auto seconds = [](Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double>(b - a).count();
  };
  Timings out;
  for (int t = 0; t < f.warmup + f.rounds; ++t) {
    const auto round = static_cast<std::uint64_t>(t);
    const topology::PeerPlan pp = plan.schedule->plan(0, t);
    for (Member& m : members) {
      // Alternate the step's sign so the models stay near x0 over any number of rounds.
      const float sign = (t % 2 == 0) ? 1.0f : -1.0f;
      for (std::size_t k = 0; k < m.x.size(); ++k) m.x[k] += sign * m.step[k];
    }
    double prep = 0;
    for (Member& m : members) {
      m.algorithm->setRecipients(plan.schedule->plan(m.rank, t).sendTo);
      const auto a = Clock::now();
      auto n = m.algorithm->prepare(m.x, round, m.out);
      const auto b = Clock::now();
      if (!n.isOk()) {
        std::cerr << "bench round: prepare of peer " << m.rank << ": " << n.status().toString()
                  << "\n";
        return std::nullopt;
      }
      m.bytes = *n;
      if (m.rank == 0) prep = seconds(a, b);
    }
    algorithms::MixWeights weights;
    const auto a = Clock::now();
    // The bound a peer puts on this round's messages (security.max_delta_ratio), as PeerCore does.
    const float limit = engine::deltaLimit(plan.config.security.maxDeltaRatio, members[0].x);
    for (const auto& [j, w] : pp.weights) {
      const auto it = std::find_if(members.begin(), members.end(),
                                   [j = j](const Member& m) { return m.rank == j; });
      if (it == members.end()) continue;
      Status st =
          members[0].algorithm->receive(j, w, std::span(it->out).first(it->bytes), round, limit);
      if (!st.isOk()) {
        std::cerr << "bench round: receive from peer " << j << ": " << st.toString() << "\n";
        return std::nullopt;
      }
      weights.neighbours.emplace_back(j, w);
      weights.proposedSteps.push_back(it->algorithm->proposedStep());
    }
    const auto b = Clock::now();
    members[0].algorithm->mix(members[0].x, weights);
    const auto e = Clock::now();
    if (t < f.warmup) continue;
    out.prepare.push_back(prep * 1e3);
    out.receive.push_back(seconds(a, b) * 1e3);
    out.mix.push_back(seconds(b, e) * 1e3);
    out.wire = members[0].bytes;
  }
  return out;
}

void printTable(const nlohmann::json& j, int rounds) {
  std::cout << j["algorithm"].get<std::string>() << " + " << j["method"].get<std::string>() << ", "
            << j["elements"].get<std::size_t>() << " elements, "
            << j["neighbours"].get<std::size_t>() << " neighbours, message "
            << j["message_bytes"].get<std::size_t>() << " bytes; median of " << rounds
            << " rounds (p10-p90), ms per round:\n";
  for (const char* name : {"prepare", "receive", "mix", "total"}) {
    const std::string k(name);
    std::cout << "  " << std::left << std::setw(8) << k << std::right << std::fixed
              << std::setprecision(3) << std::setw(9) << j[k + "_ms"].get<double>() << "  ("
              << j[k + "_ms_p10"].get<double>() << "-" << j[k + "_ms_p90"].get<double>() << ")\n";
  }
}

int runBenchRound(const RoundFlags& f) {
  auto cfg = loadConfig(f.config, f.overrides);
  if (!cfg.isOk()) return kExitBadInput;
  if (cfg->workload.name == train::WorkloadKind::kExternal) {
    std::cerr << "bench round: workload.name external has no model layout here; name a built-in "
                 "workload (--set workload.name=...)\n";
    return kExitBadInput;
  }
  auto plan = engine::makeRunPlan(*cfg);
  if (!plan.isOk()) {
    std::cerr << "bench round: " << plan.status().toString() << "\n";
    return kExitFailure;
  }
  const config::Config& c = (*plan)->config;
  auto workload =
      train::makeWorkload(engine::workloadOptions(c), 0, c.peers.count, c.run.seed, (*plan)->data);
  if (!workload.isOk()) {
    std::cerr << "bench round: " << workload.status().toString() << "\n";
    return kExitFailure;
  }
  auto members = makeMembers(**plan, **workload);
  if (!members) return kExitFailure;
  const auto timings = timeRounds(**plan, *members, f);
  if (!timings) return kExitFailure;
  std::vector<double> total(timings->prepare.size());
  for (std::size_t i = 0; i < total.size(); ++i)
    total[i] = timings->prepare[i] + timings->receive[i] + timings->mix[i];

  nlohmann::json j = {{"algorithm", algorithms::algorithmKindName(c.algorithm.name)},
                      {"method", compress::methodName(c.compression.method)},
                      {"elements", (*workload)->parameterCount()},
                      {"neighbours", members->size() - 1},
                      {"rounds", f.rounds},
                      {"message_bytes", timings->wire}};
  const auto phase = [&](const char* name, const std::vector<double>& v) {
    j[std::string(name) + "_ms"] = quantile(v, 0.5);
    j[std::string(name) + "_ms_p10"] = quantile(v, 0.1);
    j[std::string(name) + "_ms_p90"] = quantile(v, 0.9);
  };
  phase("prepare", timings->prepare);
  phase("receive", timings->receive);
  phase("mix", timings->mix);
  phase("total", total);
  if (f.json) {
    std::cout << j.dump(2) << "\n";
  } else {
    printTable(j, f.rounds);
  }
  return kExitOk;
}

}  // namespace

Command registerBenchRound(CLI::App& root) {
  auto flags = std::make_shared<RoundFlags>();
  CLI::App* app = benchApp(root)->add_subcommand(
      "round",
      "The gossip algorithm's CPU per round for peer 0 of CONFIG (prepare, receive, mix), with "
      "its real codec and model layout, no network and no training");
  app->add_option("config", flags->config, "YAML config")->required();
  app->add_option("--set", flags->overrides, "KEY=VALUE config overrides");
  app->add_option("--rounds", flags->rounds, "timed rounds")->check(CLI::Range(1, 100000));
  app->add_option("--warmup", flags->warmup, "untimed rounds first")->check(CLI::Range(0, 1000));
  app->add_flag("--json", flags->json, "print one JSON object");
  return {app, [flags] { return runBenchRound(*flags); }};
}

}  // namespace grapevine::cli
