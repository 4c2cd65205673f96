// The decisions on one control link's handshake frames, with no I/O (ControlLink feeds it each
// frame before the handshake is done and carries out the verdict): a reject from the other end,
// frames out of order, their hello (its sender, and with a key: the dialer waits for the
// acceptor's proof before it compares or echoes anything; the acceptor's bootstrap checked the
// dialer's proof already), the proof over the transcript of both hellos, the sealed fields, and
// the comparison of the two hellos (a reject names what differs without our values).
// Thread contract: the link's (the Loop thread).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "runtime/common/status.h"
#include "runtime/security/auth.h"
#include "runtime/security/key.h"
#include "runtime/transport/handshake.h"

namespace grapevine::transport {

class HandshakeCheck {
 public:
  struct Verdict {
    enum class Kind {
      kWait,    // nothing to do yet (their hello is held until their proof comes)
      kAgreed,  // their hello agrees: `theirs`; with `proof`, send it before anything else
      kFailed,  // `status`; with `tellPeer`, a reject carrying `tell` (or the status's message)
    };
    Kind kind = Kind::kWait;
    Status status;
    bool tellPeer = false;
    std::string tell;
    bool authFailed = false;  // kFailed: the other end did not prove the key
    handshake::Hello theirs;
    std::optional<security::Proof> proof;
    std::optional<security::Key> sessionKey;  // kAgreed by proof: the edge's session key
  };

  // psk: BootstrapOptions::psk (none: no authentication).
  HandshakeCheck(int peer, const std::optional<security::Key>& psk) : peer_(peer), psk_(psk) {}

  // One handshake frame. ours/oursEncoded: our hello as sent; authenticated: the link has its
  // session key already (the acceptor's bootstrap checked the dialer's proof); endpoint: the
  // other end's address, for the messages.
  Verdict onFrame(std::uint16_t type, std::span<const std::uint8_t> body,
                  const handshake::Hello& ours, std::span<const std::uint8_t> oursEncoded,
                  bool authenticated, const std::string& endpoint);

 private:
  Verdict onProof(std::span<const std::uint8_t> proof, const handshake::Hello& ours,
                  std::span<const std::uint8_t> oursEncoded, const std::string& endpoint);
  // Their hello agreed with ours unless the comparison finds a difference.
  static Verdict compared(const handshake::Hello& ours, handshake::Hello theirs);
  static Verdict failed(Status status, bool tellPeer, bool authFailed = false);

  int peer_;
  std::optional<security::Key> psk_;
  // Authentication (dialer side, with a key): their hello, as received, until their proof checks.
  std::optional<handshake::Hello> unverified_;
  std::vector<std::uint8_t> unverifiedBytes_;
};

}  // namespace grapevine::transport
