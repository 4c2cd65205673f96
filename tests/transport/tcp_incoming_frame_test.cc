// Where the tcp backend puts the body of a frame it reads (runtime/transport/tcp/incoming_frame.h),
// on a real ConnectionCore and Loop, without sockets: into the posted receive, dropped when that
// receive is too small, or buffered as unexpected within the budget. The conformance suite runs the
// same paths over real sockets (transport_conformance_tcp).
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "runtime/transport/buffer_pool.h"
#include "runtime/transport/connection_core.h"
#include "runtime/transport/loop.h"
#include "runtime/transport/tcp/incoming_frame.h"

using namespace grapevine;
using namespace grapevine::transport;
using namespace std::chrono_literals;

namespace {

struct Completion {
  std::optional<Status> status;
  std::size_t bytes = 0;
};

RecvCallback recording(Completion& c) {
  return [&c](Status s, std::size_t n) {
    c.status = std::move(s);
    c.bytes = n;
  };
}

std::vector<std::uint8_t> pattern(std::size_t n) {
  std::vector<std::uint8_t> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::uint8_t>(i * 7 + 1);
  return v;
}

struct Fixture {
  Loop loop;
  BufferPool pool;
  ConnectionCore core;
  tcp::IncomingFrame frame{core};
  explicit Fixture(std::size_t maxUnexpected = 1 << 20) : core(loop, 1, pool, maxUnexpected) {}
};

}  // namespace

TEST_CASE("tcp incoming frame: a body that fits the posted receive lands in it, piece by piece") {
  Fixture f;
  std::vector<std::uint8_t> buffer(16, 0);
  Completion done;
  f.core.postRecv(5, buffer, recording(done));
  const auto body = pattern(10);
  REQUIRE(f.frame.start(5, body.size()));
  CHECK(f.frame.inBody());
  CHECK_FALSE(f.frame.discarding());
  CHECK(f.frame.dest() == buffer.data());
  // Part from the staging buffer, the rest written straight into dest() by the reader.
  CHECK(f.frame.take(body.data(), 4) == 4);
  CHECK(f.frame.remaining() == 6);
  CHECK_FALSE(f.frame.complete());
  REQUIRE(f.frame.dest() == buffer.data() + 4);
  std::memcpy(f.frame.dest(), body.data() + 4, 6);
  f.frame.advance(6);
  REQUIRE(f.frame.complete());
  f.frame.finish();
  CHECK_FALSE(f.frame.inBody());
  REQUIRE(f.loop.runUntil([&] { return done.status.has_value(); }, 2s));
  CHECK(done.status->isOk());
  CHECK(done.bytes == 10);
  CHECK(std::memcmp(buffer.data(), body.data(), body.size()) == 0);
  CHECK(buffer[10] == 0);  // nothing past the body
}

TEST_CASE("tcp incoming frame: a body larger than the posted receive is dropped and fails it") {
  Fixture f;
  std::vector<std::uint8_t> buffer(4, 0xAB);
  Completion done;
  f.core.postRecv(5, buffer, recording(done));
  const auto body = pattern(10);
  REQUIRE(f.frame.start(5, body.size()));
  CHECK(f.frame.discarding());
  CHECK(f.frame.dest() == nullptr);
  // take() never takes more than the body: the next frame's bytes stay with the reader.
  std::vector<std::uint8_t> stream = body;
  stream.resize(14, 0xFF);
  CHECK(f.frame.take(stream.data(), stream.size()) == 10);
  REQUIRE(f.frame.complete());
  f.frame.finish();
  REQUIRE(f.loop.runUntil([&] { return done.status.has_value(); }, 2s));
  CHECK(done.status->code() == ErrorCode::kResourceExhausted);
  CHECK(done.status->message() == "message of 10 bytes does not fit the posted receive of 4 bytes");
  CHECK(done.bytes == 0);
  for (std::uint8_t b : buffer) CHECK(b == 0xAB);  // nothing written
}

TEST_CASE("tcp incoming frame: with no receive posted the body is kept for the next one") {
  Fixture f;
  const auto body = pattern(8);
  const bool postedMeanwhile = GENERATE(false, true);
  INFO((postedMeanwhile ? "a receive posted while the body arrives" : "posted after"));
  REQUIRE(f.frame.start(7, body.size()));
  CHECK_FALSE(f.frame.discarding());
  REQUIRE(f.frame.dest() != nullptr);
  CHECK(f.frame.take(body.data(), 3) == 3);
  std::vector<std::uint8_t> buffer(8, 0);
  Completion done;
  if (postedMeanwhile) f.core.postRecv(7, buffer, recording(done));
  CHECK(f.frame.take(body.data() + 3, 5) == 5);
  REQUIRE(f.frame.complete());
  f.frame.finish();
  // Handed to the receive posted meanwhile, or stashed (counted against the budget) for it.
  CHECK(f.core.unexpectedBytes() == (postedMeanwhile ? 0 : 8));
  if (!postedMeanwhile) f.core.postRecv(7, buffer, recording(done));
  REQUIRE(f.loop.runUntil([&] { return done.status.has_value(); }, 2s));
  CHECK(done.status->isOk());
  CHECK(done.bytes == 8);
  CHECK(buffer == body);
  CHECK(f.core.unexpectedBytes() == 0);
}

TEST_CASE("tcp incoming frame: over the unexpected budget it waits and changes nothing") {
  Fixture f(100);
  // The first unexpected message is always accepted, however large.
  const auto big = pattern(80);
  REQUIRE(f.frame.start(1, big.size()));
  f.frame.take(big.data(), big.size());
  f.frame.finish();
  CHECK(f.core.unexpectedBytes() == 80);
  // 80 + 40 > 100: the reader pauses until a receive is posted.
  CHECK_FALSE(f.frame.start(2, 40));
  CHECK_FALSE(f.frame.inBody());
  // A posted receive for that tag takes it straight in, whatever the budget.
  std::vector<std::uint8_t> buffer(40);
  Completion done;
  f.core.postRecv(2, buffer, recording(done));
  REQUIRE(f.frame.start(2, 40));
  CHECK(f.frame.dest() == buffer.data());
}

TEST_CASE(
    "tcp incoming frame: a connection failing mid-body completes the receive it was filling") {
  Fixture f;
  std::vector<std::uint8_t> buffer(16);
  Completion done;
  f.core.postRecv(3, buffer, recording(done));
  REQUIRE(f.frame.start(3, 12));
  f.frame.take(pattern(5).data(), 5);
  f.frame.fail(unavailable("peer 1 closed the connection"));
  f.frame.fail(unavailable("again"));  // exactly once
  REQUIRE(f.loop.runUntil([&] { return done.status.has_value(); }, 2s));
  CHECK(done.status->code() == ErrorCode::kUnavailable);
  CHECK(done.status->message() == "peer 1 closed the connection");
  CHECK(done.bytes == 0);
}
