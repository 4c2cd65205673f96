// `grapevine emulate [CONFIG] --peers N [--bandwidth-mbit X] [--node-bandwidth-mbit X]
// [--latency-ms X] [--jitter-ms X] [--loss-percent X] [--mtu N] [--seed S] [--ready-file PATH]
// [--json]`: builds the emulated network (runtime/netemu/network.h), prints each rank's namespace
// and address, writes them as JSON to the ready file once everything forwards, then waits for
// SIGINT/SIGTERM, prints the per-link counters and tears everything down. Scripts run their
// processes with `ip netns exec <ns> ...` meanwhile. A CONFIG's faults.events of kind link-down
// (at_seconds, from when the network is ready) take those links down and up again; other kinds are
// refused (no peers run here).
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>

#include "runtime/common/atomic_file.h"
#include "runtime/common/elapsed.h"
#include "runtime/netemu/from_config.h"
#include "tools/grapevine/command.h"
#include "tools/grapevine/load_config.h"

namespace grapevine::cli {
namespace {

std::atomic<int> g_emulateSignal{0};
void onEmulateSignal(int sig) { g_emulateSignal = sig; }

struct EmulateArgs {
  std::string path;
  int peers = 0;
  std::optional<double> bandwidthMbit, nodeBandwidthMbit, latencyMs, jitterMs, lossPercent;
  int mtu = 9000;
  std::optional<std::uint64_t> seed;
  std::string readyFile;
  bool json = false;
};

nlohmann::json linkCounters(const netemu::Network& net) {
  nlohmann::json links = nlohmann::json::array();
  for (int i = 0; i < net.peers(); ++i) {
    for (int j = 0; j < net.peers(); ++j) {
      const auto s = net.stats(i, j);
      if (!s.isOk()) continue;
      if (s->packets + s->droppedLoss + s->droppedQueue + s->droppedWrite + s->droppedDown == 0)
        continue;
      links.push_back({{"from", i},
                       {"to", j},
                       {"packets", s->packets},
                       {"bytes", s->bytes},
                       {"dropped_loss", s->droppedLoss},
                       {"dropped_queue", s->droppedQueue},
                       {"dropped_write", s->droppedWrite},
                       {"dropped_down", s->droppedDown}});
    }
  }
  nlohmann::json unknown = nlohmann::json::object();
  for (int i = 0; i < net.peers(); ++i) {
    const auto u = net.unknownDestination(i);
    if (u.isOk() && *u > 0) unknown[std::to_string(i)] = *u;
  }
  return {{"links", links}, {"unknown_destination", unknown}};
}

// The network to emulate: CONFIG's (with the flags as network defaults) or the flags alone; null
// after a message on stderr when they are refused.
std::optional<config::Config> emulateConfig(const EmulateArgs& a) {
  config::Config c;
  std::vector<std::string> overrides;
  // Flags set the network defaults (the config's per-peer and per-edge overrides still apply).
  auto set = [&](const char* key, const std::optional<double>& v) {
    if (v) overrides.push_back(std::string(key) + "=" + std::to_string(*v));
  };
  set("network.bandwidth_mbit", a.bandwidthMbit);
  set("network.node_bandwidth_mbit", a.nodeBandwidthMbit);
  set("network.latency_ms", a.latencyMs);
  set("network.jitter_ms", a.jitterMs);
  set("network.loss_percent", a.lossPercent);
  if (a.seed) overrides.push_back("run.seed=" + std::to_string(*a.seed));
  if (a.peers > 0) overrides.push_back("peers.count=" + std::to_string(a.peers));
  if (!a.path.empty()) {
    auto loaded = loadConfig(a.path, overrides);
    if (!loaded.isOk()) return std::nullopt;
    c = std::move(*loaded);
    // faults.events: the emulator runs no peers, so only links go down (by time from ready).
    for (std::size_t i = 0; i < c.faults.events.size(); ++i) {
      const auto& e = c.faults.events[i];
      if (e.kind != config::FaultKind::kLinkDown || e.byRound()) {
        std::cerr << "grapevine emulate: " << a.path << ": faults.events: item " << i << " ("
                  << e.describe()
                  << "): grapevine emulate runs no peers and counts no rounds: it executes only "
                     "kind: link-down with at_seconds (from when the network is ready)\n";
        return std::nullopt;
      }
    }
    return c;
  }
  if (a.peers <= 0) {
    std::cerr << "grapevine emulate: give --peers N (or a CONFIG with peers.count)\n";
    return std::nullopt;
  }
  c.peers.count = a.peers;
  c.network.bandwidthMbit = a.bandwidthMbit.value_or(0);
  c.network.nodeBandwidthMbit = a.nodeBandwidthMbit.value_or(0);
  c.network.latencyMs = a.latencyMs.value_or(0);
  c.network.jitterMs = a.jitterMs.value_or(0);
  c.network.lossPercent = a.lossPercent.value_or(0);
  c.run.seed = a.seed.value_or(1);
  for (double v : {c.network.bandwidthMbit, c.network.nodeBandwidthMbit, c.network.latencyMs,
                   c.network.jitterMs}) {
    if (v < 0) {
      std::cerr << "grapevine emulate: bandwidth, node bandwidth, latency and jitter must be "
                   ">= 0\n";
      return std::nullopt;
    }
  }
  if (c.network.lossPercent < 0 || c.network.lossPercent > 100) {
    std::cerr << "grapevine emulate: --loss-percent must be in [0, 100]\n";
    return std::nullopt;
  }
  return c;
}

// The ready document (--json, --ready-file): pids, ranks with their namespaces and addresses.
nlohmann::json readyJson(const netemu::Network& net, const config::Config& c, int mtu) {
  const auto& n = c.network;
  nlohmann::json ready = {{"pid", ::getpid()},
                          {"emulator_pid", net.emulatorPid()},
                          {"peers", net.peers()},
                          {"mtu", mtu},
                          {"seed", c.run.seed},
                          {"network",
                           {{"bandwidth_mbit", n.bandwidthMbit},
                            {"node_bandwidth_mbit", n.nodeBandwidthMbit},
                            {"latency_ms", n.latencyMs},
                            {"jitter_ms", n.jitterMs},
                            {"loss_percent", n.lossPercent},
                            {"uniform", n.uniform()}}}};
  nlohmann::json ranks = nlohmann::json::array();
  for (int r = 0; r < net.peers(); ++r) {
    ranks.push_back(
        {{"rank", r}, {"namespace", net.namespaceName(r)}, {"address", net.address(r)}});
  }
  ready["ranks"] = ranks;
  return ready;
}

void printReady(const netemu::Network& net, const config::Config& c, int mtu) {
  const auto& n = c.network;
  char bandwidth[64] = "unlimited";
  if (n.bandwidthMbit > 0) std::snprintf(bandwidth, sizeof bandwidth, "%g Mbit/s", n.bandwidthMbit);
  std::cout << "grapevine emulate: " << net.peers() << " ranks, links " << bandwidth << ", "
            << n.latencyMs << " ms (+0-" << n.jitterMs << " ms), loss " << n.lossPercent << "%"
            << nodeCapText(n) << (n.uniform() ? "" : " (with per-peer/per-edge overrides)")
            << ", mtu " << mtu << "\n";
  for (int r = 0; r < net.peers(); ++r) {
    std::cout << "rank " << r << "  ns " << net.namespaceName(r) << "  " << net.address(r) << "\n";
  }
  std::cout << "running until SIGINT/SIGTERM; run processes with `ip netns exec <ns> ...`\n";
}

// Until SIGINT/SIGTERM: faults.events (link-down only, checked by emulateConfig) take links down
// at at_seconds and up after seconds, from now. kExitFailure when the emulator failed.
int emulateUntilSignal(netemu::Network& net, const config::Config& c, bool json) {
  const auto readyAt = std::chrono::steady_clock::now();
  std::vector<int> faultStage(c.faults.events.size(), 0);  // 0: before, 1: down, 2: up again
  while (!g_emulateSignal) {
    ::poll(nullptr, 0, c.faults.events.empty() ? 200 : 20);  // a signal interrupts it at once
    const double t = secondsSince(readyAt);
    for (std::size_t i = 0; i < c.faults.events.size(); ++i) {
      const auto& e = c.faults.events[i];
      const bool down = faultStage[i] == 0 && t >= e.start();
      if (!down && !(faultStage[i] == 1 && t >= e.end())) continue;
      ++faultStage[i];
      const Status st = net.setLinkDown(e.linkA, e.linkB, down);
      if (!json) {
        std::cout << "grapevine emulate: link [" << e.linkA << ", " << e.linkB << "] "
                  << (down ? "down" : "up") << " at " << t << " s"
                  << (st.isOk() ? "" : ": " + st.message()) << "\n"
                  << std::flush;
      }
    }
    if (const Status s = net.emulatorStatus(); !s.isOk()) {
      std::cerr << "grapevine emulate: " << s.toString() << "\n";
      return kExitFailure;
    }
  }
  return kExitOk;
}

void printCounters(const nlohmann::json& counters) {
  std::cout << "\ngrapevine emulate: " << (g_emulateSignal ? strsignal(g_emulateSignal) : "stopped")
            << "; link counters:\n";
  for (const auto& l : counters["links"]) {
    std::printf(
        "  %d -> %d  %llu packets  %.3f MB  lost %llu  queue drops %llu  write drops %llu\n",
        l["from"].get<int>(), l["to"].get<int>(), l["packets"].get<unsigned long long>(),
        l["bytes"].get<double>() / 1e6, l["dropped_loss"].get<unsigned long long>(),
        l["dropped_queue"].get<unsigned long long>(), l["dropped_write"].get<unsigned long long>());
  }
  for (const auto& [rank, count] : counters["unknown_destination"].items()) {
    std::printf("  rank %s: %llu packets to unknown addresses\n", rank.c_str(),
                count.get<unsigned long long>());
  }
  std::fflush(stdout);
}

int runEmulate(const EmulateArgs& a) {
  const std::optional<config::Config> configured = emulateConfig(a);
  if (!configured) return kExitBadInput;
  const config::Config& c = *configured;
  if (const Status s = netemu::checkPrerequisites(); !s.isOk()) {
    std::cerr << "grapevine emulate: " << s.message() << "\n";
    return kExitBadInput;
  }
  std::error_code ec;
  if (!a.readyFile.empty()) std::filesystem::remove(a.readyFile, ec);  // never a stale "ready"

  struct sigaction sa {};
  sa.sa_handler = onEmulateSignal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);

