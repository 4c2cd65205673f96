// The launcher's live progress line, from the peers' records.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/launch/peer_process.h"

namespace grapevine::launch {

// "round R/TOTAL  loss L  acc A-B%  sent M MB  X rounds/s  ETA S s" (R: the slowest peer's round;
// the loss a mean; "  restarts N" after a restart), or "starting N peers (S s)" before any record.
// Reads every peer's new records first (readNewRecords). `elapsedSeconds`: since the peers started.
std::string progressLine(std::vector<PeerProcess>& peers, double elapsedSeconds,
                         std::int64_t rounds, int restarts);

}  // namespace grapevine::launch
