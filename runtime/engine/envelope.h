// The engine's per-edge message envelope: a fixed 64-byte header in front of the algorithm's
// message (the compressed frames, each with its own header and CRC32C). The envelope carries what
// exactly-once in-order delivery and liveness need: sender, incarnation, per-edge sequence number,
// round, the sender's live degree (for agreed Metropolis weights), and replica hashes.
// docs/wire-format.md.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "runtime/common/status.h"

namespace grapevine::engine {

inline constexpr std::uint32_t kEnvelopeMagic = 0x47564d45;  // "GVME"
inline constexpr std::uint16_t kEnvelopeVersion = 1;
inline constexpr std::size_t kEnvelopeBytes = 64;

// The envelope version this process writes and accepts: kEnvelopeVersion, unless the environment
// variable GRAPEVINE_TEST_ENVELOPE_VERSION (TEST-ONLY: it exists so a test can play a neighbour of
// another build; never set it in a run) gives another number (read once). The handshake carries it
// ("protocol.envelope"), so a skew fails the bootstrap instead of dropping every message.
std::uint16_t envelopeVersion();

enum EnvelopeFlags : std::uint16_t {
  kFlagHasHash = 1,        // publicHash is set (replica check round)
  kFlagResyncRequest = 2,  // the sender's replica of the receiver drifted: send your public copy
  kFlagSnapshot = 4,       // the payload ends with the sender's public copy (dense fp32)
  kFlagDiverged = 8,  // a divergence notice: the run diverged, stop (the message is the notice)
  // A collective round (the API's start-up model sync and finalize averaging): `round` is the
  // collective's index, the message is [u32 origin rank][f64 x dim] (PeerCore::beginCollective).
  kFlagCollective = 16,
  // Sealed with the edge's session key (security.key_file): security::kSealTagBytes of tag follow
  // the payload, and with security.encrypt the payload is ciphertext (PeerCore::setEdgeKey).
  kFlagSealed = 32,
};

struct Envelope {
  std::uint16_t flags = 0;
  std::uint32_t sender = 0;
  std::uint32_t incarnation = 0;
  std::uint64_t sequence = 0;  // per edge, from 0
  std::uint64_t round = 0;
  std::uint32_t liveDegree = 0;
  std::uint64_t publicHash = 0;
  std::uint32_t messageBytes = 0;   // the algorithm's message
  std::uint32_t snapshotBytes = 0;  // dense public copy after it (kFlagSnapshot)
  std::uint32_t payloadCrc = 0;     // CRC32C of message + snapshot
  // The consensus step the sender proposes for this round (`consensus_step: auto`, CHOCO mixes
  // each edge with the smaller proposal); 0: the step is fixed by the config.
  float proposedStep = 0.0f;
};

// CRC32C of a payload; `running` continues one over the bytes before it (the message's, for a
// snapshot that follows it), so payloadChecksum(B, payloadChecksum(A)) == payloadChecksum(A B).
std::uint32_t payloadChecksum(std::span<const std::uint8_t> payload, std::uint32_t running = 0);

// Writes the header into out[0, kEnvelopeBytes) with a CRC32C over the header.
void writeEnvelope(const Envelope& e, std::span<std::uint8_t> out);
// Checks, in order, the size, magic, version, header CRC, that the sizes fit `bytes`, and the
// payload CRC, and that the proposed step is finite and in [0, 1]. Errors: kDataLoss (truncated,
// bad magic, CRC, step), kFailedPrecondition (a version this build does not speak). The message
// starts with a stable reason, "<reason>: <detail>", one of "truncated", "bad_magic", "version",
// "crc", "bad_step": envelopeErrorReason() reads it for the dropped-frame counters.
Result<Envelope> readEnvelope(std::span<const std::uint8_t> bytes);
// The stable reason of a readEnvelope error ("crc"); empty for ok.
std::string_view envelopeErrorReason(const Status& status);

}  // namespace grapevine::engine
