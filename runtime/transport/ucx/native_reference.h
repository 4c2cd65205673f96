// Native reference for `grapevine bench transport --backend ucx`: ucx_perftest (Debian package
// ucx-utils) run as a server and a client process on loopback, its output parsed, so the Grapevine
// numbers and the reference come from the same run on the same machine with the same sizes.
//
// ucx_perftest busy-polls; Grapevine sleeps on the worker's event fd unless transport.busy_poll is
// set. Blocking: runs two child processes to completion (bounded by `timeoutSeconds`); call it from
// the bench harness, never from the engine loop.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "runtime/common/status.h"

namespace grapevine::transport::ucx {

struct PerftestResult {
  std::string command;        // the client command line
  double latencyUs = 0;       // tag_lat: one-way latency (ucx_perftest's "overall" column)
  double bytesPerSecond = 0;  // tag_bw: payload bandwidth (overall MiB/s x 2^20)
};

enum class PerftestKind { kTagLatency, kTagBandwidth };

// Runs ucx_perftest -t tag_lat|tag_bw -s `bytes` -n `iterations` between 127.0.0.1 processes.
// `ucxTls` (if not empty) becomes UCX_TLS for both. Errors: kUnavailable when ucx_perftest is
// missing or fails; kDeadlineExceeded past the timeout (both children are killed).
Result<PerftestResult> runPerftest(PerftestKind kind, std::size_t bytes, const std::string& ucxTls,
                                   int iterations, double timeoutSeconds = 60);

// Parses ucx_perftest's "Final:" row: iterations, median / average / overall latency (us), average
// / overall bandwidth (MiB/s), average / overall message rate. kDataLoss when the row is missing.
Result<PerftestResult> parsePerftestOutput(std::string_view output, PerftestKind kind);

}  // namespace grapevine::transport::ucx
