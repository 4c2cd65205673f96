#include "runtime/security/auth.h"

#include <openssl/evp.h>
#include <sodium.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <vector>

#include "runtime/common/byte_order.h"

namespace grapevine::security {
namespace {

// Domain labels: a proof, a session key and anything else keyed by the PSK never collide.
constexpr std::string_view kProofLabel = "grapevine/v1/handshake-proof";
constexpr std::string_view kSessionLabel = "grapevine/v1/session-key";
constexpr std::string_view kControlLabel = "grapevine/v1/control-key";
constexpr std::string_view kBindLowerLabel = "grapevine/v1/data-binding/lower";
constexpr std::string_view kBindHigherLabel = "grapevine/v1/data-binding/higher";
constexpr std::string_view kConfigPartLabel = "grapevine/v1/config-part";
constexpr std::string_view kHelloLabel = "grapevine/v1/hello-fields";

std::vector<std::uint8_t> encode(std::string_view label, const Transcript& t,
                                 std::uint32_t prover) {
  std::vector<std::uint8_t> m(label.begin(), label.end());
  auto le = [&m](auto v) {
    std::uint8_t b[sizeof v];
    storeLe(b, v);
    m.insert(m.end(), b, b + sizeof v);
  };
  le(t.dialer);
  le(t.acceptor);
  le(t.dialerIncarnation);
  le(t.acceptorIncarnation);
  m.insert(m.end(), t.dialerNonce.begin(), t.dialerNonce.end());
  m.insert(m.end(), t.acceptorNonce.begin(), t.acceptorNonce.end());
  le(t.configHash);
  m.insert(m.end(), t.dialerHello.begin(), t.dialerHello.end());
  m.insert(m.end(), t.acceptorHello.begin(), t.acceptorHello.end());
  le(prover);
  return m;
}

template <std::size_t N>
std::array<std::uint8_t, N> keyedHash(const Key& key, const std::vector<std::uint8_t>& m) {
  if (!initialize().isOk()) std::abort();
  std::array<std::uint8_t, N> out;
  crypto_generichash(out.data(), out.size(), m.data(), m.size(), key.data(), key.size());
  return out;
}

void nonceOf(std::uint32_t sender, std::uint64_t sequence,
             std::uint8_t (&n)[crypto_aead_chacha20poly1305_IETF_NPUBBYTES]) {
  static_assert(crypto_aead_chacha20poly1305_IETF_NPUBBYTES == 12);
  storeLe(n, sender);
  storeLe(n + 4, sequence);
}

// The bulk AEAD of message and control-frame seals: ChaCha20-Poly1305 (RFC 8439), the same
// construction as libsodium's crypto_aead_chacha20poly1305_ietf, byte for byte (security_test
// compares the two), computed by OpenSSL's libcrypto, whose AVX-512 / AVX2 code seals 4 MiB
// about 3x faster here than libsodium's (MAC-only 52 vs 16 Gbit/s, encrypted 12 vs 6 Gbit/s,
// measured in one process; docs/security.md "Measured"). One context per thread, reused.
class Aead {
 public:
  Aead() : ctx_(EVP_CIPHER_CTX_new()) {
    if (!ctx_ || !cipher(Cipher::kChaCha20Poly1305) || !cipher(Cipher::kAes256Gcm)) std::abort();
  }
  ~Aead() { EVP_CIPHER_CTX_free(ctx_); }
  Aead(const Aead&) = delete;
  Aead& operator=(const Aead&) = delete;

  // Authenticates aad, encrypts in[0, n) into out (n may be 0), writes the tag.
  void seal(Cipher c, const Key& key, const std::uint8_t* nonce, std::span<const std::uint8_t> aad,
            const std::uint8_t* in, std::size_t n, std::uint8_t* out, std::uint8_t* tag) {
    int len = 0;
    bool ok = EVP_EncryptInit_ex2(ctx_, cipher(c), key.data(), nonce, nullptr) == 1 &&
              update(true, aad.data(), aad.size(), nullptr) && update(true, in, n, out) &&
              EVP_EncryptFinal_ex(ctx_, out, &len) == 1 &&
              EVP_CIPHER_CTX_ctrl(ctx_, EVP_CTRL_AEAD_GET_TAG, kSealTagBytes, tag) == 1;
    if (!ok) std::abort();  // only a broken libcrypto fails here
  }
  // Checks the tag over aad and in[0, n), decrypting into out; false when it does not verify.
  bool open(Cipher c, const Key& key, const std::uint8_t* nonce, std::span<const std::uint8_t> aad,
            const std::uint8_t* in, std::size_t n, std::uint8_t* out, const std::uint8_t* tag) {
    int len = 0;
    std::uint8_t t[kSealTagBytes];
    std::memcpy(t, tag, kSealTagBytes);  // the tag may lie in the buffer being decrypted
    return EVP_DecryptInit_ex2(ctx_, cipher(c), key.data(), nonce, nullptr) == 1 &&
           update(false, aad.data(), aad.size(), nullptr) && update(false, in, n, out) &&
           EVP_CIPHER_CTX_ctrl(ctx_, EVP_CTRL_AEAD_SET_TAG, kSealTagBytes, t) == 1 &&
           EVP_DecryptFinal_ex(ctx_, out, &len) == 1;  // compares the tag in constant time
  }

