// One peer's edges: per neighbour, the exactly-once in-order delivery state, the messages held for
// later, the seal, and what the round and the membership code know of it (Edge); over all of them,
// which are dead and the live degree (Edges). No I/O and no round math: PeerCore drives them.
// Thread contract: the owner's (PeerCore's) thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "runtime/common/lazy_buffer.h"
#include "runtime/engine/envelope.h"
#include "runtime/security/auth.h"
#include "runtime/security/key.h"

namespace grapevine::engine {

// A message more than this many sequence numbers ahead of the edge's next is refused as
// `sequence_window`, so one forged number cannot make every later message a duplicate.
inline constexpr std::uint64_t kSequenceWindow = std::uint64_t{1} << 20;

// What Edge::admit() found: the envelope of a message to take, or why it goes (`refuse`: the
// message is the neighbour's own, authenticated or on an edge without a key, and counts towards
// its quarantine; otherwise a drop that does not).
struct Admission {
  std::optional<Envelope> envelope;
  std::string reason;  // owned: an envelope error's reason is a view into its Status
  bool refuse = false;
};

struct Edge {
  std::uint64_t nextSeqIn = 0;
  std::uint64_t nextSeqOut = 0;
  std::uint32_t degreeAt = 0;  // the neighbour's live degree from its current-round envelope
  float stepAt = 0.0f;         // its proposed consensus step, from the same envelope
  bool arrived = false;
  std::int64_t lastRound = -1;
  std::int64_t appliedThrough = -1;  // latest round whose message the algorithm took (mixDelay)
  std::int64_t needRound = -1;       // mixDelay: the round whose message this round waits for
  bool resyncRequested = false;      // we asked it for a snapshot
  std::int64_t lastSnapshotRound = INT64_MIN / 2;  // when we last sent it one
  bool sendSnapshot = false;                       // it asked us for one
  LazyBuffer out;  // envelope + message (+ snapshot), reused; resident as far as written
  std::vector<std::uint8_t> notice;              // envelope + divergence notice
  std::size_t outBytes = 0;                      // of `out`, this round
  std::deque<std::vector<std::uint8_t>> ahead;   // messages of future rounds, in order
  std::vector<std::vector<std::uint8_t>> spare;  // reusable buffers for `ahead`
  // Collective messages (index, bytes), in arrival order.
  std::deque<std::pair<std::uint64_t, std::vector<std::uint8_t>>> collectives;
  std::optional<security::Key> key;  // PeerCore::setEdgeKey
  bool encrypt = false;
  security::Cipher cipher = security::Cipher::kChaCha20Poly1305;
  // Rounds (of this peer) with a refused message since its last applied one.
  int refusedRounds = 0;
  std::int64_t lastRefusedRound = -2;
  bool quarantined = false;  // dropped for good (never revived)
  // Revived or skipped: the replica of its public copy is a placeholder until its snapshot comes;
  // its messages are not applied before (counted as `awaiting_snapshot`).
  bool awaitSnapshot = false;
  std::int64_t askedRound = INT64_MIN / 2;  // when this peer last asked it for a snapshot
  bool heard = false;                       // its message of this round came but was not applied
  std::int64_t revivedRound = -2;           // the round of this peer in which it was taken back
  std::int64_t newestRound = -1;  // newest round of its messages, round-window drops included
  std::optional<std::uint32_t> incarnation;  // the only one accepted (PeerCore::setEdgeIncarnation)
  // Revived or rejoined: the neighbour was away and may be behind; no round waits for it until a
  // message of a round within PeerCoreOptions::catchUpLag of ours came from it, or its hello said
  // it is that far (newestRound).
  bool catchingUp = false;

  // The checks of an incoming message before its content is read, in order: the seal (with a key;
  // `opened` receives the decrypted copy with security.encrypt, and `bytes` loses the tag), the
  // envelope, the sender, the seal flag, the incarnation and the sequence number.
  Admission admit(int neighbour, std::span<const std::uint8_t>& bytes,
                  std::vector<std::uint8_t>& opened) const;
  // Writes `env` (marked sealed when the edge has a key) over buf's first kEnvelopeBytes and seals
  // buf[0, bytes); returns the message's length with the tag.
  std::size_t frame(Envelope env, std::span<std::uint8_t> buf, std::size_t bytes) const;
  // A copy of `bytes` in a reused buffer (or a new one): a message held for later.
  std::vector<std::uint8_t> hold(std::span<const std::uint8_t> bytes);
  // Gives a held message's buffer back to the spares, or frees it when it is larger than
  // `roundBytes` (a snapshot's or a collective's: kept, it would hold a model's worth of memory
  // for the rest of the run).
  void recycle(std::vector<std::uint8_t> buf, std::size_t roundBytes);
  // The edge sends its public copy with its next message and asks its neighbour for its copy; with
  // `await`, nothing of the neighbour is applied before the snapshot came, and the edge asks only
  // when a message of the neighbour comes without one (both ends of a rejoin send theirs unasked).
  void resyncBothWays(bool await);
  // A fresh connection (rejoin): what came or went on the old ones is gone with them.
  void restart(std::uint32_t newIncarnation, const std::optional<security::Key>& newKey,
               bool newEncrypt, security::Cipher newCipher, std::size_t roundBytes);
};

// The edges to every neighbour of the schedule and which of them are dead.
class Edges {
 public:
  // wireCapacity: each edge's send buffer.
  Edges(std::vector<int> neighbours, std::size_t wireCapacity);

  const std::vector<int>& neighbours() const { return neighbours_; }
  Edge* find(int j);
  const Edge* find(int j) const;
  Edge& at(int j) { return edges_.at(j); }
  const Edge& at(int j) const { return edges_.at(j); }
  auto begin() { return edges_.begin(); }
  auto end() { return edges_.end(); }
  auto begin() const { return edges_.begin(); }
  auto end() const { return edges_.end(); }

  bool isDead(int j) const { return dead_.count(j) != 0; }
  // Marks j dead (`lost`: before it finished); false when it is no neighbour or dead already.
  bool markDead(int j, bool lost);
  // Takes j back; false when it is no neighbour, not dead, or quarantined.
  bool revive(int j);
  // Of `peers`, the live ones, in order.
  std::vector<int> liveOf(const std::vector<int>& peers) const;
  int liveDegree() const { return static_cast<int>(neighbours_.size() - dead_.size()); }
  // Neighbours not lost (a neighbour that finished its rounds is not lost).
  int unlostDegree() const;
  // The newest round any live neighbour is known to be at (-1: none).
  std::int64_t newestRound() const;
  // Messages held for later (future rounds and collectives), over every edge.
  std::size_t heldMessages() const;

 private:
  std::vector<int> neighbours_;  // union over the schedule, sorted
  std::map<int, Edge> edges_;
  std::map<int, bool> dead_;  // dropped edges; true: lost before it finished
};

}  // namespace grapevine::engine
