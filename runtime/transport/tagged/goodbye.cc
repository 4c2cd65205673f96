#include "runtime/transport/tagged/goodbye.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>

#include "runtime/common/log.h"

namespace grapevine::transport::tagged {
namespace {

constexpr std::uint8_t kAnnounceKind[8] = {'c', 'o', 'n', 'n', 'e', 'c', 't', 0};
constexpr std::uint8_t kGoodbyeKind[8] = {'g', 'o', 'o', 'd', 'b', 'y', 'e', 0};

}  // namespace

void encodeControl(const ControlMessage& m, std::span<std::uint8_t, kControlBytes> out) {
  std::memcpy(out.data(), m.kind == ControlKind::kAnnounce ? kAnnounceKind : kGoodbyeKind, 8);
  for (int i = 0; i < 8; ++i) out[8 + i] = static_cast<std::uint8_t>(m.id >> (8 * i));
}

std::optional<ControlMessage> decodeControl(std::span<const std::uint8_t> in) {
  if (in.size() != kControlBytes) return std::nullopt;
  ControlMessage m;
  if (std::memcmp(in.data(), kAnnounceKind, 8) == 0) {
    m.kind = ControlKind::kAnnounce;
  } else if (std::memcmp(in.data(), kGoodbyeKind, 8) == 0) {
    m.kind = ControlKind::kGoodbye;
  } else {
    return std::nullopt;
  }
  for (int i = 0; i < 8; ++i) m.id |= static_cast<std::uint64_t>(in[8 + i]) << (8 * i);
  return m;
}

bool GoodbyeFilter::take(int peer, std::span<const std::uint8_t> message) {
  const auto m = decodeControl(message);
  if (m && m->kind == ControlKind::kAnnounce) {
    if (!newest_ || m->id > *newest_) newest_ = m->id;
    return false;
  }
  if (m && newest_ && m->id >= *newest_) return true;
  log::debug("peer ", peer, ": ignored a ", m ? "stale goodbye" : "control message of unknown kind",
             " on its connection");
  return false;
}

std::uint64_t newConnectionId() {
  static std::atomic<std::uint64_t> last{0};
  const auto now =
      static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                     std::chrono::system_clock::now().time_since_epoch())
                                     .count());
  std::uint64_t prev = last.load();
  std::uint64_t next = 0;
  do {
    next = std::max(prev + 1, now);
  } while (!last.compare_exchange_weak(prev, next));
  return next;
}

}  // namespace grapevine::transport::tagged
