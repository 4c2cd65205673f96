// Runs several bootstraps in one process on one Loop, each with its own data Context. Ranks are
// started from the highest down, so each dialer knows the (ephemeral) control ports of the higher
// ranks it dials.
#pragma once

#include <functional>
#include <optional>
#include <vector>

#include "runtime/transport/bootstrap.h"
#include "tests/transport/transport_test_util.h"

namespace grapevine::transport::testing {

struct Cluster {
  Loop loop;
  std::vector<std::unique_ptr<Context>> data;
  std::vector<std::shared_ptr<Bootstrap>> boots;
  std::vector<std::optional<Result<std::vector<Neighbour>>>> results;
  std::vector<std::pair<int, ControlEvent>> events;  // (observer rank, event)
  std::vector<std::tuple<int, int, std::uint16_t, std::vector<std::uint8_t>>>
      messages;  // (at, from, type, bytes)

  // neighbours[r] lists r's neighbours; parts[r] its config parts.
  // `tweak` (optional) edits each rank's options last (e.g. a different key for one rank).
  Cluster(const Options& dataOptions, const std::vector<std::vector<int>>& neighbours,
          const std::vector<std::vector<ConfigPart>>& parts, BootstrapOptions base = {},
          std::function<void(int rank, BootstrapOptions&)> tweak = {}) {
    const int n = static_cast<int>(neighbours.size());
    data.resize(n);
    boots.resize(n);
    results.resize(n);
    std::vector<std::string> peers(n, "127.0.0.1:0");
    for (int r = n - 1; r >= 0; --r) {
      Options o = dataOptions;
      o.rank = r;
      auto ctx = makeContext(loop, o);
      REQUIRE(ctx.isOk());
      data[r] = std::move(ctx).value();
      BootstrapOptions b = base;
      b.rank = r;
      b.peers = peers;
      b.neighbours = neighbours[r];
      b.incarnation = 100 + r;
      b.configParts = parts[r];
      b.onEvent = [this, r](const ControlEvent& e) { events.emplace_back(r, e); };
      b.onMessage = [this, r](int from, std::uint16_t type, std::span<const std::uint8_t> bytes) {
        messages.emplace_back(r, from, type, std::vector<std::uint8_t>(bytes.begin(), bytes.end()));
      };
      if (tweak) tweak(r, b);
      auto boot =
          Bootstrap::start(loop, b, *data[r], [this, r](Result<std::vector<Neighbour>> res) {
            REQUIRE(!results[r].has_value());  // exactly once
            results[r].emplace(std::move(res));
          });
      REQUIRE(boot.isOk());
      boots[r] = *boot;
      peers[r] = "127.0.0.1:" + std::to_string(boots[r]->listenPort());
    }
  }
  ~Cluster() {
    for (auto& r : results) {
      if (r && r->isOk()) {
        for (auto& nb : r->value()) nb.control->close();
      }
    }
    for (auto& d : data) d->close();
    loop.runUntil([] { return false; }, std::chrono::milliseconds(20));
  }

  bool allDone() const {
    for (const auto& r : results) {
      if (!r) return false;
    }
    return true;
  }
  bool run(double seconds) {
    return loop.runUntil([this] { return allDone(); },
                         std::chrono::duration_cast<std::chrono::nanoseconds>(
                             std::chrono::duration<double>(seconds)));
  }
};

inline std::vector<ConfigPart> standardParts() {
  return {{"topology", 0x1111}, {"algorithm", 0x2222}, {"compression", 0x3333}, {"model", 0x4444}};
}

}  // namespace grapevine::transport::testing
