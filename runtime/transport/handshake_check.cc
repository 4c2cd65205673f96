#include "runtime/transport/handshake_check.h"

#include <utility>

namespace grapevine::transport {

using namespace handshake;
using Verdict = HandshakeCheck::Verdict;

Verdict HandshakeCheck::failed(Status status, bool tellPeer, bool authFailed) {
  Verdict v;
  v.kind = Verdict::Kind::kFailed;
  v.status = std::move(status);
  v.tellPeer = tellPeer;
  v.authFailed = authFailed;
  return v;
}

Verdict HandshakeCheck::compared(const Hello& ours, Hello theirs) {
  // The reject names what differs without our values (hashes, build id).
  if (Status st = compareHellos(ours, theirs); !st.isOk()) {
    Verdict v = failed(std::move(st), /*tellPeer=*/true);
    v.tell = compareHellos(ours, theirs, /*showValues=*/false).message();
    return v;
  }
  Verdict v;
  v.kind = Verdict::Kind::kAgreed;
  v.theirs = std::move(theirs);
  return v;
}

Verdict HandshakeCheck::onFrame(std::uint16_t type, std::span<const std::uint8_t> body,
                                const Hello& ours, std::span<const std::uint8_t> oursEncoded,
                                bool authenticated, const std::string& endpoint) {
  if (type == kReject) {
    return failed(failedPrecondition("peer " + std::to_string(peer_) +
                                     " rejected the handshake: " + decodeReject(body)),
                  /*tellPeer=*/false);
  }
  // The dialer with a key: their hello first, then their proof (the acceptor's side is
  // authenticated by the bootstrap before the link is adopted).
  const bool authenticating = psk_.has_value() && !authenticated;
  if (authenticating && unverified_) {
    if (type == kAuth) return onProof(body, ours, oursEncoded, endpoint);
    return failed(dataLoss("peer " + std::to_string(peer_) + " sent frame type " +
                           std::to_string(type) + " instead of its key proof"),
                  /*tellPeer=*/false);
  }
  if (type != kHello) {
    return failed(dataLoss("peer " + std::to_string(peer_) + " sent frame type " +
                           std::to_string(type) + " before its hello"),
                  /*tellPeer=*/false);
  }
  auto theirs = decodeHello(body);
  Status st = theirs.isOk() ? Status::ok() : theirs.status();
  if (st.isOk() && theirs->sender != peer_) {
    st = failedPrecondition("expected peer " + std::to_string(peer_) + ", but peer " +
                            std::to_string(theirs->sender) + " answered");
  }
  if (st.isOk() && authenticating) {
    if (!theirs->nonce) {
      // Nothing is compared or echoed before the other end proved the key.
      return failed(failedPrecondition("authentication failed with neighbour " +
                                       std::to_string(peer_) + " at " + endpoint +
                                       ": it sent no key proof (security.key_file is set "
                                       "here; is it set there?)"),
                    /*tellPeer=*/false, /*authFailed=*/true);
    }
    unverified_ = std::move(theirs).value();
    unverifiedBytes_.assign(body.begin(), body.end());
    return {};  // wait for their proof
  }
  // The acceptor with a key: the bootstrap checked the dialer's proof before adopting the link.
  if (st.isOk() && psk_) st = openSealedFields(*theirs, body, *psk_);
  if (!st.isOk()) return failed(std::move(st), /*tellPeer=*/true);
  return compared(ours, std::move(theirs).value());
}

// The dialer checks the acceptor's proof over the transcript of both hellos; only a proven peer
// gets its hello compared (a reject may name config parts), our proof, and the session key.
Verdict HandshakeCheck::onProof(std::span<const std::uint8_t> proof, const Hello& ours,
                                std::span<const std::uint8_t> oursEncoded,
                                const std::string& endpoint) {
  const security::Key& psk = *psk_;
  const security::Transcript t = transcriptOf(ours, oursEncoded, *unverified_, unverifiedBytes_);
  if (!security::verifyHandshakeProof(psk, t, t.acceptor, proof)) {
    return failed(failedPrecondition("authentication failed with neighbour " +
                                     std::to_string(peer_) + " at " + endpoint +
                                     ": it did not prove knowledge of the key in "
                                     "security.key_file (a different key on one side, or not a "
                                     "peer of this run)"),
                  /*tellPeer=*/false, /*authFailed=*/true);
  }
  if (Status st = openSealedFields(*unverified_, unverifiedBytes_, psk); !st.isOk()) {
    return failed(std::move(st), /*tellPeer=*/true);
  }
  Hello theirs = std::move(*unverified_);
  unverified_.reset();
  Verdict v = compared(ours, std::move(theirs));
  if (v.kind == Verdict::Kind::kAgreed) {
    v.proof = security::handshakeProof(psk, t, t.dialer);
    v.sessionKey = security::sessionKey(psk, t);
  }
  return v;
}

}  // namespace grapevine::transport
