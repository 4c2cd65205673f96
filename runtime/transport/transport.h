// The transport contract: tagged, non-blocking point-to-point messages between peers, shaped like
// UCX tag send/recv. Every backend (inproc, tcp, ucx, libfabric) implements Context and Connection;
// the conformance suite in tests/transport/ is written once against this header and run on each
// backend.
//
// Thread model (TensorPipe-style): one Loop thread owns a Context and all its Connections. Every
// method below must be called on the loop thread unless it says otherwise. Callbacks run on the
// loop thread, exactly once, and never inline (never from inside the send()/recv()/close() call
// that registered them).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/common/status.h"

namespace grapevine::transport {

class Loop;

using Tag = std::uint64_t;
// Send completion: ok, or the connection's error (kUnavailable: peer gone; kCancelled: closed
// locally).
using SendCallback = std::function<void(Status)>;
// Receive completion: ok with the number of bytes written into the posted buffer, or an error. A
// message larger than the posted buffer completes with kResourceExhausted and its bytes are
// discarded.
using RecvCallback = std::function<void(Status, std::size_t bytes)>;

// One link to one peer. Messages with the same tag are delivered in the order they were sent;
// receives with the same tag are matched in the order they were posted. Posting a receive before or
// after the matching send both work; what waits for its receive is bounded by each backend (ucx:
// at most 4096 messages per sender, 16384 and 256 MiB in all, 30 s for a sender without a
// connection, the oldest dropped first; docs/security.md, "Bounds").
class Connection {
 public:
  virtual ~Connection() = default;

  // Sends `bytes` as one message with `tag`. `bytes` must stay valid and unchanged until `cb` runs.
  // Non-blocking; `cb` runs exactly once.
  virtual void send(Tag tag, std::span<const std::uint8_t> bytes, SendCallback cb) = 0;

  // Posts a receive of one message with `tag` into `buffer` (its size is the capacity). `buffer`
  // must stay valid until `cb` runs. Non-blocking; `cb` runs exactly once.
  virtual void recv(Tag tag, std::span<std::uint8_t> buffer, RecvCallback cb) = 0;

  // Completes every pending operation with kCancelled; operations posted afterwards also complete
  // with kCancelled. Idempotent. Does not block.
  virtual void close() = 0;

  // The peer's rank.
  virtual int peer() const = 0;

  // The first error seen on this connection (it sticks), or ok. A failed peer makes every pending
  // and later operation complete with kUnavailable.
  virtual Status error() const = 0;

  // Bytes of messages that arrived so far on this connection (0 where a backend does not count
  // them): tcp counts what it reads from the wire, whole messages or not, so a message still
  // arriving shows as a growing count, which tells a slow link from a dead one before the message
  // is complete; inproc counts messages as they are handed over, ucx and libfabric as their
  // receives complete. The engine also reads it to take a neighbour's last messages before the
  // close that followed them on its control connection.
  virtual std::uint64_t bytesArrived() const { return 0; }
};

// The defaults of the keys a config sets are the config's (transport.*, peers.host), so a test
// built from Options{} runs with what a real run uses; tests/config/library_defaults_test.cc fails
// when they differ.
struct Options {
  std::string backend = "ucx";     // "inproc" | "tcp" | "ucx" | "libfabric"
  int rank = 0;                    // this peer's id
  std::string host = "127.0.0.1";  // address to listen on / advertise (tcp)
  std::uint16_t dataPort = 0;      // tcp data listener; 0 = ephemeral
  bool busyPoll = false;           // spin in progress() instead of sleeping on the wait descriptor
  std::string ucxTls;              // passed to UCX as UCX_TLS; empty = let UCX choose
  // UCX's RNDV_THRESH in bytes (2 MiB); 0 = UCX's choice (or the env's).
  std::size_t ucxRndvThresh = std::size_t{2} << 20;
  std::string libfabricProvider = "tcp;ofi_rxm";
  std::size_t maxMessageBytes = std::size_t{1}
                                << 30;  // larger messages are refused before allocation
  double ioTimeoutSeconds = 30.0;       // deadline for any single asynchronous network operation
  // Peers that dial this context (the neighbours of lower rank): the tcp data listener holds up to
  // kMaxPendingAccepts + this many connections whose hello has not arrived (accept_bounds.h).
  std::size_t expectedDialers = 0;
};

// The tokens each end of an edge presents on its data connection (security::dataBindingToken of
// the edge's session key): `lower`, the lower rank's, `higher`, the higher rank's. All zero when
// the run has no key: the connection is then unbound, as before.
struct DataBinding {
  std::array<std::uint8_t, 32> lower{};
  std::array<std::uint8_t, 32> higher{};
};

// A peer's transport endpoint. Creates connections to peers from their address blobs, which travel
// over the control connection during bootstrap.
class Context {
 public:
  virtual ~Context() = default;

  virtual std::string_view backend() const = 0;

  // The blob a peer needs to reach this context (UCX worker address, libfabric endpoint name,
  // host:port).
  virtual std::vector<std::uint8_t> localAddress() const = 0;

  // A connection to `peer`, reachable at `remoteAddress` (that peer's localAddress()). Both ends
  // call connect() for each other; it returns at once and operations may be posted immediately
  // (they are queued until the link is up). Errors: kInvalidArgument for a malformed address,
  // kUnavailable when the backend cannot reach it.
  virtual Result<std::shared_ptr<Connection>> connect(
      int peer, std::span<const std::uint8_t> remoteAddress) = 0;

  // connect(), bound to the edge's authenticated handshake: nothing from a party without the
  // token of the peer's rank reaches the connection. tcp: the other end presents the token in its
  // data hello before anything is sent or read (a stranger's connection claiming the rank is
  // closed unread). ucx, libfabric (whose endpoint addresses travel sealed in the handshake, so we
  // only ever send to the authenticated peer): every tag is masked with the sender's token
  // (tagged::tagMask), so a stranger's messages, its goodbye included, match no receive. The
  // default ignores the binding (inproc: one process).
  virtual Result<std::shared_ptr<Connection>> connectBound(
      int peer, std::span<const std::uint8_t> remoteAddress, const DataBinding& binding) {
    (void)binding;
    return connect(peer, remoteAddress);
  }

  // Closes every connection (see Connection::close) and releases backend resources. Idempotent.
  virtual void close() = 0;

  // The backend's own counts, by name (empty when it keeps none). ucx: unexpected_held and
  // unexpected_held_bytes (messages waiting for their receive, and the bytes held for them),
  // unexpected_dropped (messages no receive took and the bounds dropped; docs/security.md).
  virtual std::map<std::string, std::uint64_t> counters() const { return {}; }
};

// Context factory. Backends register by name; one that is not built or cannot run here says why.
struct BackendInfo {
  std::string name;
  bool usable = false;
  std::string reason;  // empty when usable: "not built (GRAPEVINE_UCX=OFF)", "not usable: ..."
};
std::vector<BackendInfo> backends();
// kUnimplemented naming the reason when the backend is not built or not usable here.
Result<std::unique_ptr<Context>> makeContext(Loop& loop, const Options& options);

}  // namespace grapevine::transport
