// The bootstrap's control protocol as bytes: control frames, the hello both peers send, the reject.
// Pure functions, no I/O and no state, so every malformed input can be tested without a socket.
// docs/transports.md has the tables.
//
// Control frame: u32 payload length | u16 type | payload (little-endian).
// Hello payload: a 24-byte fixed prefix that is the same in every protocol version (so a version
// mismatch can still be attributed to a peer): magic u32 | version u16 | reserved u16 | sender u32
// | receiver u32 | incarnation u64; then u16 length + backend name, u32 length + address blob, u16
// count + that many config parts (u8 name length, name, u64 hash); with a pre-shared key
// (BootstrapOptions::psk) then u8 1 and the sender's 32-byte fresh nonce; then u8 2, u16 length and
// the sender's build id (text, for skew messages); then, from a peer that is already training (a
// neighbour rejoins it), u8 3 and its current round (u64). Older builds ignore bytes after the
// parts (and a trailer that does not start with the nonce), so they still read the fields they
// know. With a key the private fields are not in clear: the address field is empty, and the
// address blob, the build id, the running round and the seal capabilities (u8, then) travel in
// u8 4, u32 length and a box
// (security::sealBox under security::helloKey, the hello's bytes before the u8 4 as associated
// data) that only a key holder opens (openSealedFields), after the proofs. There is no separate
// "accept" message: the acceptor answers the dialer's hello with its own hello, and each side
// compares the two itself (compareHellos); a side that finds a difference sends a reject whose
// payload is the reason as UTF-8 text.
//
// With a key, an auth frame (type 5, payload: a 32-byte proof) follows: the acceptor sends its
// proof right after its hello, the dialer sends its own only after checking the acceptor's
// (docs/security.md); the proofs are security::handshakeProof over transcriptOf().
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/common/status.h"
#include "runtime/security/auth.h"
#include "runtime/transport/bootstrap.h"

