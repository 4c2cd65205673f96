// The `grapevine` command: one binary, one subcommand per job (see command.h).
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "tools/grapevine/command.h"

int main(int argc, char** argv) {
  using namespace grapevine::cli;
  CLI::App root{"Grapevine: decentralized (gossip) training with compressed model deltas"};
  root.require_subcommand(1);
  root.set_version_flag("--version", "grapevine 0.1.0");

  // `grapevine launch ... -- COMMAND [ARGS...]`: the words after the first `--` are the user's
  // program (see registerLaunch), not ours to parse.
  int parsedArgc = argc;
  std::optional<std::vector<std::string>> launchCommand;
  if (argc > 1 && std::string(argv[1]) == "launch") {
    for (int i = 2; i < argc; ++i) {
      if (std::string(argv[i]) == "--") {
        launchCommand.emplace(argv + i + 1, argv + argc);
        parsedArgc = i;
        break;
      }
    }
  }

  std::vector<Command> commands = {
      registerTopo(root),
      registerValidate(root),
      registerConfig(root),
      registerPeer(root),
      registerLaunch(root, launchCommand),
      registerInfo(root),
      registerBenchTransport(root),
      registerBench(root),
      registerBenchRound(root),
      registerSim(root),
      registerSweep(root),
      registerPlot(root),
      registerEmulate(root),
      registerSummarize(root),
      registerEvaluate(root),
      registerKeygen(root),
  };

  try {
    root.parse(parsedArgc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = root.exit(e);
    // CLI11 returns 0 for --help/--version; every real parse error is bad input.
    return rc == 0 ? kExitOk : kExitBadInput;
  }
  for (const Command& c : commands) {
    if (c.app->parsed()) return c.run();
  }
  return kExitBadInput;
}
