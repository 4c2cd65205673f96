// Peer addresses through a shared folder (`peers.rendezvous`), for runs whose hosts a scheduler
// assigns (srun, sbatch, mpirun): no coordinator process and no address list in the config. Each
// peer publishes DIR/rank-<r> = "host:port" and reads its neighbours' files; the normal bootstrap
// (transport/bootstrap.h) then dials and handshakes as with addresses from the config.
//
// Contract: a file is written to a temporary name in DIR and renamed, so a reader sees a whole
// address or none. The folder must be visible to every peer (a shared filesystem across machines)
// and fresh for each run: an old rank-<r> file would send the neighbours to an old address. Files
// are left in place (a late peer may still need them); the run's folder is the caller's to remove.
//
// Thread: blocking, called by the training thread before the loop thread starts any transport.
#pragma once

#include <atomic>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/common/status.h"

namespace grapevine::engine {

// This machine's address for peers.host: a numeric IP or "localhost" as given; "auto" resolves
// gethostname() (an IPv4 address that is not loopback when it has one; else the first up IPv4
// interface that is not loopback; else 127.0.0.1, a single machine). A name that does not resolve
// is warned about and treated like one that maps to loopback. Errors: gethostname() failing.
Result<std::string> resolveHost(const std::string& host);

struct RendezvousOptions {
  std::string dir;             // peers.rendezvous
  int rank = 0;                // this peer
  int count = 0;               // peers in the run
  std::string address;         // what this peer publishes: "host:port"
  std::vector<int> wait;       // ranks whose addresses this peer needs (its neighbours)
  double timeoutSeconds = 30;  // waiting for them (peers.connect_timeout)
  const std::atomic<bool>* stop = nullptr;  // set: give up waiting (kCancelled)
};

// Checks that options.address ("ip:port") can be bound here, publishes it as DIR/rank-<rank>
// (creating DIR), then waits until every rank in
// options.wait has published. Returns "host:port" by rank: this peer's and the waited-for ranks'
// entries filled, the others empty. Errors: an IPv4 address's port taken here or DIR not writable
// (kUnavailable), a malformed or hostile file (kInvalidArgument, naming it: parseRankFile), ranks
// still missing at the deadline (kDeadlineExceeded, naming them and DIR), a stop request
// (kCancelled).
Result<std::vector<std::string>> rendezvous(const RendezvousOptions& options);

// A rank file's contents (its first line): "host:port" with a host of name or address characters
// and a decimal port 1-65535, nothing after it. kInvalidArgument naming `path` and quoting the line
// printable (runtime/common/bounded_file.h) otherwise. rendezvous() reads each file as a regular
// file of at most 4 KiB (not a device, not a FIFO) first.
Result<std::string> parseRankFile(std::string_view text, const std::string& path);

}  // namespace grapevine::engine
