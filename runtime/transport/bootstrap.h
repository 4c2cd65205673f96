// Coordinator-free bootstrap. Every peer knows every peer's control host:port (from the YAML file).
// Each peer listens on its own address and talks only to its neighbours: the lower rank dials, the
// higher accepts. Over that small TCP control connection the two peers exchange a handshake (magic,
// protocol version, peer ids, incarnation, the hashes of the run-defining config parts, the data
// backend's name and address blob), then heartbeats and small control messages for the rest of the
// run.
//
// Failure contract: a version, backend or config mismatch fails the bootstrap on both sides as soon
// as the hellos cross (well within a second), naming the differing part; an unreachable neighbour
// is retried with capped exponential backoff and jitter until connectTimeout, then named in the
// error; a control frame above maxControlFrameBytes is refused before anything is allocated for it.
//
// Thread: everything runs on the Loop thread; start() must be called there, and every callback runs
// there, exactly once for `done`, never inline.
//
// Inside: handshake.h is the wire codec (pure), control_link.h one connection with its forward-only
// state, bootstrap.cc the orchestration (who dials whom, the deadline, collecting neighbours).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/common/status.h"
#include "runtime/security/auth.h"
#include "runtime/security/key.h"
#include "runtime/transport/loop.h"
#include "runtime/transport/transport.h"

namespace grapevine::transport {

inline constexpr std::uint32_t kControlMagic = 0x53425647;  // "GVBS" as little-endian bytes
inline constexpr std::uint16_t kControlProtocolVersion = 1;

// This build's id ("0.5.0+g1a2b3c4d5e6f": the project version and the commit at configure time),
// carried in every hello and named in version-skew errors.
std::string_view buildId();

// One run-defining part of the config (e.g. "topology", "algorithm", "compression", "model") and a
// 64-bit hash of it, computed by the caller. Peers must agree on every part.
struct ConfigPart {
  std::string name;
  std::uint64_t hash = 0;
};

enum class ControlEventKind {
  kMissedHeartbeats,   // nothing heard for missedHeartbeats intervals: suspect
  kHeartbeatsResumed,  // heard again after kMissedHeartbeats
  kClosed,             // the control connection closed or failed: the peer is gone
};

class ControlChannel;
struct Neighbour;

struct ControlEvent {
  int peer = -1;
  // The connection that raised it: after a neighbour rejoined (BootstrapOptions::onRejoin), events
  // of its old connection may still arrive, and are the old one's.
  const ControlChannel* channel = nullptr;
  ControlEventKind kind = ControlEventKind::kClosed;
  double silentSeconds = 0;  // for kMissedHeartbeats: how long nothing was heard
  std::string message;  // "peer 3 missed heartbeats for 1.5 s" / "control connection closed: ..."
};

struct BootstrapOptions {
  int rank = 0;
  std::vector<std::string>
      peers;                    // control host:port of every peer, indexed by rank ("host:0" for
                                // our own entry binds an ephemeral port; see Bootstrap::listenPort)
  std::vector<int> neighbours;  // ranks we exchange data with (symmetric: they list us too)
  std::uint64_t incarnation = 0;  // bumps each time this peer restarts
  std::vector<ConfigPart> configParts;
  // peers.connect_timeout, peers.heartbeat_interval, and peers.dead_after in intervals.
  double connectTimeoutSeconds = 30.0;
  double heartbeatIntervalSeconds = 0.2;
  int missedHeartbeats = 10;  // silence of this many intervals raises kMissedHeartbeats
  std::size_t maxControlFrameBytes = 64 * 1024;
  // The pre-shared key (security.key_file). With it, both ends of every control connection prove
  // knowledge of it by challenge-response before anything else is trusted; a connection that does
  // not is dropped, logged (address, claimed rank) and counted, never fatal, and the neighbour's
  // rank stays open for the real one (docs/security.md). Without it: today's handshake.
  std::optional<security::Key> psk;
  // After the bootstrap completed: liveness events and control messages from neighbours. Optional.
  std::function<void(const ControlEvent&)> onEvent;
  std::function<void(int peer, std::uint16_t type, std::span<const std::uint8_t> payload)>
      onMessage;
  // Rejoining. When set, the control listener stays open after the bootstrap for the whole run:
  // a neighbour of lower rank that dials again (it restarted, or redialed after its connection
  // failed) goes through the same handshake (and, with a key, the same authentication), gets a new
  // data connection, and is handed over here (Loop thread). redial() is the dialing side. With it,
  // a bootstrap whose deadline passes with some neighbours connected and others not completes with
  // the connected ones (`done` gets fewer Neighbours than options.neighbours, each missing one
  // logged); the missing ones come later through onRejoin (we redial those of higher rank, those of
  // lower rank dial us). When every neighbour is missing, the bootstrap fails as without it.
  // A bootstrap that learns from a neighbour's hello that the run goes on (Hello::runningRound:
  // this peer rejoins it) completes at once with the neighbours connected so far.
  std::function<void(Neighbour)> onRejoin;
  // With onRejoin: a bootstrap whose deadline passes with every neighbour missing completes with
  // none instead of failing (a peer restarted with --resume: the others may have finished, or be
  // away; they join when they connect). Without it, that is an error naming the first (a
  // misconfigured address, a peer that was never started).
  bool completeAlone = false;
  // The round this peer trains at (-1: not training yet), sent in the hellos of rejoins
  // (handshake::Hello::runningRound) so that the rejoining peer knows the run goes on. Loop thread.
  std::function<std::int64_t()> runningRound;
};

// The live control connection to one neighbour, after the handshake.
class ControlChannel {
 public:
  virtual ~ControlChannel() = default;
  virtual int peer() const = 0;
  // Queues a small control message ("weights changed", "resync request"); `type` is the caller's.
  // Non-blocking. Errors: kResourceExhausted above maxControlFrameBytes, kUnavailable when closed.
  virtual Status send(std::uint16_t type, std::span<const std::uint8_t> payload) = 0;
  // Stops heartbeats and closes the connection (the peer sees kClosed). Idempotent; no event here.
  virtual void close() = 0;
  // A data message from the neighbour arrived: it is alive. On a busy machine its heartbeats may
  // wait behind bulk data (a 40 MB snapshot, a loop thread that was busy), so what arrives on the
  // data connection counts as hearing from it too. Loop thread; ignored before the link is handed
  // out and after it closed.
  virtual void heardFrom() = 0;
};

struct Neighbour {
  int peer = -1;
  std::uint64_t incarnation = 0;
  std::shared_ptr<Connection> data;  // from the data Context, connected to the peer's address
  std::shared_ptr<ControlChannel> control;
  // With BootstrapOptions::psk: this edge's session key, derived from the key and the handshake's
  // transcript (fresh nonces from both ends), for the engine's message seals.
  std::optional<security::Key> sessionKey;
  // With a key and security.encrypt: the AEAD both ends chose in the handshake
  // (handshake::negotiatedCipher).
  security::Cipher cipher = security::Cipher::kChaCha20Poly1305;
  // The neighbour's round when it was already training (it took us in as a rejoining peer), else
  // -1.
  std::int64_t runningRound = -1;
};

using BootstrapCallback = std::function<void(Result<std::vector<Neighbour>>)>;

class Bootstrap {
 public:
  virtual ~Bootstrap() = default;

