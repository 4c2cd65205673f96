// Handshake proofs, session keys and message seals: what verifies and what must not.
#include "runtime/security/auth.h"

#include <sodium.h>

#include <catch2/catch.hpp>
#include <vector>

using namespace grapevine;
using namespace grapevine::security;

namespace {

Transcript sampleTranscript() {
  Transcript t;
  t.dialer = 0;
  t.acceptor = 1;
  t.dialerIncarnation = 7;
  t.acceptorIncarnation = 9;
  t.dialerNonce = randomNonce();
  t.acceptorNonce = randomNonce();
  t.configHash = 0x1234;
  return t;
}

}  // namespace

TEST_CASE("auth: a proof verifies only for its key, its transcript and its prover") {
  const Key psk = randomKey();
  const Transcript t = sampleTranscript();
  const Proof p = handshakeProof(psk, t, t.dialer);
  CHECK(verifyHandshakeProof(psk, t, t.dialer, p));
  // The other side's proof is a different value: a proof cannot be reflected back.
  CHECK(!verifyHandshakeProof(psk, t, t.acceptor, p));
  CHECK(!verifyHandshakeProof(randomKey(), t, t.dialer, p));
  auto changed = [&](auto edit) {
    Transcript u = t;
    edit(u);
    return verifyHandshakeProof(psk, u, u.dialer, p);
  };
  CHECK(!changed([](Transcript& u) { u.acceptor = 2; }));
  CHECK(!changed([](Transcript& u) { u.dialerIncarnation++; }));
  CHECK(!changed([](Transcript& u) { u.acceptorIncarnation++; }));
  CHECK(!changed([](Transcript& u) { u.dialerNonce[5] ^= 1; }));
  CHECK(!changed([](Transcript& u) { u.acceptorNonce[0] ^= 1; }));
  CHECK(!changed([](Transcript& u) { u.configHash ^= 1; }));
  CHECK(!changed([](Transcript& u) { u.acceptorHello[31] ^= 1; }));
  CHECK(!verifyHandshakeProof(psk, t, t.dialer, std::span(p).first(16)));
}

TEST_CASE("auth: session keys are equal on both ends and fresh per handshake") {
  const Key psk = randomKey();
  const Transcript t = sampleTranscript();
  CHECK(sessionKey(psk, t) == sessionKey(psk, t));
  CHECK(sessionKey(psk, t) != psk);
  CHECK(sessionKey(psk, sampleTranscript()) != sessionKey(psk, t));  // new nonces
}

TEST_CASE("auth: a sealed message opens once intact and never after a change") {
  const Key k = randomKey();
  for (const bool encrypt : {false, true}) {
    INFO("encrypt " << encrypt);
    std::vector<std::uint8_t> m(64 + 1000 + kSealTagBytes);
    for (std::size_t i = 0; i < m.size() - kSealTagBytes; ++i) m[i] = static_cast<std::uint8_t>(i);
    const auto plain = m;
    seal(k, encrypt, 3, 42, 64, m);
    // Encryption hides the payload and leaves the header readable.
    CHECK(std::equal(m.begin(), m.begin() + 64, plain.begin()));
    CHECK(std::equal(m.begin() + 64, m.end() - kSealTagBytes, plain.begin() + 64) == !encrypt);
    {
      auto copy = m;
      REQUIRE(open(k, encrypt, 3, 42, 64, copy));
      CHECK(std::equal(copy.begin(), copy.end() - kSealTagBytes, plain.begin()));
    }
    if (!encrypt) CHECK(verify(k, 3, 42, m));
    // A flipped bit anywhere, another sender or sequence number, another key: refused.
    for (std::size_t pos : {std::size_t{0}, std::size_t{16}, std::size_t{100}, m.size() - 1}) {
      auto bad = m;
      bad[pos] ^= 1;
      CHECK(!open(k, encrypt, 3, 42, 64, bad));
    }
    // (A failed open may clear the buffer it decrypts into: each try gets its own copy.)
    auto a = m, b = m, c = m;
    CHECK(!open(k, encrypt, 4, 42, 64, a));
    CHECK(!open(k, encrypt, 3, 43, 64, b));
    CHECK(!open(randomKey(), encrypt, 3, 42, 64, c));
  }
}

