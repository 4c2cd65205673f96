// libFuzzer target: the engine's envelope reader (runtime/engine/envelope.h) and, with a key, the
// sealed open path in front of it (runtime/security/auth.h), in the order PeerCore::onMessage
// runs them on a neighbour's message: size check, verify (MAC only) or open (encrypt) under the
// edge's session key, strip the tag, readEnvelope, the sealed flag against the edge's key.
//
// Input: u8 mode | message. Mode bits 0-1: the edge's key (0 none, 1 MAC only, 2 encrypt, 3 none);
// bit 2: "fix up" first: rewrite the sizes, the payload CRC and the header CRC to match the bytes
// (writeEnvelope) and, with a key, seal under the fixed test key, so the checks behind the CRCs
// and the tag are reached (the fuzzer cannot forge CRC32C or Poly1305 by mutation). Bit 3 with
// bit 2: flip one payload byte after sealing (chosen by the mode's high bits).
// Properties beyond "no crash, no sanitizer report": an accepted header re-encodes to the same 64
// bytes; every error has a stable reason; a message sealed by the harness opens, with a byte
// flipped it does not, and nothing else opens; PeerCore's sealed-flag check passes every message
// that authenticated or that the harness fixed up.
#include <algorithm>
#include <bit>
#include <cstdlib>
#include <cstring>
#include <span>
#include <vector>

#include "runtime/common/byte_order.h"
#include "runtime/engine/envelope.h"
#include "runtime/security/auth.h"

using namespace grapevine;
using engine::kEnvelopeBytes;

namespace {

security::Key testKey() {
  security::Key k{};
  for (std::size_t i = 0; i < k.size(); ++i) k[i] = static_cast<std::uint8_t>(0x3C ^ (i * 7));
  return k;
}

// The header's fields as stored, whatever their checks say.
engine::Envelope rawFields(const std::uint8_t* p) {
  engine::Envelope e;
  e.flags = loadLe<std::uint16_t>(p + 6);
  e.sender = loadLe<std::uint32_t>(p + 8);
  e.incarnation = loadLe<std::uint32_t>(p + 12);
  e.sequence = loadLe<std::uint64_t>(p + 16);
  e.round = loadLe<std::uint64_t>(p + 24);
  e.liveDegree = loadLe<std::uint32_t>(p + 32);
  e.messageBytes = loadLe<std::uint32_t>(p + 36);
  e.publicHash = loadLe<std::uint64_t>(p + 40);
  e.snapshotBytes = loadLe<std::uint32_t>(p + 48);
  e.proposedStep = std::bit_cast<float>(loadLe<std::uint32_t>(p + 56));
  return e;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  static const security::Key key = testKey();
  const int keyMode = data[0] & 3;
  const bool keyed = keyMode == 1 || keyMode == 2;
  const bool encrypt = keyMode == 2;
  const bool fixup = data[0] & 4;
  const bool flip = data[0] & 8;
  std::vector<std::uint8_t> msg(data + 1, data + size);
  const std::size_t tag = keyed ? security::kSealTagBytes : 0;

  bool sealedByUs = false;
  const bool fixedUp = fixup && msg.size() >= kEnvelopeBytes + tag;
  if (fixedUp) {
    engine::Envelope e = rawFields(msg.data());
    const std::size_t payload = msg.size() - kEnvelopeBytes - tag;
    e.snapshotBytes = static_cast<std::uint32_t>(std::min<std::size_t>(e.snapshotBytes, payload));
    e.messageBytes = static_cast<std::uint32_t>(payload - e.snapshotBytes);
    e.flags = keyed ? (e.flags | engine::kFlagSealed) : (e.flags & ~engine::kFlagSealed);
    e.payloadCrc = engine::payloadChecksum(
        std::span<const std::uint8_t>(msg).subspan(kEnvelopeBytes, payload));
    engine::writeEnvelope(e, msg);
    if (keyed) {
      security::seal(key, encrypt, e.sender, e.sequence, kEnvelopeBytes, msg);
      sealedByUs = true;
      if (flip) msg[(data[0] >> 4) % msg.size()] ^= 0x01;
    }
  }

  std::span<const std::uint8_t> bytes = msg;
  std::vector<std::uint8_t> opened;
  if (keyed) {
    if (bytes.size() < kEnvelopeBytes + security::kSealTagBytes) return 0;  // drop("auth")
    const auto sender = loadLe<std::uint32_t>(bytes.data() + 8);
    const auto sequence = loadLe<std::uint64_t>(bytes.data() + 16);
    bool ok;
    if (encrypt) {
      opened.assign(bytes.begin(), bytes.end());
      ok = security::open(key, true, sender, sequence, kEnvelopeBytes, opened);
      if (ok) bytes = opened;
    } else {
      ok = security::verify(key, sender, sequence, bytes);
      // verify and a MAC-only open agree, and the MAC-only open leaves the message as it was.
      std::vector<std::uint8_t> copy(bytes.begin(), bytes.end());
      if (security::open(key, false, sender, sequence, kEnvelopeBytes, copy) != ok) std::abort();
      if (ok && std::memcmp(copy.data(), bytes.data(), copy.size()) != 0) std::abort();
    }
    if (sealedByUs && ok == flip) std::abort();  // ours opens; a flipped byte never does
    if (ok && !sealedByUs) std::abort();  // only the key holder (the harness) makes one that opens
    if (!ok) return 0;                    // drop("auth")
    bytes = bytes.first(bytes.size() - security::kSealTagBytes);
  }

  auto env = engine::readEnvelope(bytes);
  if (!env.isOk()) {
    const Status st = env.status();  // by value: the reason is a view into it
    const auto reason = engine::envelopeErrorReason(st);
    if (reason != "truncated" && reason != "bad_magic" && reason != "version" && reason != "crc" &&
        reason != "bad_step") {
      std::abort();
    }
    return 0;
  }
  if (!engine::envelopeErrorReason(env.status()).empty()) std::abort();
  // Accepted: the header is exactly what writeEnvelope makes of its fields, the sizes add up.
  std::uint8_t header[kEnvelopeBytes];
  engine::writeEnvelope(*env, header);
  if (std::memcmp(header, bytes.data(), kEnvelopeBytes) != 0) std::abort();
  if (kEnvelopeBytes + std::uint64_t{env->messageBytes} + env->snapshotBytes != bytes.size())
    std::abort();
  if (!(env->proposedStep >= 0.0f && env->proposedStep <= 1.0f)) std::abort();
  // PeerCore's next check: the sealed flag must match the edge's key (else refuse("auth")). Every
  // message that authenticated under a key was sealed by the harness (checked above), which set
  // the flag, and so was every fixed-up message, keyed or not: none of them may be refused here.
  // Only a keyless edge's unfixed message can carry the flag, and PeerCore refuses it.
  const bool authRefused = ((env->flags & engine::kFlagSealed) != 0) != keyed;
  if (authRefused && (keyed || fixedUp)) std::abort();
  return 0;
}