 private:
  // Fetched once (an implicit fetch per call costs a provider lookup); 12-byte nonces, 16-byte
  // tags, 32-byte keys for both.
  static const EVP_CIPHER* cipher(Cipher c) {
    static EVP_CIPHER* chacha = EVP_CIPHER_fetch(nullptr, "ChaCha20-Poly1305", nullptr);
    static EVP_CIPHER* aes = EVP_CIPHER_fetch(nullptr, "AES-256-GCM", nullptr);
    return c == Cipher::kAes256Gcm ? aes : chacha;
  }
  // In pieces that fit an int; out == nullptr: associated data.
  bool update(bool encrypt, const std::uint8_t* in, std::size_t n, std::uint8_t* out) {
    constexpr std::size_t kPiece = std::size_t{1} << 30;
    for (std::size_t done = 0; done < n;) {
      const std::size_t k = std::min(kPiece, n - done);
      int len = 0;
      const int rc = encrypt ? EVP_EncryptUpdate(ctx_, out ? out + done : nullptr, &len, in + done,
                                                 static_cast<int>(k))
                             : EVP_DecryptUpdate(ctx_, out ? out + done : nullptr, &len, in + done,
                                                 static_cast<int>(k));
      if (rc != 1) return false;
      done += k;
    }
    return true;
  }