  auto made = netemu::Network::create(netemu::optionsFromConfig(c, a.mtu));
  if (!made.isOk()) {
    std::cerr << "grapevine emulate: " << made.status().toString() << "\n";
    return made.status().code() == ErrorCode::kInvalidArgument ? kExitBadInput : kExitFailure;
  }
  std::unique_ptr<netemu::Network> owned = std::move(*made);  // destroyed on every return below
  netemu::Network& net = *owned;

  const nlohmann::json ready = readyJson(net, c, a.mtu);
  if (a.json) {
    std::cout << ready.dump() << "\n";
  } else {
    printReady(net, c, a.mtu);
  }
  std::cout << std::flush;
  if (!a.readyFile.empty() && !writeFileAtomically(a.readyFile, ready.dump(2) + "\n").isOk()) {
    std::cerr << "grapevine emulate: cannot write " << a.readyFile << "\n";
    return kExitFailure;
  }

  const int rc = emulateUntilSignal(net, c, a.json);
  const nlohmann::json counters = linkCounters(net);
  if (a.json) {
    std::cout << counters.dump() << "\n";
  } else {
    printCounters(counters);
  }
  if (!a.readyFile.empty()) std::filesystem::remove(a.readyFile, ec);
  owned.reset();  // stop the emulator, delete the namespaces
  return rc;
}

}  // namespace

