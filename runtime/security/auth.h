// The cryptography of an authenticated edge (docs/security.md), all of it libsodium's except the
// bulk AEAD of the seals, which OpenSSL's libcrypto computes (the same ChaCha20-Poly1305, faster):
// - the handshake's challenge-response: each side proves knowledge of the pre-shared key by a keyed
//   BLAKE2b MAC (crypto_generichash) over a transcript that binds both ranks, both incarnations,
//   both fresh nonces and the config hash, with the prover's rank in the MAC's domain, so a proof
//   can be neither reflected nor replayed into another handshake;
// - the per-edge session key: keyed BLAKE2b of the same transcript under the pre-shared key, with
//   another domain; fresh for every handshake;
// - each message's seal: ChaCha20-Poly1305 (IETF) under the session key, with the 96-bit nonce
//   built from the sender's rank and its per-edge sequence number (unique per key and direction,
//   never reused: sequence numbers only grow within a session). MAC-only mode authenticates the
//   whole message as associated data; encrypt mode encrypts the payload and authenticates the
//   header.
// - a hello's private fields (the data address and the build id, docs/security.md): sealed in a
// box,
//   XChaCha20-Poly1305 under a key derived from the pre-shared key, with a fresh random 192-bit
//   nonce per box, so only a key holder reads where our data port is.
// Pure functions, thread-safe.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "runtime/security/key.h"

namespace grapevine::security {

inline constexpr std::size_t kNonceBytes = 32;
inline constexpr std::size_t kProofBytes = 32;
inline constexpr std::size_t kSealTagBytes = 16;  // Poly1305 tag appended to a sealed message
using Nonce = std::array<std::uint8_t, kNonceBytes>;
using Proof = std::array<std::uint8_t, kProofBytes>;

Nonce randomNonce();

inline constexpr std::size_t kDigestBytes = 32;
using Digest = std::array<std::uint8_t, kDigestBytes>;
// Unkeyed BLAKE2b (crypto_generichash) of `bytes`, and its first 8 bytes little-endian.
Digest digest(std::span<const std::uint8_t> bytes);
std::uint64_t digest64(std::span<const std::uint8_t> bytes);

// What both sides of one handshake agree on. `dialer` is the lower rank (it dials).
struct Transcript {
  std::uint32_t dialer = 0;
  std::uint32_t acceptor = 0;
  std::uint64_t dialerIncarnation = 0;
  std::uint64_t acceptorIncarnation = 0;
  Nonce dialerNonce{};
  Nonce acceptorNonce{};
  std::uint64_t configHash = 0;  // over both ends' config parts
  Digest dialerHello{};          // digest() of each hello as sent
  Digest acceptorHello{};
};

// The proof that `prover` (transcript.dialer or transcript.acceptor) knows `psk`.
Proof handshakeProof(const Key& psk, const Transcript& transcript, std::uint32_t prover);
// Constant-time comparison with the expected proof; false for a proof of the wrong size.
bool verifyHandshakeProof(const Key& psk, const Transcript& transcript, std::uint32_t prover,
                          std::span<const std::uint8_t> proof);
// The edge's session key (both sides derive the same one).
Key sessionKey(const Key& psk, const Transcript& transcript);
// The key that seals the edge's control frames after the handshake (transport/control_link.h),
// derived from its session key: its nonces never meet those of the data seals.
Key controlKey(const Key& session);
// What binds a data connection to the edge's handshake (transport::DataBinding): the token the
// lower rank (`lower` true) or the higher rank presents in its data hello, derived from the session
// key with its own label. Only the two ends of that handshake can compute it, and a new handshake
// (a rejoin, a restarted peer) gives new ones.
using BindingToken = std::array<std::uint8_t, 32>;
BindingToken dataBindingToken(const Key& session, bool lower);
// Constant-time equality of two byte strings (false when the sizes differ).
bool equalConstantTime(std::span<const std::uint8_t> a, std::span<const std::uint8_t> b);
// A config part's hash as a hello carries it under a key: keyed BLAKE2b of (a label, the part's
// name, its plain 64-bit hash), first 8 bytes little-endian. Equal for equal parts under one key,
// so peers still compare them; a prober without the key learns nothing from them (the plain hashes
// are of public, low-entropy values that a guess could confirm).
std::uint64_t configPartHash(const Key& psk, std::string_view name, std::uint64_t hash);

// The AEAD that encrypts an edge's messages (security.encrypt). Both ends choose it in the
// handshake: AES-256-GCM when both have AES and carry-less multiply in hardware (each hello's
// sealed fields say so), else ChaCha20-Poly1305. MAC-only seals (and control frames) are always
// ChaCha20-Poly1305: its Poly1305 is the faster MAC here (52 against 36 Gb/s for GMAC).
enum class Cipher : std::uint8_t { kChaCha20Poly1305 = 0, kAes256Gcm = 1 };
// Whether this machine can seal with AES-256-GCM at hardware speed (libsodium's CPU check: AES-NI
// and PCLMUL). GRAPEVINE_SEAL_NO_AES=1 says no (a peer without them, for tests and comparisons).
bool aesGcmAvailable();
std::string_view cipherName(Cipher cipher);

// Seals message[0, size - kSealTagBytes) in place and writes the tag into its last kSealTagBytes:
// the first `headerBytes` are authenticated, the rest is authenticated (encrypt false) or encrypted
// (encrypt true). `sender` and `sequence` form the nonce: the caller must never seal two different
// messages with the same (key, sender, sequence). message.size() >= headerBytes + kSealTagBytes.
// `cipher` applies with encrypt (both ends of the edge must use the same).
void seal(const Key& key, bool encrypt, std::uint32_t sender, std::uint64_t sequence,
          std::size_t headerBytes, std::span<std::uint8_t> message,
          Cipher cipher = Cipher::kChaCha20Poly1305);
// MAC-only open without touching the message: whether the tag in its last kSealTagBytes verifies.
bool verify(const Key& key, std::uint32_t sender, std::uint64_t sequence,
            std::span<const std::uint8_t> message);
// The inverse: checks the tag (constant time) and, with encrypt, decrypts the payload in place.
// False when the tag does not verify; the message is then unchanged without encrypt, and its
// payload is garbage with encrypt (it is decrypted before the tag is checked): decrypt a copy.
bool open(const Key& key, bool encrypt, std::uint32_t sender, std::uint64_t sequence,
          std::size_t headerBytes, std::span<std::uint8_t> message,
          Cipher cipher = Cipher::kChaCha20Poly1305);

// The key that seals a hello's private fields (handshake::encodeHello), derived from the
// pre-shared key with its own label.
Key helloKey(const Key& psk);
// A box: a fresh random nonce (kBoxNonceBytes), the ciphertext of `plaintext`, a Poly1305 tag;
// `associated` is authenticated, not included. Every call draws a new nonce, so two boxes never
// share one under a key.
inline constexpr std::size_t kBoxNonceBytes = 24;
inline constexpr std::size_t kBoxOverheadBytes = kBoxNonceBytes + kSealTagBytes;
std::vector<std::uint8_t> sealBox(const Key& key, std::span<const std::uint8_t> associated,
                                  std::span<const std::uint8_t> plaintext);
// The plaintext, or nullopt when the box is too short or does not verify (another key, another
// `associated`, a changed byte).
std::optional<std::vector<std::uint8_t>> openBox(const Key& key,
                                                 std::span<const std::uint8_t> associated,
                                                 std::span<const std::uint8_t> box);

}  // namespace grapevine::security
