#include "runtime/engine/process_options.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "compress/wire.h"
#include "runtime/common/hash.h"
#include "runtime/engine/envelope.h"
#include "runtime/transport/tagged/goodbye.h"

namespace grapevine::engine {

transport::Options transportOptions(const config::Config& config, int rank) {
  transport::Options to;
  to.backend = config.transport.backend;
  to.rank = rank;
  to.host = config.peers.addresses()[rank].host;
  to.busyPoll = config.transport.busyPoll;
  to.ucxTls = config.transport.ucxTls;
  to.ucxRndvThresh = static_cast<std::size_t>(config.transport.ucxRndvThresh);
  to.libfabricProvider = config.transport.libfabricProvider;
  to.ioTimeoutSeconds = config.transport.ioTimeout;
  return to;
}

transport::Options transportOptions(const config::Config& config, int rank, const PeerCore& core) {
  transport::Options to = transportOptions(config, rank);
  to.maxMessageBytes = std::max<std::size_t>(core.maxWireBytes(), 4096);
  for (int j : core.neighbours()) to.expectedDialers += j < rank ? 1 : 0;
  return to;
}

transport::BootstrapOptions bootstrapOptions(const RunPlan& plan, int rank,
                                             std::uint32_t incarnation, const PeerCore& core) {
  const config::Config& c = plan.config;
  transport::BootstrapOptions bo;
  bo.rank = rank;
  for (const auto& a : c.peers.addresses())
    bo.peers.push_back(a.host + ":" + std::to_string(a.port));
  bo.neighbours = core.neighbours();
  bo.incarnation = incarnation;
  // The message formats' versions first (handshake.h: "protocol.*" parts carry the version itself):
  // a neighbour of another build fails the bootstrap naming the protocol, not a silent run.
  bo.configParts.push_back({"protocol.envelope", envelopeVersion()});
  bo.configParts.push_back({"protocol.frame", compress::kFormatVersion});
  // The tagged backends' (ucx, libfabric) connection control messages (tagged/goodbye.h).
  bo.configParts.push_back({"protocol.tagged_control", transport::tagged::kControlProtocolVersion});
  for (const auto& [name, hash] : configParts(plan)) bo.configParts.push_back({name, hash});
  if (c.workload.name == train::WorkloadKind::kExternal) {
    // The caller's model: its tensors' names and sizes must agree too.
    std::string text;
    for (const auto& t : core.workload().layout())
      text += t.name + "=" + std::to_string(t.count) + ";";
    bo.configParts.push_back({"tensors", fnv1a64(text)});
  }
  bo.connectTimeoutSeconds = c.peers.connectTimeout;
  bo.heartbeatIntervalSeconds = c.peers.heartbeatInterval;
  bo.missedHeartbeats =
      std::max(1, static_cast<int>(std::lround(c.peers.deadAfter / c.peers.heartbeatInterval)));
  return bo;
}

}  // namespace grapevine::engine
