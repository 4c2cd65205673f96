// libFuzzer target: the goodbye protocol of the tagged backends (runtime/transport/tagged/
// goodbye.h): decodeControl on whatever arrives on a connection's control tag, and GoodbyeFilter,
// which decides whether a goodbye ends the connection (only one of the newest id announced).
//
// Input: a sequence of control messages, each u8 length (mod 33: around the 16 bytes of a real
// one) then that many bytes (the last one takes what is left), all from one peer in order.
// Properties beyond "no crash, no sanitizer report": a decoded message re-encodes to its 16 bytes;
// the filter's every answer is the one goodbye.h's contract gives, computed by a model beside it:
// an announcement never ends the connection and raises the newest id; a goodbye ends it exactly
// when some announcement came and its id is at least the newest; anything undecodable is ignored.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <span>

#include "runtime/transport/tagged/goodbye.h"

using namespace grapevine;
namespace tagged = grapevine::transport::tagged;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tagged::GoodbyeFilter filter;
  std::optional<std::uint64_t> newest;  // the model
  std::size_t pos = 0;
  while (pos < size) {
    const std::size_t n = std::min<std::size_t>(data[pos] % 33, size - pos - 1);
    const std::span<const std::uint8_t> message(data + pos + 1, n);
    pos += 1 + n;

    const auto m = tagged::decodeControl(message);
    if (m) {
      std::uint8_t again[tagged::kControlBytes];
      tagged::encodeControl(*m, again);
      if (message.size() != tagged::kControlBytes ||
          std::memcmp(again, message.data(), tagged::kControlBytes) != 0) {
        std::abort();
      }
    }
    bool expected = false;
    if (m && m->kind == tagged::ControlKind::kAnnounce) {
      newest = newest ? std::max(*newest, m->id) : m->id;
    } else if (m) {
      expected = newest && m->id >= *newest;
    }
    if (filter.take(/*peer=*/1, message) != expected) std::abort();
  }
  return 0;
}
