// `grapevine plot RUN_DIR`: PNG plots of one run (launch, sim, summarize, an API program's) from
// its records, peer-<rank>.jsonl: the training loss and the reported test metric (accuracy, else
// test loss) against rounds, time and bytes sent, one line per peer. cmd_plot.cc calls it for a
// folder without sweep.json.
#pragma once

#include <filesystem>

namespace grapevine::cli {

// Exit code: kExitOk, kExitBadInput (no records), kExitFailure (gnuplot failed).
int plotRun(const std::filesystem::path& dir);

}  // namespace grapevine::cli
