// Native reference for `grapevine bench transport --backend libfabric`: fabtests' fi_pingpong
// (Debian package libfabric-bin) with an RDM endpoint in tagged mode, run as a server and a client
// process on loopback, its result row parsed. Same run, same machine, same sizes as the Grapevine
// numbers.
//
// fi_pingpong busy-polls. Blocking: runs two child processes to completion (bounded by
// `timeoutSeconds`); call it from the bench harness, never from the engine loop.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "runtime/common/status.h"

namespace grapevine::transport::ofi {

struct PingpongResult {
  std::string command;        // the client command line
  double latencyUs = 0;       // "usec/xfer" as fi_pingpong reports it
  double bytesPerSecond = 0;  // "MB/sec" x 10^6 (fabtests' MB)
};

// Runs fi_pingpong -p `provider` -e rdm -m tagged -S `bytes` -I `iterations` between 127.0.0.1
// processes. Errors: kUnavailable when fi_pingpong is missing or fails; kDeadlineExceeded past the
// timeout (both children are killed).
Result<PingpongResult> runPingpong(std::size_t bytes, const std::string& provider, int iterations,
                                   double timeoutSeconds = 60);

// Parses the result row that follows fi_pingpong's header "bytes #sent #ack total time MB/sec
// usec/xfer Mxfers/sec". kDataLoss when there is none.
Result<PingpongResult> parsePingpongOutput(std::string_view output);

}  // namespace grapevine::transport::ofi
