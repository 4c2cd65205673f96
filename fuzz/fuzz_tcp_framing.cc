// libFuzzer target: the TCP backend's stream format (runtime/transport/tcp/framing.h) on an
// arbitrary byte stream, parsed the way TcpConnection reads a socket: the 16-byte hello, then
// frame headers, each body skipped by its length, a header over maxMessageBytes refused.
//
// Input: u8 limit selector | stream. The selector picks maxMessageBytes (small limits make the
// fuzzer meet the refusal; the largest is the transport's default).
// Properties beyond "no crash, no sanitizer report": a hello or header that decodes re-encodes to
// the same bytes; a refused header's error names both sizes; an accepted body never exceeds the
// limit.
#include <cstdlib>
#include <cstring>
#include <string>

#include "runtime/transport/tcp/framing.h"

using namespace grapevine;
namespace tcp = grapevine::transport::tcp;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  static const std::size_t kLimits[] = {
      0, 1, 16, 255, 4096, std::size_t{1} << 20, transport::Options{}.maxMessageBytes, SIZE_MAX};
  const std::size_t limit = kLimits[data[0] % 8];
  const std::uint8_t* p = data + 1;
  std::size_t left = size - 1;
  if (left < tcp::kHelloBytes) return 0;  // the reader waits for the whole hello

  auto rank = tcp::decodeHello(p);
  if (!rank.isOk()) {
    if (rank.status().message().empty()) std::abort();
    return 0;  // the connection fails
  }
  std::uint8_t hello[tcp::kHelloBytes];
  tcp::encodeHello(hello, *rank);
  auto again = tcp::decodeHello(hello);
  if (!again.isOk() || *again != *rank) std::abort();
  // Only magic, version and rank are read; the reserved bytes are whatever the sender wrote.
  if (std::memcmp(hello, p, 6) != 0 || std::memcmp(hello + 8, p + 8, 4) != 0) std::abort();
  p += tcp::kHelloBytes;
  left -= tcp::kHelloBytes;

  while (left >= tcp::kHeaderBytes) {
    auto h = tcp::decodeFrameHeader(p, limit, *rank);
    if (!h.isOk()) {
      const std::string m = h.status().message();
      if (m.find(std::to_string(limit)) == std::string::npos) std::abort();
      return 0;  // the connection fails before allocating anything
    }
    if (h->size > limit) std::abort();
    std::uint8_t header[tcp::kHeaderBytes];
    tcp::encodeFrameHeader(header, h->tag, h->size);
    if (std::memcmp(header, p, tcp::kHeaderBytes) != 0) std::abort();
    p += tcp::kHeaderBytes;
    left -= tcp::kHeaderBytes;
    if (h->size > left) return 0;  // mid-frame: the reader waits for more bytes
    p += h->size;
    left -= h->size;
  }
  return 0;
}
