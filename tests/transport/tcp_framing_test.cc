// The TCP backend's stream format on its own (runtime/transport/tcp/framing.h): no sockets. The
// live path (hellos exchanged, frames sent and refused over real sockets) is the conformance
// suite's, transport_conformance_tcp.
#include <catch2/catch.hpp>
#include <cstring>
#include <string>

#include "runtime/common/byte_order.h"
#include "runtime/transport/tcp/framing.h"

using namespace grapevine;
using namespace grapevine::transport::tcp;

TEST_CASE("tcp framing: the hello is magic | version | reserved | rank | reserved | token") {
  std::uint8_t h[kHelloBytes];
  std::memset(h, 0xEE, sizeof h);
  encodeHello(h, 7);
  CHECK(loadLe32(h) == 0x44545647u);
  CHECK(loadLe16(h + 4) == kWireVersion);
  CHECK(loadLe16(h + 6) == 0);
  CHECK(loadLe32(h + 8) == 7u);
  CHECK(loadLe32(h + 12) == 0);
  auto rank = decodeHello(h);
  REQUIRE(rank.isOk());
  CHECK(*rank == 7);
  // Without a token (an unkeyed run) the binding is zeros; with one, its 32 bytes follow.
  for (std::uint8_t b : helloToken(h)) CHECK(b == 0);
  std::uint8_t token[kBindingBytes];
  for (std::size_t i = 0; i < kBindingBytes; ++i) token[i] = static_cast<std::uint8_t>(i + 1);
  encodeHello(h, 7, token);
  CHECK(std::memcmp(helloToken(h).data(), token, kBindingBytes) == 0);
  CHECK(kHelloBytes == 48);
}

TEST_CASE("tcp framing: a bad magic or another wire version is refused, naming which") {
  std::uint8_t h[kHelloBytes];
  encodeHello(h, 1);
  h[0] ^= 1;
  auto bad = decodeHello(h);
  REQUIRE_FALSE(bad.isOk());
  CHECK(bad.status().code() == ErrorCode::kDataLoss);
  CHECK(bad.status().message().find("bad magic") != std::string::npos);
  encodeHello(h, 1);
  storeLe16(h + 4, 9);
  auto version = decodeHello(h);
  REQUIRE_FALSE(version.isOk());
  CHECK(version.status().code() == ErrorCode::kFailedPrecondition);
  CHECK(version.status().message() == "tcp wire version 9, expected 2");
}

TEST_CASE("tcp framing: a frame header is tag | length; a length over the limit is refused") {
  std::uint8_t h[kHeaderBytes];
  encodeFrameHeader(h, 0x0102030405060708ull, 4096);
  CHECK(loadLe64(h) == 0x0102030405060708ull);
  CHECK(loadLe64(h + 8) == 4096u);
  auto at = decodeFrameHeader(h, 4096, 3);  // exactly the limit: accepted
  REQUIRE(at.isOk());
  CHECK(at->tag == 0x0102030405060708ull);
  CHECK(at->size == 4096u);
  auto over = decodeFrameHeader(h, 4095, 3);
  REQUIRE_FALSE(over.isOk());
  CHECK(over.status().code() == ErrorCode::kResourceExhausted);
  CHECK(over.status().message() == "peer 3 sent a frame of 4096 bytes, above maxMessageBytes 4095");
  storeLe64(h + 8, ~std::uint64_t{0});  // a length no buffer could hold
  CHECK_FALSE(decodeFrameHeader(h, std::size_t{1} << 30, 3).isOk());
}