  // Listens on options.peers[options.rank] and handshakes with every neighbour; `data` provides the
  // local address blob and, once all handshakes succeeded, one Connection per neighbour. `done`
  // runs once: ok with one Neighbour per options.neighbours entry (same order), or the first error
  // (which names the neighbour). `data` must outlive the bootstrap. Errors at start (bad address,
  // port in use) are returned directly and `done` never runs.
  static Result<std::shared_ptr<Bootstrap>> start(Loop& loop, BootstrapOptions options,
                                                  Context& data, BootstrapCallback done);

  // The bound control port (useful when our own entry asked for port 0).
  virtual std::uint16_t listenPort() const = 0;
  // Abandons a bootstrap in progress: `done` runs with kCancelled. No effect after completion.
  virtual void cancel() = 0;
  // Takes peers.connect_timeout as passed now: the neighbours not connected yet are missing (the
  // caller learnt that they will not come). No effect after completion. Loop thread.
  virtual void expire() = 0;
  // Connections dropped on the accepting side without ending the bootstrap, by reason
  // ("unauthenticated", "auth_failed", "version", "unexpected_rank", ...). Loop thread.
  virtual std::map<std::string, std::uint64_t> rejected() const = 0;
  // After a successful bootstrap, with BootstrapOptions::onRejoin: dials neighbour `peer` (of
  // higher rank: the lower rank dials) again, with backoff and jitter, until a handshake succeeds
  // (then onRejoin) or stopRedial(peer). A second call while one runs does nothing. Loop thread.
  virtual void redial(int peer) = 0;
  virtual void stopRedial(int peer) = 0;
  // Stops accepting and redialing (the run ends). Idempotent. Loop thread.
  virtual void close() = 0;
};

}  // namespace grapevine::transport
