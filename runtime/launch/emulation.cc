#include "runtime/launch/emulation.h"

#include <string>
#include <utility>

#include "runtime/netemu/from_config.h"

namespace grapevine::launch {
namespace {

// Sum of the emulated links' counters, for the summary.
struct LinkTotals {
  std::uint64_t packets = 0, bytes = 0, droppedLoss = 0, droppedQueue = 0, droppedWrite = 0,
                droppedDown = 0;
  void add(const netemu::LinkStats& s) {
    droppedDown += s.droppedDown;
    packets += s.packets;
    bytes += s.bytes;
    droppedLoss += s.droppedLoss;
    droppedQueue += s.droppedQueue;
    droppedWrite += s.droppedWrite;
  }
};

}  // namespace

Result<std::unique_ptr<netemu::Network>> startEmulatedNetwork(Plan& plan, int mtu) {
  const config::Config& c = plan.config;
  if (static_cast<int>(plan.ranks.size()) != c.peers.count) {
    return invalidArgument("network emulation runs every peer on this host, but only " +
                           std::to_string(plan.ranks.size()) + " of " +
                           std::to_string(c.peers.count) + " peers have a local host");
  }
  if (const Status s = netemu::checkPrerequisites(); !s.isOk()) {
    return invalidArgument("--emulate: " + s.message());
  }
  auto made = netemu::Network::create(netemu::optionsFromConfig(c, mtu));
  if (!made.isOk()) return failedPrecondition("--emulate: " + made.status().toString());
  std::unique_ptr<netemu::Network> network = std::move(*made);
  std::string list = "[";
  for (int r = 0; r < c.peers.count; ++r) {
    list += (r ? ", " : "") + std::string("{host: ") + network->address(r) +
            ", port: " + std::to_string(plan.addresses[r].port) + "}";
  }
  plan.peerOverrides.push_back("peers.list=" + list + "]");
  return network;
}

std::uint64_t linkPackets(const netemu::Network* network, int a, int b) {
  if (!network) return 0;
  std::uint64_t n = 0;
  for (auto [from, to] : {std::pair{a, b}, std::pair{b, a}}) {
    if (auto st = network->stats(from, to); st.isOk()) n += st->packets;
  }
  return n;
}

std::uint64_t linkDroppedDown(const netemu::Network& network, int a, int b) {
  std::uint64_t dropped = 0;
  for (auto [from, to] : {std::pair{a, b}, std::pair{b, a}}) {
    if (auto st = network.stats(from, to); st.isOk()) dropped += st->droppedDown;
  }
  return dropped;
}

nlohmann::json stopEmulatedNetwork(std::unique_ptr<netemu::Network>& network) {
  if (!network) return nullptr;
  LinkTotals t;
  for (int i = 0; i < network->peers(); ++i) {
    for (int j = 0; j < network->peers(); ++j) {
      if (auto s = network->stats(i, j); s.isOk()) t.add(*s);
    }
  }
  network.reset();  // peers are gone: stop the emulator, delete the namespaces now
  return {{"mode", "netns"},
          {"packets", t.packets},
          {"bytes", t.bytes},
          {"dropped_loss", t.droppedLoss},
          {"dropped_queue", t.droppedQueue},
          {"dropped_write", t.droppedWrite},
          {"dropped_down", t.droppedDown}};
}

}  // namespace grapevine::launch