Command registerEmulate(CLI::App& root) {
  auto a = std::make_shared<EmulateArgs>();
  CLI::App* app = root.add_subcommand(
      "emulate", "Emulated network namespaces for local processes (rate, latency, jitter, loss)");
  app->add_option("config", a->path, "YAML config: peers.count and the network: section");
  app->add_option("--peers", a->peers, "Number of ranks (overrides peers.count)")
      ->check(CLI::Range(1, 4096));
  app->add_option("--bandwidth-mbit", a->bandwidthMbit, "Link rate, 0 = unlimited");
  app->add_option("--node-bandwidth-mbit", a->nodeBandwidthMbit,
                  "Each rank's interface rate, shared by all of its links (egress and ingress "
                  "each), 0 = no cap");
  app->add_option("--latency-ms", a->latencyMs, "One-way latency");
  app->add_option("--jitter-ms", a->jitterMs,
                  "Extra one-way delay, uniform in [0, this], never reordering");
  app->add_option("--loss-percent", a->lossPercent, "Random loss per packet");
  app->add_option("--mtu", a->mtu, "MTU of every namespace's interface")
      ->check(CLI::Range(576, 65535));
  app->add_option("--seed", a->seed, "Seed of loss and jitter (default run.seed)");
  app->add_option("--ready-file", a->readyFile,
                  "Write the ranks as JSON here once the network is up");
  app->add_flag("--json", a->json, "JSON on stdout: ranks when ready, counters at the end");
  return {app, [a] { return runEmulate(*a); }};
}

}  // namespace grapevine::cli
