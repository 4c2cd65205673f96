// `grapevine info [--transports]`: what this build contains and what can run here.
#include <iostream>

#include "runtime/transport/transport.h"
#include "tools/grapevine/command.h"

namespace grapevine::cli {

namespace {
// "<name>  usable" or "<name>  not usable: <reason>".
void printTransports() {
  for (const transport::BackendInfo& b : transport::backends()) {
    if (b.usable) {
      std::cout << b.name << "  usable\n";
    } else if (b.reason.rfind("not usable", 0) == 0) {
      std::cout << b.name << "  " << b.reason << "\n";
    } else {
      std::cout << b.name << "  not usable: " << b.reason << "\n";
    }
  }
}
}  // namespace

Command registerInfo(CLI::App& root) {
  auto* app = root.add_subcommand("info", "Show what this build contains and what can run here");
  auto transports = std::make_shared<bool>(false);
  app->add_flag("--transports", *transports, "Only the transport backends, one line each");
  return Command{app, [transports] {
                   if (!*transports) std::cout << "grapevine 0.1.0\ntransports:\n";
                   printTransports();
                   return kExitOk;
                 }};
}

}  // namespace grapevine::cli
