// Helpers for the transport tests: which backend the binary runs against (GRAPEVINE_TEST_BACKEND,
// set per ctest entry), a callback probe that fails on a missing, duplicated or inline callback,
// and a pair of connected contexts on one Loop.
#pragma once

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <map>
#include <memory>
#include <string>

#include "runtime/transport/loop.h"
#include "runtime/transport/transport.h"
#include "tests/test_util/skip.h"

namespace grapevine::transport::testing {

// GRAPEVINE_TEST_BACKEND names the backend; GRAPEVINE_TEST_TRANSPORT_OPTIONS holds extra settings
// as whitespace-separated "key=value" pairs (ucxTls, libfabricProvider, busyPoll). Exits 77
// ("skipped: ...") when the backend is not built or not usable here, so ctest reports it as
// skipped, never as passed.
inline Options baseOptions() {
  Options o;
  const char* b = std::getenv("GRAPEVINE_TEST_BACKEND");
  o.backend = b ? b : "tcp";
  o.ioTimeoutSeconds = 5.0;
  if (const char* extra = std::getenv("GRAPEVINE_TEST_TRANSPORT_OPTIONS")) {
    std::string s = extra;
    std::size_t pos = 0;
    while (pos < s.size()) {
      std::size_t end = s.find_first_of(" \t", pos);
      if (end == std::string::npos) end = s.size();
      const std::string kv = s.substr(pos, end - pos);
      const auto eq = kv.find('=');
      if (eq != std::string::npos) {
        const std::string k = kv.substr(0, eq), v = kv.substr(eq + 1);
        if (k == "ucxTls")
          o.ucxTls = v;
        else if (k == "libfabricProvider")
          o.libfabricProvider = v;
        else if (k == "busyPoll")
          o.busyPoll = (v == "1" || v == "true");
        else {
          std::cerr << "unknown GRAPEVINE_TEST_TRANSPORT_OPTIONS key '" << k << "'\n";
          std::exit(2);
        }
      }
      pos = end + 1;
    }
  }
  return o;
}

inline const Options& testOptions() {
  static const Options options = [] {
    Options o = baseOptions();
    for (const BackendInfo& info : backends()) {
      if (info.name != o.backend) continue;
      if (!info.usable) {
        grapevine::test_util::exitMissing(o.backend, "backend " + o.backend + " " + info.reason);
      }
      return o;
    }
    std::cout << "unknown backend '" << o.backend << "'" << std::endl;
    std::exit(2);
  }();
  return options;
}

// Records completions by id. Fails the test when a callback runs twice or inline (while `inApi` is
// set by the caller around a transport call); allFired() checks none is missing.
class Probe {
 public:
  struct Completion {
    int calls = 0;
    Status status;
    std::size_t bytes = 0;
  };

  SendCallback send(int id) {
    expect(id);
    return [this, id](Status s) { record(id, std::move(s), 0); };
  }
  RecvCallback recv(int id) {
    expect(id);
    return [this, id](Status s, std::size_t n) { record(id, std::move(s), n); };
  }

  bool fired(int id) const { return at(id).calls > 0; }
  bool allFired() const {
    for (const auto& [id, c] : done_) {
      if (c.calls == 0) return false;
    }
    return true;
  }
  std::size_t pending() const {
    std::size_t n = 0;
    for (const auto& [id, c] : done_) n += c.calls == 0;
    return n;
  }
  const Completion& at(int id) const { return done_.at(id); }
  int duplicates() const { return duplicates_; }
  int inlineCalls() const { return inline_; }

  bool inApi = false;  // set around transport calls to catch inline callbacks

 private:
  void expect(int id) {
    REQUIRE(done_.count(id) == 0);  // ids are unique per probe
    done_[id];
  }
  void record(int id, Status s, std::size_t n) {
    if (inApi) ++inline_;
    Completion& c = done_.at(id);
    if (++c.calls > 1) ++duplicates_;
    c.status = std::move(s);
    c.bytes = n;
  }
  std::map<int, Completion> done_;
  int duplicates_ = 0;
  int inline_ = 0;
};

// Two contexts (ranks 0 and 1) on one loop, connected to each other.
struct Pair {
  Loop loop;
  std::unique_ptr<Context> ctx0, ctx1;
  std::shared_ptr<Connection> c01, c10;  // c01: rank 0's connection to rank 1

  explicit Pair(Options o = testOptions()) {
    o.rank = 0;
    auto a = makeContext(loop, o);
    REQUIRE(a.isOk());
    o.rank = 1;
    auto b = makeContext(loop, o);
    REQUIRE(b.isOk());
    ctx0 = std::move(a).value();
    ctx1 = std::move(b).value();
    auto x = ctx0->connect(1, ctx1->localAddress());
    REQUIRE(x.isOk());
    auto y = ctx1->connect(0, ctx0->localAddress());
    REQUIRE(y.isOk());
    c01 = std::move(x).value();
    c10 = std::move(y).value();
  }
  ~Pair() {
    if (ctx0) ctx0->close();
    if (ctx1) ctx1->close();
    // Let posted completions and aborted handlers run before the loop goes away.
    loop.runUntil([] { return false; }, std::chrono::milliseconds(20));
  }

  // One message each way, so the link is known to be up (a close before that can only be noticed by
  // the peer's connect deadline).
  void warmUp() {
    static const std::uint8_t ping[1] = {42};
    std::uint8_t in0[1] = {0}, in1[1] = {0};
    int done = 0;
    c01->send(kWarmUpTag, ping, [&](Status s) {
      REQUIRE(s.isOk());
      ++done;
    });
    c10->send(kWarmUpTag, ping, [&](Status s) {
      REQUIRE(s.isOk());
      ++done;
    });
    c01->recv(kWarmUpTag, in0, [&](Status s, std::size_t) {
      REQUIRE(s.isOk());
      ++done;
    });
    c10->recv(kWarmUpTag, in1, [&](Status s, std::size_t) {
      REQUIRE(s.isOk());
      ++done;
    });
    REQUIRE(runUntil([&] { return done == 4; }));
    REQUIRE((in0[0] == 42 && in1[0] == 42));
  }
  static constexpr Tag kWarmUpTag = 0xFFFFFFFF;

  bool runUntil(const std::function<bool()>& done, double seconds = 10.0) {
    return loop.runUntil(done, std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::duration<double>(seconds)));
  }
};

}  // namespace grapevine::transport::testing
