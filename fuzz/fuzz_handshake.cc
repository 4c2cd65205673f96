// libFuzzer target: the bootstrap's control protocol decoder (runtime/transport/handshake.h) on
// arbitrary bytes, as a control link runs it on a stranger's hello: the frame header, the hello
// prefix and the whole hello, the comparison with our own hello, and with a key (a fixed test key:
// the fuzzer cannot guess a real one, and the keyed path must be reached) the transcript, the
// proof check, the session key and the sealed private fields (address, build id, round). Also the
// reject and user-message decoders.
//
// Input: u8 mode | hello payload. Mode bit 0: we hold the key (our hello carries a nonce); bit 1:
// we are the acceptor (the higher rank) rather than the dialer. With a key, the input's last
// kProofBytes are offered as the peer's proof.
// Properties beyond "no crash, no sanitizer report": a decoded hello re-encodes and decodes to the
// same fields; its prefix agrees with decodeHelloPrefix; compareHellos with itself is ok when it is
// addressed to itself; a proof verifies exactly when it equals the expected one, and the expected
// proof of one side never verifies as the other side's.
#include <cstdlib>
#include <cstring>
#include <span>
#include <vector>

#include "runtime/security/auth.h"
#include "runtime/transport/handshake.h"

using namespace grapevine;
namespace hs = grapevine::transport::handshake;

namespace {

bool sameHello(const hs::Hello& a, const hs::Hello& b) {
  if (a.version != b.version || a.sender != b.sender || a.receiver != b.receiver ||
      a.incarnation != b.incarnation || a.backend != b.backend || a.address != b.address ||
      a.nonce != b.nonce || a.parts.size() != b.parts.size()) {
    return false;
  }
  for (std::size_t i = 0; i < a.parts.size(); ++i) {
    if (a.parts[i].name != b.parts[i].name || a.parts[i].hash != b.parts[i].hash) return false;
  }
  return true;
}

security::Key testKey() {
  security::Key k{};
  for (std::size_t i = 0; i < k.size(); ++i) k[i] = static_cast<std::uint8_t>(0xA5 ^ i);
  return k;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const bool keyed = data[0] & 1;
  const bool acceptor = data[0] & 2;
  const std::span<const std::uint8_t> body(data + 1, size - 1);

  // What the stream reader does first: the frame header (total), and the other frame types.
  if (body.size() >= hs::kFrameHeaderBytes) (void)hs::decodeFrameHeader(body.data());
  (void)hs::decodeReject(body);
  if (auto m = hs::decodeUserMessage(body); m.isOk()) {
    if (m->bytes.size() + 2 != body.size()) std::abort();
  }

  auto prefix = hs::decodeHelloPrefix(body);
  auto theirs = hs::decodeHello(body);
  if (!theirs.isOk()) {
    if (theirs.status().message().empty()) std::abort();
    return 0;
  }
  if (!prefix.isOk() || prefix->sender != theirs->sender || prefix->receiver != theirs->receiver ||
      prefix->incarnation != theirs->incarnation || prefix->version != theirs->version) {
    std::abort();
  }
  // Everything a decoder accepts fits the encoder's limits and round-trips.
  auto bytes = hs::encodeHello(*theirs);
  if (!bytes.isOk()) std::abort();
  auto again = hs::decodeHello(*bytes);
  if (!again.isOk() || !sameHello(*theirs, *again)) std::abort();

  // Our own hello, shaped like the one in the corpus.
  hs::Hello ours;
  ours.sender = theirs->receiver;  // whom they meant to reach
  ours.receiver = theirs->sender;
  ours.incarnation = 7;
  ours.backend = "tcp";
  const char addr[] = "127.0.0.1:7000";
  ours.address.assign(addr, addr + sizeof addr - 1);
  ours.parts = {{"algorithm", 1}, {"model", 2}, {"transport", 3}};
  if (keyed) ours.nonce = security::Nonce{};
  auto oursBytes = hs::encodeHello(ours);
  if (!oursBytes.isOk()) std::abort();
  const Status cmp = hs::compareHellos(ours, *theirs);
  (void)hs::compareHellos(*theirs, ours);
  if (theirs->receiver == theirs->sender && !hs::compareHellos(*theirs, *theirs).isOk())
    std::abort();
  if (!cmp.isOk() && cmp.message().empty()) std::abort();

  if (!keyed || !theirs->nonce) return 0;
  static const security::Key psk = testKey();
  // The dialer's hello goes first in the transcript (control_link.cc and bootstrap.cc).
  const security::Transcript t = acceptor ? hs::transcriptOf(*theirs, body, ours, *oursBytes)
                                          : hs::transcriptOf(ours, *oursBytes, *theirs, body);
  const std::uint32_t prover = acceptor ? t.dialer : t.acceptor;  // the peer proves
  std::span<const std::uint8_t> offered =
      body.size() >= security::kProofBytes ? body.last(security::kProofBytes) : body;
  const security::Proof expected = security::handshakeProof(psk, t, prover);
  const bool equal = offered.size() == expected.size() &&
                     std::memcmp(offered.data(), expected.data(), expected.size()) == 0;
  if (security::verifyHandshakeProof(psk, t, prover, offered) != equal) std::abort();
  if (!security::verifyHandshakeProof(psk, t, prover, expected)) std::abort();
  if (t.dialer != t.acceptor && security::verifyHandshakeProof(
                                    psk, t, prover == t.dialer ? t.acceptor : t.dialer, expected)) {
    std::abort();  // a proof reflected back to its sender
  }
  if (security::sessionKey(psk, t) != security::sessionKey(psk, t)) std::abort();

  // The sealed private fields, as a key holder opens them after the proofs: an error with a
  // message, or fields that survive sealing again (a fresh box) and opening.
  hs::Hello opened = *theirs;
  const Status st = hs::openSealedFields(opened, body, psk);
  if (!st.isOk()) {
    if (st.message().empty()) std::abort();
    return 0;
  }
  auto resealed = hs::encodeHello(opened, psk);
  if (!resealed.isOk()) std::abort();
  auto back = hs::decodeHello(*resealed);
  if (!back.isOk() || !hs::openSealedFields(*back, *resealed, psk).isOk() ||
      !sameHello(opened, *back) ||
      back->buildId != opened.buildId.substr(0, hs::kMaxBuildIdBytes) ||
      back->runningRound != opened.runningRound) {
    std::abort();
  }
  return 0;
}
