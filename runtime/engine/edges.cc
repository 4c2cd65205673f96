#include "runtime/engine/edges.h"

#include <algorithm>

#include "runtime/common/byte_order.h"

namespace grapevine::engine {

Admission Edge::admit(int j, std::span<const std::uint8_t>& bytes,
                      std::vector<std::uint8_t>& opened) const {
  if (key) {
    // Nothing in the message is read before its tag verified (the sender and sequence number only
    // form the nonce: changed ones fail the tag).
    if (bytes.size() < kEnvelopeBytes + security::kSealTagBytes) return {{}, "auth", false};
    const auto sender = loadLe<std::uint32_t>(bytes.data() + 8);
    const auto sequence = loadLe<std::uint64_t>(bytes.data() + 16);
    if (encrypt) {
      opened.assign(bytes.begin(), bytes.end());
      if (!security::open(*key, true, sender, sequence, kEnvelopeBytes, opened, cipher))
        return {{}, "auth", false};
      bytes = opened;
    } else if (!security::verify(*key, sender, sequence, bytes)) {
      return {{}, "auth", false};
    }
    bytes = bytes.first(bytes.size() - security::kSealTagBytes);
  }
  // From here on the message is the neighbour's own (it authenticated, or the edge has no key):
  // refusals count towards its quarantine.
  auto env = readEnvelope(bytes);
  if (!env.isOk()) return {{}, std::string(envelopeErrorReason(env.status())), true};
  if (env->sender != static_cast<std::uint32_t>(j)) return {{}, "wrong_sender", true};
  // Sealed where we have no key for the edge, or the reverse.
  if (((env->flags & kFlagSealed) != 0) != key.has_value()) return {{}, "auth", true};
  // From before the neighbour's restart or redial (rejoin()).
  if (incarnation && env->incarnation != *incarnation) return {{}, "old_incarnation", false};
  if (env->sequence < nextSeqIn) return {{}, "duplicate", false};
  if (env->sequence - nextSeqIn > kSequenceWindow) return {{}, "sequence_window", true};
  return {*env, {}, false};
}

std::size_t Edge::frame(Envelope env, std::span<std::uint8_t> buf, std::size_t bytes) const {
  if (key) env.flags |= kFlagSealed;
  writeEnvelope(env, buf);
  if (!key) return bytes;
  security::seal(*key, encrypt, env.sender, env.sequence, kEnvelopeBytes,
                 buf.first(bytes + security::kSealTagBytes), cipher);
  return bytes + security::kSealTagBytes;
}

std::vector<std::uint8_t> Edge::hold(std::span<const std::uint8_t> bytes) {
  std::vector<std::uint8_t> buf;
  if (!spare.empty()) {
    buf = std::move(spare.back());
    spare.pop_back();
  }
  buf.assign(bytes.begin(), bytes.end());
  return buf;
}

void Edge::recycle(std::vector<std::uint8_t> buf, std::size_t roundBytes) {
  if (buf.capacity() > roundBytes) return;
  spare.push_back(std::move(buf));
}

void Edge::resyncBothWays(bool await) {
  sendSnapshot = true;
  if (!await) {
    resyncRequested = true;
    return;
  }
  // No request now: where both ends resync (a rejoin, a restart) the neighbour sends its snapshot
  // with its first message anyway, and a request on top had it send a second, dense one behind the
  // first (a rejoin cost each edge four snapshots, not two, and each held the link for several
  // rounds). Where only this end knows (a revived neighbour that was paused), the neighbour's first
  // message without a snapshot makes the edge ask at once (PeerCore::apply: awaiting_snapshot).
  awaitSnapshot = true;
}

void Edge::restart(std::uint32_t newIncarnation, const std::optional<security::Key>& newKey,
                   bool newEncrypt, security::Cipher newCipher, std::size_t roundBytes) {
  nextSeqIn = nextSeqOut = 0;
  incarnation = newIncarnation;
  key = newKey;
  encrypt = newEncrypt;
  cipher = newCipher;
  while (!ahead.empty()) {
    recycle(std::move(ahead.front()), roundBytes);
    ahead.pop_front();
  }
  collectives.clear();
  newestRound = -1;
  refusedRounds = 0;
  lastRefusedRound = -2;
  askedRound = INT64_MIN / 2;
  lastSnapshotRound = INT64_MIN / 2;
}

Edges::Edges(std::vector<int> neighbours, std::size_t wireCapacity)
    : neighbours_(std::move(neighbours)) {
  for (int j : neighbours_) edges_[j].out = LazyBuffer(wireCapacity);
}

Edge* Edges::find(int j) {
  const auto it = edges_.find(j);
  return it == edges_.end() ? nullptr : &it->second;
}

const Edge* Edges::find(int j) const {
  const auto it = edges_.find(j);
  return it == edges_.end() ? nullptr : &it->second;
}

bool Edges::markDead(int j, bool lost) {
  if (!edges_.count(j) || dead_.count(j)) return false;
  dead_[j] = lost;
  return true;
}

bool Edges::revive(int j) {
  const auto it = edges_.find(j);
  if (it == edges_.end() || !dead_.count(j) || it->second.quarantined) return false;
  dead_.erase(j);
  return true;
}

std::vector<int> Edges::liveOf(const std::vector<int>& peers) const {
  std::vector<int> out;
  for (int j : peers) {
    if (!dead_.count(j)) out.push_back(j);
  }
  return out;
}

int Edges::unlostDegree() const {
  const auto lost =
      std::count_if(dead_.begin(), dead_.end(), [](const auto& d) { return d.second; });
  return static_cast<int>(neighbours_.size()) - static_cast<int>(lost);
}

std::int64_t Edges::newestRound() const {
  std::int64_t newest = -1;
  for (const auto& [j, e] : edges_) {
    if (!dead_.count(j)) newest = std::max(newest, e.newestRound);
  }
  return newest;
}

std::size_t Edges::heldMessages() const {
  std::size_t n = 0;
  for (const auto& [j, e] : edges_) n += e.ahead.size() + e.collectives.size();
  return n;
}

}  // namespace grapevine::engine
