// Two-process tests of the native backends (ucx, libfabric) through the transport contract, against
// the backend factories directly (no registry): a forked child is the second peer, addresses travel
// over a socketpair. The shared conformance suite runs the same backends through makeContext();
// this file keeps the backend-specific checks (tag isolation between peers, truncation, rank bits,
// SIGKILL).
//
// Environment (set by ctest, see tests/transport/CMakeLists.txt):
//   GRAPEVINE_TEST_BACKEND   ucx | libfabric
//   GRAPEVINE_TEST_UCX_TLS   passed as Options::ucxTls (e.g. "tcp", "posix,sysv,cma,self")
//   GRAPEVINE_TEST_OFI_PROV  passed as Options::libfabricProvider (default "tcp;ofi_rxm")
#include "tests/transport/native_backends.h"

#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "runtime/transport/loop.h"
#include "runtime/transport/transport.h"
#include "tests/test_util/pipes.h"
#include "tests/test_util/skip.h"

namespace gt = grapevine::transport;
using grapevine::ErrorCode;
using grapevine::Status;
using namespace std::chrono_literals;

namespace {

std::string envOr(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return (v != nullptr && *v != '\0') ? v : fallback;
}

gt::Options testOptions(int rank) {
  gt::Options o;
  o.backend = envOr("GRAPEVINE_TEST_BACKEND", "ucx");
  o.rank = rank;
  o.ucxTls = envOr("GRAPEVINE_TEST_UCX_TLS", "");
  o.libfabricProvider = envOr("GRAPEVINE_TEST_OFI_PROV", "tcp;ofi_rxm");
  return o;
}

// Blocking helpers over the socketpair that carries addresses and small test verdicts
// (tests/test_util/pipes.h); a write that fails aborts the process that made it.
using grapevine::test_util::readBlob;
void writeAll(int fd, const void* p, std::size_t n) {
  if (!grapevine::test_util::writeAll(fd, p, n)) std::abort();
}
void sendBlob(int fd, const std::vector<std::uint8_t>& blob) {
  if (!grapevine::test_util::writeBlob(fd, blob)) std::abort();
}

// One side of a two-peer link: its loop, context and the connection to the other side.
struct Side {
  gt::Loop loop;
  std::unique_ptr<gt::Context> context;
  std::shared_ptr<gt::Connection> conn;
  std::vector<std::uint8_t> remote;  // the other side's address
};

// Creates the context, swaps addresses over `fd`, connects (bound with `binding` when given).
// Returns an empty string on success.
std::string setUp(Side& side, int rank, int fd, const gt::DataBinding* binding = nullptr) {
  auto ctx = gt::testing::makeNativeContext(side.loop, testOptions(rank));
  if (!ctx) return ctx.status().toString();
  side.context = std::move(ctx).value();
  sendBlob(fd, side.context->localAddress());
  side.remote = readBlob(fd);
  if (side.remote.empty()) return "peer sent no address";
  auto conn = binding ? side.context->connectBound(1 - rank, side.remote, *binding)
                      : side.context->connect(1 - rank, side.remote);
  if (!conn) return conn.status().toString();
  side.conn = std::move(conn).value();
  return "";
}

std::uint8_t pattern(std::size_t i, std::uint64_t salt) {
  return static_cast<std::uint8_t>((i * 131 + salt * 7 + (i >> 12)) & 0xff);
}

// Runs `child` in a forked process as rank 1 (exit code 0 = its checks passed) while the test body
// runs as rank 0 with a ready Side. The child's exit status is checked at the end unless killed.
struct ChildResult {
  pid_t pid = -1;
  int fd = -1;
};

ChildResult forkChild(const std::function<int(Side&, int fd)>& child) {
  int sv[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::close(sv[0]);
    int rc = 0;
    {
      Side side;
      const std::string err = setUp(side, 1, sv[1]);
      if (!err.empty()) {
        std::fprintf(stderr, "child setup failed: %s\n", err.c_str());
        rc = 90;
      } else {
        rc = child(side, sv[1]);
        side.context->close();
        // Deliver the cancellations close() queued, then let the parent finish first.
        side.loop.runUntil([] { return false; }, 50ms);
      }
    }
    std::fflush(nullptr);
    ::_exit(rc);
  }
  ::close(sv[1]);
  return {pid, sv[0]};
}

int waitChild(pid_t pid) {
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// Waits for one byte from the other process (a "step done" signal), pumping the loop meanwhile so
// the backend keeps progressing (the other side may be waiting on us).
bool awaitSignal(Side& side, int fd, std::chrono::milliseconds timeout) {
  bool got = false;
  side.loop.runUntil(
      [&] {
        pollfd p{fd, POLLIN, 0};
        if (::poll(&p, 1, 0) == 1) {
          char c;
          got = ::read(fd, &c, 1) == 1;
          return true;
        }
        return false;
      },
      timeout);
  return got;
}
void signalOther(int fd) { writeAll(fd, "x", 1); }

// Why this entry's backend cannot run here ("" when it can): every case then skips (GV_SKIP), and
// the binary exits 77 (ctest: skipped).
std::string unavailableReason() {
  const auto info = gt::testing::nativeBackendInfo(testOptions(0).backend);
  return info.usable ? "" : "backend " + info.name + " " + info.reason;
}

const std::vector<std::size_t> kSizes = {0, 1, 13, 64 << 10, 4 << 20, 64 << 20};

}  // namespace

TEST_CASE("native backend: echo of every size, content intact") {
  if (const std::string why = unavailableReason(); !why.empty())
    GV_SKIP_MISSING(testOptions(0).backend, why);
  auto child = forkChild([](Side& s, int) {
    // Echo: receive each size into one reused buffer, send it back with the same tag.
    std::vector<std::uint8_t> buf(64 << 20);
    for (std::size_t i = 0; i < kSizes.size(); ++i) {
      bool got = false;
      Status st;
      std::size_t n = 0;
      s.conn->recv(i, buf, [&](Status x, std::size_t bytes) { st = x, n = bytes, got = true; });
      if (!s.loop.runUntil([&] { return got; }, 20s) || !st.isOk() || n != kSizes[i]) return 10;
      bool sent = false;
      s.conn->send(i, std::span<const std::uint8_t>(buf.data(), n), [&](Status x) {
        st = x;
        sent = true;
      });
      if (!s.loop.runUntil([&] { return sent; }, 20s) || !st.isOk()) return 11;
    }
    return 0;
  });
  Side side;
  REQUIRE(setUp(side, 0, child.fd) == "");
  std::vector<std::uint8_t> out(64 << 20), in(64 << 20);
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = pattern(i, 1);
  for (std::size_t i = 0; i < kSizes.size(); ++i) {
    const std::size_t size = kSizes[i];
    INFO("size " << size);
    std::fill_n(in.begin(), size, 0);
    int sendCalls = 0, recvCalls = 0;
    Status sendSt, recvSt;
    std::size_t n = 0;
    const auto t0 = std::chrono::steady_clock::now();
    // Receive posted before the send.
    side.conn->recv(i, in,
                    [&](Status x, std::size_t bytes) { recvSt = x, n = bytes, ++recvCalls; });
    side.conn->send(i, std::span<const std::uint8_t>(out.data(), size),
                    [&](Status x) { sendSt = x, ++sendCalls; });
    REQUIRE(sendCalls == 0);  // never inline
    REQUIRE(side.loop.runUntil([&] { return sendCalls == 1 && recvCalls == 1; }, 30s));
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    std::printf("echo %zu bytes: %.2f ms round trip\n", size, ms);
    REQUIRE(sendSt.isOk());
    REQUIRE(recvSt.isOk());
    REQUIRE(n == size);
    REQUIRE(std::memcmp(in.data(), out.data(), size) == 0);
  }
  side.loop.runUntil([] { return false; }, 20ms);
  side.context->close();
  CHECK(waitChild(child.pid) == 0);
}

TEST_CASE("native backend: order per tag, many in flight, receive posted after send") {
  if (const std::string why = unavailableReason(); !why.empty())
    GV_SKIP_MISSING(testOptions(0).backend, why);
  constexpr int kCount = 256;
  auto child = forkChild([](Side& s, int fd) {
    // Wait until the parent has sent everything (unexpected messages queue up), then receive.
    if (!awaitSignal(s, fd, 10s)) return 20;
    std::vector<std::uint32_t> a(kCount), b(kCount);
    int done = 0, bad = 0;
    for (int i = 0; i < kCount; ++i) {
      s.conn->recv(3, std::span<std::uint8_t>(reinterpret_cast<std::uint8_t*>(&a[i]), 4),
                   [&, i](Status x, std::size_t n) {
                     bad += !x.isOk() || n != 4 || a[i] != std::uint32_t(i);
                     ++done;
                   });
      s.conn->recv(4, std::span<std::uint8_t>(reinterpret_cast<std::uint8_t*>(&b[i]), 4),
                   [&, i](Status x, std::size_t n) {
                     bad += !x.isOk() || n != 4 || b[i] != std::uint32_t(1000 + i);
                     ++done;
                   });
    }
    if (!s.loop.runUntil([&] { return done == 2 * kCount; }, 10s)) return 21;
    signalOther(fd);
    return bad == 0 ? 0 : 22;
  });
  Side side;
  REQUIRE(setUp(side, 0, child.fd) == "");
  std::vector<std::uint32_t> a(kCount), b(kCount);
  std::vector<int> calls(2 * kCount, 0);
  int bad = 0;
  for (int i = 0; i < kCount; ++i) {
    a[i] = i;
    b[i] = 1000 + i;
    // Interleave two tags; each must arrive in its own send order.
    side.conn->send(3, std::span<const std::uint8_t>(reinterpret_cast<std::uint8_t*>(&a[i]), 4),
                    [&, i](Status x) {
                      bad += !x.isOk();
                      ++calls[i];
                    });
    side.conn->send(4, std::span<const std::uint8_t>(reinterpret_cast<std::uint8_t*>(&b[i]), 4),
                    [&, i](Status x) {
                      bad += !x.isOk();
                      ++calls[kCount + i];
                    });
  }
  REQUIRE(side.loop.runUntil(
      [&] { return std::all_of(calls.begin(), calls.end(), [](int c) { return c >= 1; }); }, 10s));
  signalOther(child.fd);
  REQUIRE(awaitSignal(side, child.fd, 10s));
  side.loop.runUntil([] { return false; }, 20ms);
  CHECK(bad == 0);
  CHECK(std::all_of(calls.begin(), calls.end(), [](int c) { return c == 1; }));  // exactly once
  side.context->close();
  CHECK(waitChild(child.pid) == 0);
}

TEST_CASE("native backend: too small a receive buffer is resource exhausted, link survives") {
  if (const std::string why = unavailableReason(); !why.empty())
    GV_SKIP_MISSING(testOptions(0).backend, why);
  auto child = forkChild([](Side& s, int fd) {
    std::vector<std::uint8_t> big(100, 7);
    int done = 0;
    Status a, b;
    s.conn->send(9, big, [&](Status x) { a = x, ++done; });
    s.conn->send(9, std::span<const std::uint8_t>(big.data(), 5), [&](Status x) { b = x, ++done; });
    if (!s.loop.runUntil([&] { return done == 2; }, 10s)) return 30;
    return awaitSignal(s, fd, 10s) ? 0 : 31;
  });
  Side side;
  REQUIRE(setUp(side, 0, child.fd) == "");
  std::vector<std::uint8_t> small(10), second(10);
  int calls = 0;
  Status first, next;
  std::size_t n2 = 0;
  side.conn->recv(9, small, [&](Status x, std::size_t) { first = x, ++calls; });
  side.conn->recv(9, second, [&](Status x, std::size_t n) { next = x, n2 = n, ++calls; });
  const bool both = side.loop.runUntil([&] { return calls == 2; }, 10s);
  INFO("calls " << calls << " first " << first.toString() << " next " << next.toString());
  REQUIRE(both);
  CHECK(first.code() == ErrorCode::kResourceExhausted);
  CHECK(next.isOk());  // only the oversized message is lost; the link survives
  CHECK(n2 == 5);
  CHECK(second[0] == 7);
  CHECK(side.conn->error().isOk());
  signalOther(child.fd);
  side.loop.runUntil([] { return false; }, 20ms);
  side.context->close();
  CHECK(waitChild(child.pid) == 0);
}

TEST_CASE(
    "native backend: messages no receive takes are bounded, the oldest dropped; the link "
    "still works") {
  if (const std::string why = unavailableReason(); !why.empty())
    GV_SKIP_MISSING(testOptions(0).backend, why);
  // More junk than the ucx backend holds for one sender (tagged/early_queue.h: 4096), on tags the
  // parent never receives, then three real messages on tag 1.
  constexpr int kJunk = 5000;
  constexpr std::uint64_t kPerSender = 4096;
  auto child = forkChild([](Side& s, int fd) {
    std::vector<std::uint8_t> junk(64, 0xEE);
    std::uint32_t real[3] = {1, 2, 3};
    int done = 0, bad = 0;
    for (int i = 0; i < kJunk; ++i) {
      s.conn->send(100 + static_cast<gt::Tag>(i % 50), junk, [&](Status x) {
        bad += !x.isOk();
        ++done;
      });
    }
    for (auto& v : real) {
      s.conn->send(1, std::span(reinterpret_cast<const std::uint8_t*>(&v), 4), [&](Status x) {
        bad += !x.isOk();
        ++done;
      });
    }
    if (!s.loop.runUntil([&] { return done == kJunk + 3; }, 30s)) return 40;
    signalOther(fd);
    if (!awaitSignal(s, fd, 30s)) return 41;
    return bad == 0 ? 0 : 42;
  });
  Side side;
  REQUIRE(setUp(side, 0, child.fd) == "");
  REQUIRE(awaitSignal(side, child.fd, 30s));
  // Every message has come (the sends completed); the ones beyond the bound go as the progress
  // passes see them. What holding one costs: its bytes with ucx (eager), one receive buffer of
  // rxm's (16 KiB + its header) with libfabric (ofi.cc, kRxmHeldBytes).
  const bool ucx = testOptions(0).backend == "ucx";
  const auto counters = [&] { return side.context->counters(); };
  const bool bounded = side.loop.runUntil(
      [&] {
        auto c = counters();
        return c["unexpected_held"] + c["unexpected_dropped"] == kJunk + 3;
      },
      30s);
  auto c = counters();
  INFO("held " << c["unexpected_held"] << " dropped " << c["unexpected_dropped"] << " bytes "
               << c["unexpected_held_bytes"]);
  REQUIRE(bounded);
  CHECK(c["unexpected_held"] == kPerSender);
  CHECK(c["unexpected_dropped"] == kJunk + 3 - kPerSender);
  CHECK(c["unexpected_held_bytes"] ==
        (ucx ? (kPerSender - 3) * 64 + 3 * 4 : kPerSender * (16384 + 64)));
  // The newest messages survived: the three real ones, in their order.
  std::uint32_t got[3] = {0, 0, 0};
  int calls = 0, bad = 0;
  for (auto& g : got) {
    side.conn->recv(1, std::span(reinterpret_cast<std::uint8_t*>(&g), 4),
                    [&](Status x, std::size_t n) {
                      bad += !x.isOk() || n != 4;
                      ++calls;
                    });
  }
  REQUIRE(side.loop.runUntil([&] { return calls == 3; }, 10s));
  CHECK(bad == 0);
  CHECK(got[0] == 1);
  CHECK(got[1] == 2);
  CHECK(got[2] == 3);
  CHECK(side.context->counters()["unexpected_held"] == kPerSender - 3);
  CHECK(side.conn->error().isOk());
  signalOther(child.fd);
  side.loop.runUntil([] { return false; }, 20ms);
  side.context->close();
  CHECK(waitChild(child.pid) == 0);
}

TEST_CASE("native backend: close with pending operations cancels each exactly once") {
  if (const std::string why = unavailableReason(); !why.empty())
    GV_SKIP_MISSING(testOptions(0).backend, why);
  auto child = forkChild([](Side& s, int fd) {
    // Never receives: the parent's large send stays pending until the parent closes.
    return awaitSignal(s, fd, 15s) ? 0 : 40;
  });
  Side side;
  REQUIRE(setUp(side, 0, child.fd) == "");
  std::vector<std::uint8_t> in(64), out(16 << 20, 1);
  int recvCalls = 0, sendCalls = 0, lateCalls = 0;
  Status recvSt, sendSt, lateSt;
  side.conn->recv(1, in, [&](Status x, std::size_t) { recvSt = x, ++recvCalls; });
  side.conn->send(2, out, [&](Status x) { sendSt = x, ++sendCalls; });
  side.loop.runUntil([] { return false; }, 100ms);  // let them reach the wire
  REQUIRE(recvCalls == 0);
  side.conn->close();
  side.conn->close();       // idempotent
  REQUIRE(recvCalls == 0);  // not inline
  side.conn->recv(1, in, [&](Status x, std::size_t) { lateSt = x, ++lateCalls; });
  REQUIRE(
      side.loop.runUntil([&] { return recvCalls == 1 && sendCalls == 1 && lateCalls == 1; }, 5s));
  side.loop.runUntil([] { return false; }, 50ms);
  CHECK(recvCalls == 1);
  CHECK(sendCalls == 1);
  CHECK(recvSt.code() == ErrorCode::kCancelled);
  CHECK(sendSt.code() == ErrorCode::kCancelled);
  CHECK(lateSt.code() == ErrorCode::kCancelled);
  CHECK(side.conn->error().code() == ErrorCode::kCancelled);
  signalOther(child.fd);
  side.context->close();
  CHECK(waitChild(child.pid) == 0);
}

namespace {
// One message each way over `s.conn`; true when both arrived intact.
bool exchangeOne(Side& s, std::uint8_t mine, std::uint8_t theirs) {
  std::vector<std::uint8_t> out(32, mine), in(32, 0);
  Status sent = grapevine::unavailable("pending"), got = grapevine::unavailable("pending");
  bool sendDone = false, recvDone = false;
  s.conn->recv(3, in, [&](Status x, std::size_t) { got = x, recvDone = true; });
  s.conn->send(3, out, [&](Status x) { sent = x, sendDone = true; });
  s.loop.runUntil([&] { return sendDone && recvDone; }, 10s);
  return sent.isOk() && got.isOk() &&
         std::all_of(in.begin(), in.end(), [&](std::uint8_t b) { return b == theirs; });
}
}  // namespace

TEST_CASE("native backend: a bound connection takes nothing from a party without the token") {
  if (const std::string why = unavailableReason(); !why.empty())
    GV_SKIP_MISSING(testOptions(0).backend, why);
  // Issue 41: with a key, a data connection is bound to its edge's handshake. The child's first
  // connection is a stranger claiming rank 1 without the token (unbound): its message on tag 1 and
  // its goodbye must not reach the parent's bound connection; the child's bound connection's
  // message must.
  static gt::DataBinding binding;
  for (std::size_t i = 0; i < binding.lower.size(); ++i) {
    binding.lower[i] = static_cast<std::uint8_t>(i * 7 + 1);
    binding.higher[i] = static_cast<std::uint8_t>(i * 13 + 5);
  }
  auto child = forkChild([](Side& s, int fd) {
    const auto sendValue = [&](gt::Connection& c, std::uint32_t v) {
      int done = 0, bad = 0;
      c.send(1, std::span(reinterpret_cast<const std::uint8_t*>(&v), 4), [&](Status x) {
        bad += !x.isOk();
        ++done;
      });
      return s.loop.runUntil([&] { return done == 1; }, 10s) && bad == 0;
    };
    if (!sendValue(*s.conn, 666)) return 40;  // the stranger's
    auto bound = s.context->connectBound(0, s.remote, binding);
    if (!bound) return 41;
    if (!sendValue(**bound, 7)) return 42;
    s.conn->close();  // the stranger's goodbye
    s.loop.runUntil([] { return false; }, 300ms);
    signalOther(fd);
    if (!awaitSignal(s, fd, 30s)) return 43;
    (*bound)->close();
    return 0;
  });
  Side side;
  REQUIRE(setUp(side, 0, child.fd, &binding) == "");
  REQUIRE(awaitSignal(side, child.fd, 30s));
  std::uint32_t got = 0;
  int calls = 0, bad = 0;
  side.conn->recv(1, std::span(reinterpret_cast<std::uint8_t*>(&got), 4),
                  [&](Status x, std::size_t n) {
                    bad += !x.isOk() || n != 4;
                    ++calls;
                  });
  REQUIRE(side.loop.runUntil([&] { return calls == 1; }, 10s));
  CHECK(bad == 0);
  CHECK(got == 7);  // the bound sender's, not the stranger's 666
  side.loop.runUntil([] { return false; }, 300ms);
  INFO(side.conn->error().toString());
  CHECK(side.conn->error().isOk());  // the stranger's goodbye did not end it
  signalOther(child.fd);
  side.loop.runUntil([] { return false; }, 50ms);
  side.context->close();
  CHECK(waitChild(child.pid) == 0);
}

TEST_CASE("native backend: a goodbye of an older connection does not end the newer one") {
  if (const std::string why = unavailableReason(); !why.empty())
    GV_SKIP_MISSING(testOptions(0).backend, why);
  // Receives match by (rank, tag), not by endpoint: a goodbye that an old connection sent while no
  // receive of the peer's was posted waits in the library and would be matched by the next
  // connection's goodbye receive (seen over UCX after a network cut: a goodbye queued during the
  // cut ended the redialed connection). Here the child closes first and its goodbye waits unread
  // while the parent closes too; then both connect again.
  auto child = forkChild([](Side& s, int fd) {
    if (!exchangeOne(s, 2, 1)) return 41;
    if (!awaitSignal(s, fd, 10s)) return 42;  // "A": the parent stops progressing
    s.conn->close();
    s.loop.runUntil([] { return false; }, 300ms);  // our goodbye leaves
    signalOther(fd);                               // "B"
    if (!awaitSignal(s, fd, 10s)) return 43;       // "C": the parent connected again
    auto again = s.context->connect(0, s.remote);
    if (!again) return 44;
    s.conn = std::move(again).value();
    if (!exchangeOne(s, 4, 3)) return 45;
    s.loop.runUntil([] { return false; }, 300ms);
    if (!s.conn->error().isOk()) return 46;
    signalOther(fd);  // "D"
    return awaitSignal(s, fd, 10s) ? 0 : 47;
  });
  Side side;
  REQUIRE(setUp(side, 0, child.fd) == "");
  REQUIRE(exchangeOne(side, 1, 2));
  signalOther(child.fd);  // "A"
  char c;
  // "B", without progress: the child's goodbye waits unread until our receive is gone.
  REQUIRE(::read(child.fd, &c, 1) == 1);
  side.conn->close();
  side.loop.runUntil([] { return false; }, 300ms);
  auto again = side.context->connect(1, side.remote);
  REQUIRE(again.isOk());
  side.conn = std::move(again).value();
  side.loop.runUntil([] { return false; }, 300ms);
  INFO(side.conn->error().toString());
  CHECK(side.conn->error().isOk());  // the stale goodbye did not end it
  signalOther(child.fd);             // "C"
  CHECK(exchangeOne(side, 3, 4));
  REQUIRE(awaitSignal(side, child.fd, 10s));  // "D"
  CHECK(side.conn->error().isOk());
  signalOther(child.fd);
  side.context->close();
  CHECK(waitChild(child.pid) == 0);
}

TEST_CASE("native backend: SIGKILLed peer fails pending operations with unavailable within 2 s") {
  if (const std::string why = unavailableReason(); !why.empty())
    GV_SKIP_MISSING(testOptions(0).backend, why);
  auto child = forkChild([](Side& s, int fd) {
    // Receive one small message so the link is known to work, then hang until killed.
    std::vector<std::uint8_t> b(8);
    bool got = false;
    s.conn->recv(1, b, [&](Status, std::size_t) { got = true; });
    s.loop.runUntil([&] { return got; }, 10s);
    signalOther(fd);
    s.loop.runUntil([] { return false; }, 60s);
    return 0;
  });
  Side side;
  REQUIRE(setUp(side, 0, child.fd) == "");
  std::vector<std::uint8_t> hello(8, 1), in(64), big(8 << 20, 2);
  bool helloDone = false;
  side.conn->send(1, hello, [&](Status) { helloDone = true; });
  REQUIRE(awaitSignal(side, child.fd, 10s));
  REQUIRE(side.loop.runUntil([&] { return helloDone; }, 5s));

  int recvCalls = 0, sendCalls = 0;
  Status recvSt, sendSt;
  side.conn->recv(5, in, [&](Status x, std::size_t) { recvSt = x, ++recvCalls; });
  side.conn->send(6, big, [&](Status x) { sendSt = x, ++sendCalls; });
  side.loop.runUntil([] { return false; }, 50ms);
  REQUIRE(::kill(child.pid, SIGKILL) == 0);
  const auto t0 = std::chrono::steady_clock::now();
  const bool done = side.loop.runUntil([&] { return recvCalls == 1 && sendCalls == 1; }, 5s);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("SIGKILL detected after %.3f s\n", s);
  REQUIRE(done);
  CHECK(s < 2.0);
  CHECK(recvSt.code() == ErrorCode::kUnavailable);
  CHECK(sendSt.code() == ErrorCode::kUnavailable);
  CHECK(side.conn->error().code() == ErrorCode::kUnavailable);
  // Later operations fail the same way, still never inline.
  int late = 0;
  Status lateSt;
  side.conn->send(1, hello, [&](Status x) { lateSt = x, ++late; });
  CHECK(late == 0);
  side.loop.runUntil([&] { return late == 1; }, 1s);
  CHECK(lateSt.code() == ErrorCode::kUnavailable);
  side.context->close();
  waitChild(child.pid);
}