TEST_CASE("auth: AES-256-GCM seals open only as AES-256-GCM, intact, under their key") {
  // Encrypted edges negotiate AES-256-GCM when both ends have AES-NI; a message sealed with one
  // cipher never opens with the other (both ends must have chosen the same).
  const Key k = randomKey();
  std::vector<std::uint8_t> m(64 + 5000 + kSealTagBytes);
  for (std::size_t i = 0; i < m.size() - kSealTagBytes; ++i) m[i] = static_cast<std::uint8_t>(i);
  const auto plain = m;
  seal(k, true, 2, 9, 64, m, Cipher::kAes256Gcm);
  CHECK(std::equal(m.begin(), m.begin() + 64, plain.begin()));
  CHECK_FALSE(std::equal(m.begin() + 64, m.end() - kSealTagBytes, plain.begin() + 64));
  auto copy = m;
  REQUIRE(open(k, true, 2, 9, 64, copy, Cipher::kAes256Gcm));
  CHECK(std::equal(copy.begin(), copy.end() - kSealTagBytes, plain.begin()));
  auto other = m;
  CHECK_FALSE(open(k, true, 2, 9, 64, other, Cipher::kChaCha20Poly1305));
  for (std::size_t pos : {std::size_t{0}, std::size_t{70}, m.size() - 1}) {
    auto bad = m;
    bad[pos] ^= 4;
    CHECK_FALSE(open(k, true, 2, 9, 64, bad, Cipher::kAes256Gcm));
  }
  auto wrongSequence = m;
  CHECK_FALSE(open(k, true, 2, 10, 64, wrongSequence, Cipher::kAes256Gcm));
  // MAC-only seals are ChaCha20-Poly1305 whatever the cipher says (its Poly1305 is the faster MAC).
  std::vector<std::uint8_t> a = plain, b = plain;
  seal(k, false, 2, 9, 64, a, Cipher::kAes256Gcm);
  seal(k, false, 2, 9, 64, b, Cipher::kChaCha20Poly1305);
  CHECK(a == b);
  CHECK(cipherName(Cipher::kAes256Gcm) == "aes-256-gcm");
}

TEST_CASE("auth: seals are libsodium's ChaCha20-Poly1305 (IETF) byte for byte, at every size") {
  // The seals are computed by OpenSSL's libcrypto for speed; peers of older builds (libsodium) and
  // newer ones must agree on every byte: the same nonce, associated data, ciphertext and tag.
  const Key k = randomKey();
  for (const std::size_t payload : {std::size_t{0}, std::size_t{1}, std::size_t{63},
                                    std::size_t{64}, std::size_t{1000}, std::size_t{1} << 20}) {
    for (const bool encrypt : {false, true}) {
      INFO("payload " << payload << " encrypt " << encrypt);
      constexpr std::size_t kHeader = 64;
      std::vector<std::uint8_t> m(kHeader + payload + kSealTagBytes);
      for (std::size_t i = 0; i < m.size() - kSealTagBytes; ++i) {
        m[i] = static_cast<std::uint8_t>(i * 31 + 7);
      }
      const auto plain = m;
      seal(k, encrypt, 5, 0x0102030405060708ull, kHeader, m);
      // libsodium's construction of the same seal.
      std::uint8_t nonce[12] = {5, 0, 0, 0, 8, 7, 6, 5, 4, 3, 2, 1};
      std::vector<std::uint8_t> want = plain;
      const std::size_t body = want.size() - kSealTagBytes;
      std::uint8_t empty[1] = {0};
      if (encrypt) {
        crypto_aead_chacha20poly1305_ietf_encrypt_detached(
            want.data() + kHeader, want.data() + body, nullptr, plain.data() + kHeader,
            body - kHeader, plain.data(), kHeader, nullptr, nonce, k.data());
      } else {
        crypto_aead_chacha20poly1305_ietf_encrypt_detached(empty, want.data() + body, nullptr,
                                                           empty, 0, plain.data(), body, nullptr,
                                                           nonce, k.data());
      }
      CHECK(m == want);
      // And it opens again (the tag stays where it was).
      auto copy = m;
      CHECK(open(k, encrypt, 5, 0x0102030405060708ull, kHeader, copy));
      CHECK(std::equal(copy.begin(), copy.end() - kSealTagBytes, plain.begin()));
    }
  }
}

TEST_CASE("auth: a keyed config part hash is the same under one key and tells nothing without it") {
  const Key k = randomKey();
  const std::uint64_t h = configPartHash(k, "topology", 0x1111);
  CHECK(h == configPartHash(k, "topology", 0x1111));  // both ends compute the same value
  CHECK(h != 0x1111);
  CHECK(h != configPartHash(randomKey(), "topology", 0x1111));
  CHECK(h != configPartHash(k, "topology", 0x1112));
  CHECK(h != configPartHash(k, "algorithm", 0x1111));
}
