// `grapevine plot RUN_DIR`: PNG plots of one run (launch, sim, summarize, an API program's) from
// its records, peer-<rank>.jsonl: the training loss and the reported test metric (accuracy, else
// test loss) against rounds, time and bytes sent, one line per peer. cmd_plot.cc calls it for a
// folder without sweep.json.
#pragma once

#include <filesystem>
#include <string>

namespace grapevine::cli {

// Exit code: kExitOk, kExitBadInput (no records), kExitFailure (gnuplot failed).
int plotRun(const std::filesystem::path& dir);

// Shared by both plots (cmd_plot.cc defines them):
// A gnuplot single-quoted string for a file name (no escapes inside but '' for a quote).
std::string gpath(const std::string& s);
// Writes PLOTS/plots.gp and runs gnuplot on it; kExitOk, or kExitFailure after a message.
int runGnuplot(const std::filesystem::path& plots, const std::string& text);

}  // namespace grapevine::cli
