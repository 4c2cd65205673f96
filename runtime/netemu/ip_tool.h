// Runs iproute2's `ip` as a child process (fork + exec, no shell) and turns its exit status and
// stderr into a Status. Blocking; call from one thread at a time per process is not required.
#pragma once

#include <string>
#include <vector>

#include "runtime/common/status.h"

namespace grapevine::netemu {

// Absolute path of the `ip` binary (PATH, then /usr/sbin, /sbin, /usr/bin, /bin); "" when absent.
std::string ipBinary();

// Runs `ip ARGS...`, writing `input` to its stdin (for `-batch -`). Ok when it exits 0; otherwise
// an error naming the command line, the exit status and ip's stderr.
Status runIp(const std::vector<std::string>& args, const std::string& input = "");

}  // namespace grapevine::netemu
