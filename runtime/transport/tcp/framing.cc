#include "runtime/transport/tcp/framing.h"

#include <cstring>
#include <string>

#include "runtime/common/byte_order.h"

namespace grapevine::transport::tcp {

void encodeHello(std::uint8_t* p, int rank, const std::uint8_t* token) {
  std::memset(p, 0, kHelloBytes);
  storeLe32(p, kHelloMagic);
  storeLe16(p + 4, kWireVersion);
  storeLe32(p + 8, static_cast<std::uint32_t>(rank));
  if (token) std::memcpy(p + 16, token, kBindingBytes);
}

Result<int> decodeHello(const std::uint8_t* p) {
  if (loadLe32(p) != kHelloMagic)
    return dataLoss("not a grapevine tcp data connection (bad magic)");
  if (const auto v = loadLe16(p + 4); v != kWireVersion) {
    return failedPrecondition("tcp wire version " + std::to_string(v) + ", expected " +
                              std::to_string(kWireVersion));
  }
  return static_cast<int>(loadLe32(p + 8));
}

void encodeFrameHeader(std::uint8_t* p, Tag tag, std::uint64_t size) {
  storeLe64(p, tag);
  storeLe64(p + 8, size);
}

Result<FrameHeader> decodeFrameHeader(const std::uint8_t* p, std::size_t maxMessageBytes,
                                      int peer) {
  FrameHeader h{loadLe64(p), loadLe64(p + 8)};
  if (h.size > maxMessageBytes) {
    return resourceExhausted("peer " + std::to_string(peer) + " sent a frame of " +
                             std::to_string(h.size) + " bytes, above maxMessageBytes " +
                             std::to_string(maxMessageBytes));
  }
  return h;
}

}  // namespace grapevine::transport::tcp