  EVP_CIPHER_CTX* ctx_;
};

Aead& aead() {
  thread_local Aead a;
  return a;
}

}  // namespace

Nonce randomNonce() {
  Nonce n;
  randomBytes(n);
  return n;
}

Digest digest(std::span<const std::uint8_t> bytes) {
  if (!initialize().isOk()) std::abort();
  Digest d;
  crypto_generichash(d.data(), d.size(), bytes.data(), bytes.size(), nullptr, 0);
  return d;
}

std::uint64_t digest64(std::span<const std::uint8_t> bytes) {
  return loadLe<std::uint64_t>(digest(bytes).data());
}

Proof handshakeProof(const Key& psk, const Transcript& t, std::uint32_t prover) {
  return keyedHash<kProofBytes>(psk, encode(kProofLabel, t, prover));
}

bool verifyHandshakeProof(const Key& psk, const Transcript& t, std::uint32_t prover,
                          std::span<const std::uint8_t> proof) {
  if (proof.size() != kProofBytes) return false;
  const Proof want = handshakeProof(psk, t, prover);
  return sodium_memcmp(want.data(), proof.data(), kProofBytes) == 0;
}

Key sessionKey(const Key& psk, const Transcript& t) {
  return keyedHash<kKeyBytes>(psk, encode(kSessionLabel, t, 0));
}

Key controlKey(const Key& session) {
  return keyedHash<kKeyBytes>(
      session, std::vector<std::uint8_t>(kControlLabel.begin(), kControlLabel.end()));
}

BindingToken dataBindingToken(const Key& session, bool lower) {
  const std::string_view label = lower ? kBindLowerLabel : kBindHigherLabel;
  return keyedHash<32>(session, std::vector<std::uint8_t>(label.begin(), label.end()));
}

bool equalConstantTime(std::span<const std::uint8_t> a, std::span<const std::uint8_t> b) {
  if (a.size() != b.size()) return false;
  if (a.empty()) return true;
  return sodium_memcmp(a.data(), b.data(), a.size()) == 0;
}

std::uint64_t configPartHash(const Key& psk, std::string_view name, std::uint64_t hash) {
  std::vector<std::uint8_t> m(kConfigPartLabel.begin(), kConfigPartLabel.end());
  m.push_back(static_cast<std::uint8_t>(name.size() & 0xFF));
  m.insert(m.end(), name.begin(), name.end());
  std::uint8_t h[8];
  storeLe(h, hash);
  m.insert(m.end(), h, h + 8);
  return loadLe<std::uint64_t>(keyedHash<16>(psk, m).data());  // BLAKE2b gives 16 bytes or more
}

bool aesGcmAvailable() {
  static const bool available = [] {
    if (const char* no = std::getenv("GRAPEVINE_SEAL_NO_AES"); no && std::string_view(no) == "1") {
      return false;
    }
    return initialize().isOk() && crypto_aead_aes256gcm_is_available() == 1;
  }();
  return available;
}

std::string_view cipherName(Cipher cipher) {
  return cipher == Cipher::kAes256Gcm ? "aes-256-gcm" : "chacha20-poly1305";
}

void seal(const Key& key, bool encrypt, std::uint32_t sender, std::uint64_t sequence,
          std::size_t headerBytes, std::span<std::uint8_t> message, Cipher cipher) {
  static_assert(crypto_aead_chacha20poly1305_IETF_ABYTES == kSealTagBytes);
  static_assert(crypto_aead_chacha20poly1305_IETF_KEYBYTES == kKeyBytes);
  std::uint8_t nonce[crypto_aead_chacha20poly1305_IETF_NPUBBYTES];
  nonceOf(sender, sequence, nonce);
  const std::size_t body = message.size() - kSealTagBytes;
  std::uint8_t* tag = message.data() + body;
  if (encrypt) {
    std::uint8_t* payload = message.data() + headerBytes;
    aead().seal(cipher, key, nonce, message.first(headerBytes), payload, body - headerBytes,
                payload, tag);
  } else {
    aead().seal(Cipher::kChaCha20Poly1305, key, nonce, message.first(body), nullptr, 0, nullptr,
                tag);
  }
}

bool verify(const Key& key, std::uint32_t sender, std::uint64_t sequence,
            std::span<const std::uint8_t> message) {
  if (message.size() < kSealTagBytes) return false;
  std::uint8_t nonce[crypto_aead_chacha20poly1305_IETF_NPUBBYTES];
  nonceOf(sender, sequence, nonce);
  const std::size_t body = message.size() - kSealTagBytes;
  return aead().open(Cipher::kChaCha20Poly1305, key, nonce, message.first(body), nullptr, 0,
                     nullptr, message.data() + body);
}

bool open(const Key& key, bool encrypt, std::uint32_t sender, std::uint64_t sequence,
          std::size_t headerBytes, std::span<std::uint8_t> message, Cipher cipher) {
  if (message.size() < headerBytes + kSealTagBytes) return false;
  if (!encrypt) return verify(key, sender, sequence, message);
  std::uint8_t nonce[crypto_aead_chacha20poly1305_IETF_NPUBBYTES];
  nonceOf(sender, sequence, nonce);
  const std::size_t body = message.size() - kSealTagBytes;
  std::uint8_t* payload = message.data() + headerBytes;
  return aead().open(cipher, key, nonce, message.first(headerBytes), payload, body - headerBytes,
                     payload, message.data() + body);
}

Key helloKey(const Key& psk) {
  return keyedHash<kKeyBytes>(psk,
                              std::vector<std::uint8_t>(kHelloLabel.begin(), kHelloLabel.end()));
}

std::vector<std::uint8_t> sealBox(const Key& key, std::span<const std::uint8_t> associated,
                                  std::span<const std::uint8_t> plaintext) {
  static_assert(crypto_aead_xchacha20poly1305_IETF_NPUBBYTES == kBoxNonceBytes);
  static_assert(crypto_aead_xchacha20poly1305_IETF_ABYTES == kSealTagBytes);
  static_assert(crypto_aead_xchacha20poly1305_IETF_KEYBYTES == kKeyBytes);
  if (!initialize().isOk()) std::abort();
  std::vector<std::uint8_t> box(kBoxOverheadBytes + plaintext.size());
  randomBytes(std::span(box).first(kBoxNonceBytes));
  unsigned long long written = 0;
  crypto_aead_xchacha20poly1305_ietf_encrypt(box.data() + kBoxNonceBytes, &written,
                                             plaintext.data(), plaintext.size(), associated.data(),
                                             associated.size(), nullptr, box.data(), key.data());
  box.resize(kBoxNonceBytes + written);
  return box;
}

std::optional<std::vector<std::uint8_t>> openBox(const Key& key,
                                                 std::span<const std::uint8_t> associated,
                                                 std::span<const std::uint8_t> box) {
  if (box.size() < kBoxOverheadBytes) return std::nullopt;
  if (!initialize().isOk()) std::abort();
  std::vector<std::uint8_t> plain(box.size() - kBoxOverheadBytes);
  unsigned long long written = 0;
  if (crypto_aead_xchacha20poly1305_ietf_decrypt(
          plain.data(), &written, nullptr, box.data() + kBoxNonceBytes, box.size() - kBoxNonceBytes,
          associated.data(), associated.size(), box.data(), key.data()) != 0) {
    return std::nullopt;
  }
  plain.resize(written);
  return plain;
}

}  // namespace grapevine::security
