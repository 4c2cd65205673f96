// `grapevine keygen [-o FILE]`: a new pre-shared key for security.key_file (docs/security.md): 32
// random bytes from libsodium as one line of 64 hex digits. With -o the file is written with mode
// 0600 (peers refuse a key file that group or others can access); without, the key goes to stdout
// (redirect it into a file and chmod 600 it, or prefer -o). -o refuses a symbolic link, a device
// and an existing file (--force replaces a regular one); the file appears whole or not at all.
#include <iostream>

#include "runtime/security/key.h"
#include "tools/grapevine/command.h"

namespace grapevine::cli {

Command registerKeygen(CLI::App& root) {
  auto* app = root.add_subcommand("keygen", "Write a new pre-shared key for security.key_file");
  auto output = std::make_shared<std::string>();
  auto force = std::make_shared<bool>(false);
  app->add_option("-o,--output", *output,
                  "Write the key to FILE with mode 0600 (default: print it on stdout)");
  app->add_flag("--force", *force, "Replace FILE when it exists (a regular file only)");
  return {app, [output, force]() {
            if (auto st = security::initialize(); !st.isOk()) {
              std::cerr << "grapevine keygen: " << st.message() << "\n";
              return kExitFailure;
            }
            const security::Key key = security::randomKey();
            if (output->empty()) {
              std::cout << security::formatKey(key) << std::flush;
              return std::cout ? kExitOk : kExitFailure;
            }
            if (auto st = security::writeKeyFile(*output, key, *force); !st.isOk()) {
              std::cerr << "grapevine keygen: " << st.message() << "\n";
              return kExitFailure;
            }
            return kExitOk;
          }};
}

}  // namespace grapevine::cli
