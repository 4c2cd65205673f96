// libFuzzer target: a connected control link's reassembly of a neighbour's byte stream into frames
// (runtime/transport/control_link.cc, ControlLink::readFrame and onFrame after the handshake), with
// handshake.h's functions in the order the link runs them: the 6-byte frame header, the length
// refused above maxControlFrameBytes before anything is allocated, the body; with a key (after a
// keyed handshake) the seal checked under the control key with the count of frames opened so far
// (a frame that does not open is dropped and the count stays); then by type the user message
// (whose checkpoint-rounds kind the engine merges: fuzz_checkpoint_knowledge) or the reject.
// ControlLink itself needs a socket and a loop, so the harness walks the stream the way its two
// completions do; the functions under test are the link's own.
//
// Input: u8 mode | stream. Mode bits 0-2: maxControlFrameBytes (small limits reach the refusal;
// 65536 is BootstrapOptions' default); bit 3: the link holds a key (a fixed test key as the
// control key); bit 4 with bit 3: "fix up": reseal every frame with the right count before it is
// opened (encodeSealedFrame over its payload, the last 16 bytes being the tag it replaces), so that
// mutations reach the user message and reject decoders (the fuzzer cannot forge Poly1305).
// Properties beyond "no crash, no sanitizer report": every frame read re-encodes (encodeFrame) to
// the bytes it came from; a frame opens exactly when it is, byte for byte, what encodeSealedFrame
// makes of its type and payload with the key and this count (resealed frames always are), never
// with the next count (a replay), and opens to its bytes without the tag; a user message
// re-encodes to its payload.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <vector>

#include "runtime/common/byte_order.h"
#include "runtime/security/auth.h"
#include "runtime/transport/handshake.h"

using namespace grapevine;
namespace hs = grapevine::transport::handshake;

namespace {

security::Key testKey() {
  security::Key k{};
  for (std::size_t i = 0; i < k.size(); ++i) k[i] = static_cast<std::uint8_t>(0x5A ^ (i * 11));
  return k;
}

constexpr std::uint32_t kPeer = 3;  // the neighbour at the other end (the seal's sender)

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  static const std::size_t kLimits[] = {0, 2, 16, 17, 18, 255, 4096, 64 * 1024};
  static const security::Key key = testKey();
  const std::size_t limit = kLimits[data[0] & 7];
  const bool keyed = data[0] & 8;
  const bool fixup = keyed && (data[0] & 16);
  std::vector<std::uint8_t> stream(data + 1, data + size);

  std::uint64_t sealedIn = 0;  // ControlLink::sealedIn_
  std::size_t pos = 0;
  while (stream.size() - pos >= hs::kFrameHeaderBytes) {
    // readFrame: the header, the limit, then the body.
    std::uint8_t* header = stream.data() + pos;
    const hs::FrameHeader h = hs::decodeFrameHeader(header);
    if (h.payloadBytes > limit) return 0;  // protocolError: the link closes
    if (h.payloadBytes > stream.size() - pos - hs::kFrameHeaderBytes) return 0;  // waits for more
    const std::span<std::uint8_t> body(header + hs::kFrameHeaderBytes, h.payloadBytes);
    {
      const auto again = hs::encodeFrame(h.type, body);
      if (again.size() != hs::kFrameHeaderBytes + body.size() ||
          std::memcmp(again.data(), header, again.size()) != 0) {
        std::abort();
      }
    }
    pos += hs::kFrameHeaderBytes + h.payloadBytes;

    // onFrame.
    std::span<const std::uint8_t> payload = body;
    if (keyed) {
      // What the neighbour would have sent: the frame sealed with this count (the seal is
      // deterministic). It opens exactly when it is that frame.
      bool genuine = false;
      if (body.size() >= security::kSealTagBytes) {
        const std::vector<std::uint8_t> plain(body.begin(), body.end() - security::kSealTagBytes);
        const auto sealed = hs::encodeSealedFrame(key, kPeer, sealedIn, h.type, plain);
        // Same type and length: only the tag differs.
        if (sealed.size() != hs::kFrameHeaderBytes + body.size() ||
            std::memcmp(sealed.data(), header, hs::kFrameHeaderBytes) != 0 ||
            (!plain.empty() &&  // an empty vector's data() may be null: UB for memcmp
             std::memcmp(sealed.data() + hs::kFrameHeaderBytes, plain.data(), plain.size()) != 0)) {
          std::abort();
        }
        if (fixup) std::memcpy(header, sealed.data(), sealed.size());
        genuine = std::memcmp(sealed.data(), header, sealed.size()) == 0;
      }
      const auto opened = hs::openSealedFrame(key, kPeer, sealedIn, header, body);
      if (opened.has_value() != genuine) std::abort();
      if (!opened) continue;  // dropped; the count stays
      if (opened->data() != body.data() ||
          opened->size() + security::kSealTagBytes != body.size()) {
        std::abort();
      }
      if (hs::openSealedFrame(key, kPeer, sealedIn + 1, header, body)) std::abort();  // replay
      ++sealedIn;
      payload = *opened;
    }
    switch (h.type) {
      case hs::kUser: {
        auto m = hs::decodeUserMessage(payload);
        if (!m.isOk()) {
          if (payload.size() >= 2 || m.status().message().empty()) std::abort();
          break;
        }
        const auto again = hs::encodeUserMessage(m->type, m->bytes);
        if (again.size() != payload.size() ||
            std::memcmp(again.data(), payload.data(), payload.size()) != 0) {
          std::abort();
        }
        break;
      }
      case hs::kReject:
        (void)hs::decodeReject(payload);  // the link closes, naming the text
        return 0;
      default:
        break;  // heartbeats; unknown types are ignored
    }
  }
  return 0;
}