namespace grapevine::transport::handshake {

inline constexpr std::size_t kFrameHeaderBytes = 6;
enum FrameType : std::uint16_t { kHello = 1, kReject = 2, kHeartbeat = 3, kUser = 4, kAuth = 5 };

struct FrameHeader {
  std::uint32_t payloadBytes = 0;
  std::uint16_t type = 0;
};

// Reads the kFrameHeaderBytes at `header`. Every value is well-formed; the caller checks the length
// against its limit before allocating anything for the payload.
FrameHeader decodeFrameHeader(const std::uint8_t* header);
// Header + payload, ready to write.
std::vector<std::uint8_t> encodeFrame(std::uint16_t type, std::span<const std::uint8_t> payload);

// With a key, every control frame after the handshake is sealed (security::seal, MAC only): the
// payload is followed by a kSealTagBytes tag over the header (length and type) and the payload,
// under security::controlKey of the edge's session key, with the nonce (sender's rank, the
// sender's count of sealed frames on this link: 0, 1, ...). A frame that verifies with neither the
// next count nor one of the 7 after it (forged, replayed, reordered) is dropped; one that verifies
// with a later count skips the counts between (the neighbour's frames altered on the way), so one
// bad frame does not make every later one unverifiable. A link on which frames arrive but none
// verifies for peers.dead_after is closed, and the edge redialed (ControlLink::tick).
std::vector<std::uint8_t> encodeSealedFrame(const security::Key& controlKey, std::uint32_t sender,
                                            std::uint64_t sequence, std::uint16_t type,
                                            std::span<const std::uint8_t> payload);
// `header` (kFrameHeaderBytes) and `body` as read: the payload without the tag when the tag
// verifies, nullopt when it does not (or the body is shorter than a tag).
std::optional<std::span<const std::uint8_t>> openSealedFrame(const security::Key& controlKey,
                                                             std::uint32_t sender,
                                                             std::uint64_t sequence,
                                                             const std::uint8_t* header,
                                                             std::span<const std::uint8_t> body);

inline constexpr std::size_t kHelloFixedBytes = 24;
// Field limits set by the widths of their length prefixes.
inline constexpr std::size_t kMaxBackendNameBytes = 0xFFFF;
inline constexpr std::size_t kMaxAddressBytes = 0xFFFFFFFF;
inline constexpr std::size_t kMaxConfigParts = 0xFFFF;
inline constexpr std::size_t kMaxPartNameBytes = 0xFF;
inline constexpr std::size_t kMaxBuildIdBytes = 0xFF;  // longer build ids are cut

// The fixed prefix of a hello: readable whatever the protocol version.
struct HelloPrefix {
  std::uint16_t version = kControlProtocolVersion;
  int sender = -1;
  int receiver = -1;  // whom the sender means to reach
  std::uint64_t incarnation = 0;
};

struct Hello : HelloPrefix {
  std::string backend;                // the data backend's name
  std::vector<std::uint8_t> address;  // the data backend's address blob
  std::vector<ConfigPart> parts;
  std::optional<security::Nonce> nonce;  // present when the sender has a pre-shared key
  std::string buildId;                   // the sender's build (buildId()); empty from older builds
  // -1: the sender is bootstrapping; otherwise it is training, at this round (a neighbour that
  // restarted is rejoining it: bootstrap.h, BootstrapOptions::onRejoin).
  std::int64_t runningRound = -1;
  // With a key, in the sealed fields: what the sender's seals can do (kCapabilityAesGcm). The
  // edge encrypts with AES-256-GCM when both hellos have it (negotiatedCipher).
  std::uint8_t capabilities = 0;
  // As decoded, with a key: the box of the private fields (address, buildId, runningRound) and
  // the offset of its trailer item in the hello's bytes; empty until openSealedFields opens it.
  std::vector<std::uint8_t> sealed;
  std::size_t sealedAt = 0;
};

inline constexpr std::uint8_t kCapabilityAesGcm = 1;
// The cipher of an edge whose hellos are `ours` and `theirs` (both ends compute the same).
security::Cipher negotiatedCipher(const Hello& ours, const Hello& theirs);

// Config parts named "protocol.<name>" carry a protocol version as their value (not a hash):
// compareHellos names a difference as "<name> protocol version mismatch ... ours A, theirs B".
inline constexpr std::string_view kProtocolPartPrefix = "protocol.";

// The authenticated transcript of one handshake: both hellos as sent (their bytes bind ranks,
// incarnations, nonces, backend, address and config parts) and those fields spelled out.
security::Transcript transcriptOf(const Hello& dialer, std::span<const std::uint8_t> dialerBytes,
                                  const Hello& acceptor,
                                  std::span<const std::uint8_t> acceptorBytes);

// Errors: kInvalidArgument when a field does not fit its length prefix (the k*Max* limits above),
// or when `sealWith` (the pre-shared key, as BootstrapOptions::psk holds it) is set for a hello
// without a nonce. With `sealWith` the address, build id and running round go into a fresh box (a
// new nonce every call).
Result<std::vector<std::uint8_t>> encodeHello(
    const Hello& hello, const std::optional<security::Key>& sealWith = std::nullopt);
// Checks the length and magic of the fixed prefix only (any version). Errors: kDataLoss (shorter
// than kHelloFixedBytes, bad magic).
Result<HelloPrefix> decodeHelloPrefix(std::span<const std::uint8_t> payload);
// A whole hello. Errors: those of decodeHelloPrefix; kFailedPrecondition for a protocol version
// other than ours (naming both); kDataLoss when a field runs past the end (naming the field).
// Bytes after the last config part are ignored (room for additions in the same version).
// A sealed box is kept as it is (Hello::sealed): decoding needs no key.
Result<Hello> decodeHello(std::span<const std::uint8_t> payload);
// With a key, after the other end proved it: opens `hello`'s box (`helloBytes` are the bytes it
// was decoded from) into its address, build id and running round. Errors: kFailedPrecondition
// when the hello carries no box (a key holder always seals) or the box does not open under `psk`.
Status openSealedFields(Hello& hello, std::span<const std::uint8_t> helloBytes,
                        const security::Key& psk);

// Every difference between our hello and theirs, or ok: the receiver they meant to reach, the
// backend, whether both have a key, protocol versions (parts "protocol.*", first, with both build
// ids), and every config part (missing, extra, or with a different hash). Symmetric: both sides
// name the same parts. `showValues` false leaves out our hashes and build id (the text of a reject:
// it reveals nothing of ours beyond the part's name). Errors: kFailedPrecondition.
Status compareHellos(const Hello& ours, const Hello& theirs, bool showValues = true);

// A reject's payload is its reason as text.
std::span<const std::uint8_t> encodeReject(std::string_view reason);
std::string decodeReject(std::span<const std::uint8_t> payload);

// A user message's payload: u16 user type | bytes.
struct UserMessage {
  std::uint16_t type = 0;
  std::span<const std::uint8_t> bytes;  // a view into the decoded payload
};
std::vector<std::uint8_t> encodeUserMessage(std::uint16_t type,
                                            std::span<const std::uint8_t> bytes);
// Errors: kDataLoss when shorter than the u16 type.
Result<UserMessage> decodeUserMessage(std::span<const std::uint8_t> payload);

}  // namespace grapevine::transport::handshake
