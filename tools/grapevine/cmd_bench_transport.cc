// `grapevine bench transport [--backend NAME] [--json]`: ping-pong latency (8 B) and one-way
// streaming bandwidth (64 KiB, 4 MiB, 64 MiB; several messages in flight) through the Grapevine
// transport between two processes on loopback, and, in the same run with the same sizes and counts,
// the backend's native reference (for tcp: a plain blocking-socket loop). References are one table
// (references() below): a backend adds its own (ucx_perftest, fi_pingpong) as one row.
//
// stdout carries only the result (with --json: only JSON). While measuring, this process's stdout
// (where UCX prints its own log lines) and every child's output go to a log file, named on stderr:
// native_tool::logPath().
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <iomanip>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>
#include <vector>

#include "runtime/common/byte_order.h"
#include "runtime/common/elapsed.h"
#include "runtime/common/subprocess.h"
#include "runtime/security/auth.h"
#include "runtime/transport/loop.h"
#include "runtime/transport/native_tool.h"
#include "runtime/transport/transport.h"
#include "tools/grapevine/command.h"
#if GRAPEVINE_BENCH_NATIVE_REFERENCES
#include "runtime/transport/ofi/native_reference.h"
#include "runtime/transport/ucx/native_reference.h"
#endif

namespace grapevine::cli {

namespace {

using Clock = std::chrono::steady_clock;
using transport::Connection;
using transport::Loop;

// What both sides run; fixed before the fork, so the child knows it too.
struct Plan {
  std::string backend;
  int pingPongs = 2000;
  int warmupPingPongs = 200;
  std::vector<std::size_t> sizes = {64 << 10, 4 << 20, 64 << 20};
  int window = 4;  // messages in flight
  int reps = 3;    // timed repetitions per size (best one counts), after one warm-up
  bool busyPoll = false;
  // security.key_file's cost on the same messages (docs/security.md): 0 off, 1 MAC-only (every
  // message sealed by the sender, its tag checked by the receiver), 2 encrypted (sealed with the
  // cipher two peers of this machine negotiate, decrypted into a copy by the receiver, as
  // PeerCore does). Each message carries its sequence number in its first 8 bytes (the
  // envelope's place for the nonce).
  int security = 0;
  security::Key key{};
  security::Cipher cipher = security::aesGcmAvailable() ? security::Cipher::kAes256Gcm
                                                        : security::Cipher::kChaCha20Poly1305;
  // Messages per repetition: about 256 MiB, at least 8.
  int messages(std::size_t size) const {
    return static_cast<int>(std::max<std::size_t>(8, (std::size_t{256} << 20) / size));
  }
};

// The sealed messages' authenticated-only header, like the engine's envelope.
constexpr std::size_t kSealHeader = 64;

struct Numbers {
  double latUs = 0;          // half round trip, 8 B: median over the timed ping-pongs
  std::vector<double> gbps;  // per plan.sizes entry
};

double elapsed(Clock::time_point t0) { return secondsSince(t0); }

// Median half round trip in microseconds. The median (like ucx_perftest's "typical" latency) keeps
// a scheduler tick that lands on one ping-pong, on this shared 2-core machine, from moving the
// result.
double medianHalfRttUs(std::vector<double>& roundTripsSeconds) {
  if (roundTripsSeconds.empty()) return 0;
  auto mid = roundTripsSeconds.begin() + static_cast<std::ptrdiff_t>(roundTripsSeconds.size() / 2);
  std::nth_element(roundTripsSeconds.begin(), mid, roundTripsSeconds.end());
  return *mid / 2 * 1e6;
}

// ---- pipes between the two processes (address exchange, start signals) --------------------------

bool writeAll(int fd, const void* p, std::size_t n) {
  const auto* b = static_cast<const std::uint8_t*>(p);
  while (n > 0) {
    const ssize_t w = ::write(fd, b, n);
    if (w <= 0) return false;
    b += w;
    n -= static_cast<std::size_t>(w);
  }
  return true;
}
bool readAll(int fd, void* p, std::size_t n) {
  auto* b = static_cast<std::uint8_t*>(p);
  while (n > 0) {
    const ssize_t r = ::read(fd, b, n);
    if (r <= 0) return false;
    b += r;
    n -= static_cast<std::size_t>(r);
  }
  return true;
}
bool writeBlob(int fd, const std::vector<std::uint8_t>& v) {
  const std::uint32_t n = static_cast<std::uint32_t>(v.size());
  return writeAll(fd, &n, 4) && writeAll(fd, v.data(), n);
}
std::optional<std::vector<std::uint8_t>> readBlob(int fd) {
  std::uint32_t n = 0;
  if (!readAll(fd, &n, 4)) return std::nullopt;
  std::vector<std::uint8_t> v(n);
  if (!readAll(fd, v.data(), n)) return std::nullopt;
  return v;
}

// Runs `server(readFd, writeFd)` in a forked process (or a thread, for the in-process backend) and
// `client(readFd, writeFd)` here. Returns the client's result.
template <typename T>
Result<T> runPair(bool sameProcess, const std::function<int(int, int)>& server,
                  const std::function<Result<T>(int, int)>& client) {
  int up[2], down[2];
  if (::pipe(up) != 0 || ::pipe(down) != 0) return internalError("pipe failed");
  if (sameProcess) {
    std::thread t([&] { server(down[0], up[1]); });
    Result<T> r = client(up[0], down[1]);
    ::close(down[1]);  // unblocks a server still waiting on the pipe
    t.join();
    for (int fd : {up[0], up[1], down[0]}) ::close(fd);
    return r;
  }
  auto peer = Subprocess::forkCall([&] {
    ::close(up[0]);
    ::close(down[1]);
    return server(down[0], up[1]);
  });
  ::close(up[1]);
  ::close(down[0]);
  if (!peer.isOk()) {
    ::close(up[0]);
    ::close(down[1]);
    return internalError("fork failed");
  }
  Result<T> r = client(up[0], down[1]);
  ::close(down[1]);
  ::close(up[0]);
  const int status = peer->wait();
  if (r.isOk() && exitCode(status) != 0) {
    return internalError("the benchmark peer process failed");
  }
  return r;
}

// While alive, this process's stdout goes to the log (appended): UCX prints its log lines there,
// and children inherit it. The destructor flushes and puts the real stdout back.
class StdoutToLog {
 public:
  explicit StdoutToLog(const std::string& path) {
    const int log = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (log < 0) return;
    std::cout.flush();
    std::fflush(stdout);
    saved_ = ::fcntl(STDOUT_FILENO, F_DUPFD_CLOEXEC, 0);
    if (saved_ >= 0) ::dup2(log, STDOUT_FILENO);
    ::close(log);
  }
  ~StdoutToLog() {
    if (saved_ < 0) return;
    std::cout.flush();
    std::fflush(stdout);
    ::dup2(saved_, STDOUT_FILENO);
    ::close(saved_);
  }
  StdoutToLog(const StdoutToLog&) = delete;
  StdoutToLog& operator=(const StdoutToLog&) = delete;

 private:
  int saved_ = -1;
};

// ---- Grapevine transport ------------------------------------------------------------------------

constexpr transport::Tag kPing = 1, kPong = 2, kAck = 3, kStreamBase = 100;

struct Peer {
  Loop loop;
  std::unique_ptr<transport::Context> ctx;
  std::shared_ptr<Connection> conn;
  bool busyPoll = false;

  Status setUp(const Plan& plan, int rank, int rfd, int wfd) {
    transport::Options o;
    o.backend = plan.backend;
    o.rank = rank;
    o.busyPoll = plan.busyPoll;
    o.ucxRndvThresh = 0;  // UCX's own rendezvous threshold, as this bench has always measured
    busyPoll = plan.busyPoll;
    auto c = transport::makeContext(loop, o);
    if (!c.isOk()) return c.status();
    ctx = std::move(c).value();
    if (!writeBlob(wfd, ctx->localAddress())) return unavailable("pipe closed");
    auto theirs = readBlob(rfd);
    if (!theirs) return unavailable("pipe closed");
    auto conn2 = ctx->connect(1 - rank, *theirs);
    if (!conn2.isOk()) return conn2.status();
    conn = std::move(conn2).value();
    return Status::ok();
  }
  // Runs the loop until done() (60 s cap). Busy polling spins over poll() instead of sleeping.
  bool wait(const std::function<bool()>& done) {
    if (!busyPoll) return loop.runUntil(done, std::chrono::seconds(60));
    const auto deadline = Clock::now() + std::chrono::seconds(60);
    while (!done()) {
      if (Clock::now() > deadline) return false;
      loop.pollOnce();  // handlers and the backend's progress (UCX worker, libfabric CQ)
    }
    return true;
  }
  ~Peer() {
    if (ctx) ctx->close();
    loop.runUntil([] { return false; }, std::chrono::milliseconds(10));
  }
};

// Receives `count` messages of `size` on `tag` with `window` receives posted, into reused buffers.
struct Sink {
  std::vector<std::vector<std::uint8_t>>* buffers;
  const Plan* plan = nullptr;
  std::vector<std::uint8_t>* opened = nullptr;  // encrypted mode: the decrypted copy
  int count = 0, posted = 0, got = 0, errors = 0;
  void post(Connection& c, transport::Tag tag, std::size_t size) {
    auto& buf = (*buffers)[static_cast<std::size_t>(posted) % buffers->size()];
    ++posted;
    c.recv(tag, std::span(buf.data(), size), [this, &c, tag, size, &buf](Status s, std::size_t) {
      if (!s.isOk()) ++errors;
      if (s.isOk() && plan->security != 0) {
        const std::span<const std::uint8_t> m(buf.data(), size);
        const auto seq = loadLe<std::uint64_t>(m.data());
        bool ok = false;
        if (plan->security == 1) {
          ok = security::verify(plan->key, 0, seq, m);
        } else {
          opened->assign(m.begin(), m.end());
          ok = security::open(plan->key, true, 0, seq, kSealHeader, *opened, plan->cipher);
        }
        if (!ok) ++errors;
      }
      ++got;
      if (posted < count) post(c, tag, size);
    });
  }
};

int grapevineServer(const Plan& plan, int rfd, int wfd) {
  Peer p;
  if (!p.setUp(plan, 1, rfd, wfd).isOk()) return 3;
  std::uint8_t ping[8] = {}, pong[8] = {};
  int got = 0;
  const int total = plan.warmupPingPongs + plan.pingPongs;
  std::function<void()> postPing = [&] {
    p.conn->recv(kPing, ping, [&](Status s, std::size_t) {
      if (!s.isOk()) return;
      ++got;
      if (got < total) postPing();
      p.conn->send(kPong, pong, [](Status) {});
    });
  };
  postPing();
  if (!p.wait([&] { return got == total; })) return 4;
  std::vector<std::vector<std::uint8_t>> buffers(static_cast<std::size_t>(plan.window));
  for (auto& b : buffers) b.assign(plan.sizes.back(), 0);  // touched once, before timing
  std::uint8_t ack[8] = {};
  int phase = 0;
  // Receives for each phase are posted before the previous phase is acknowledged.
  auto phaseTag = [](int ph) { return kStreamBase + static_cast<transport::Tag>(ph); };
  std::vector<std::pair<std::size_t, int>> phases;
  for (std::size_t size : plan.sizes) {
    for (int r = 0; r < plan.reps + 1; ++r) phases.emplace_back(size, plan.messages(size));
  }
  std::vector<Sink> sinks(phases.size());
  std::vector<std::uint8_t> opened;
  auto start = [&](int ph) {
    Sink& s = sinks[static_cast<std::size_t>(ph)];
    s.buffers = &buffers;
    s.plan = &plan;
    s.opened = &opened;
    s.count = phases[static_cast<std::size_t>(ph)].second;
    for (int i = 0; i < plan.window && s.posted < s.count; ++i) {
      s.post(*p.conn, phaseTag(ph), phases[static_cast<std::size_t>(ph)].first);
    }
  };
  start(0);
  for (phase = 0; phase < static_cast<int>(phases.size()); ++phase) {
    Sink& s = sinks[static_cast<std::size_t>(phase)];
    if (!p.wait([&] { return s.got == s.count; }) || s.errors) return 5;
    if (phase + 1 < static_cast<int>(phases.size())) start(phase + 1);
    int acked = 0;
    p.conn->send(kAck, ack, [&](Status) { ++acked; });
    if (!p.wait([&] { return acked == 1; })) return 6;
  }
  // Wait for the client to hang up before tearing down (its last receives must complete).
  char c;
  (void)!::read(rfd, &c, 1);
  return 0;
}

Result<Numbers> grapevineClient(const Plan& plan, int rfd, int wfd) {
  Peer p;
  GV_RETURN_IF_ERROR(p.setUp(plan, 0, rfd, wfd));
  Numbers n;
  std::uint8_t ping[8] = {1}, pong[8] = {};
  std::vector<double> rtts;
  rtts.reserve(static_cast<std::size_t>(plan.pingPongs));
  for (int i = 0; i < plan.warmupPingPongs + plan.pingPongs; ++i) {
    const auto t0 = Clock::now();
    bool done = false;
    Status st;
    p.conn->recv(kPong, pong, [&](Status s, std::size_t) {
      st = s;
      done = true;
    });
    p.conn->send(kPing, ping, [](Status) {});
    if (!p.wait([&] { return done; })) return deadlineExceeded("ping-pong timed out");
    GV_RETURN_IF_ERROR(st);
    if (i >= plan.warmupPingPongs) rtts.push_back(elapsed(t0));
  }
  n.latUs = medianHalfRttUs(rtts);

  // One buffer per message in flight: a sealed one is not rewritten while it is being sent.
  std::vector<std::vector<std::uint8_t>> outs(static_cast<std::size_t>(plan.window),
                                              std::vector<std::uint8_t>(plan.sizes.back(), 0x5A));
  std::uint64_t sequence = 0;
  std::uint8_t ack[8];
  int phase = 0;
  for (std::size_t size : plan.sizes) {
    double best = 0;
    for (int r = 0; r < plan.reps + 1; ++r, ++phase) {
      const int count = plan.messages(size);
      int sent = 0, completed = 0, errors = 0;
      bool acked = false;
      p.conn->recv(kAck, ack, [&](Status s, std::size_t) {
        if (!s.isOk()) ++errors;
        acked = true;
      });
      const transport::Tag tag = kStreamBase + static_cast<transport::Tag>(phase);
      std::function<void()> pump = [&] {
        while (sent < count && sent - completed < plan.window) {
          auto& out = outs[static_cast<std::size_t>(sent) % outs.size()];
          ++sent;
          if (plan.security != 0) {
            storeLe<std::uint64_t>(out.data(), sequence);
            security::seal(plan.key, plan.security == 2, 0, sequence++, kSealHeader,
                           std::span(out.data(), size), plan.cipher);
          }
          p.conn->send(tag, std::span(out.data(), size), [&](Status s) {
            if (!s.isOk()) ++errors;
            ++completed;
            pump();
          });
        }
      };
      const auto start = Clock::now();
      pump();
      if (!p.wait([&] { return acked; })) return deadlineExceeded("streaming timed out");
      const double secs = elapsed(start);
      if (errors) return unavailable("streaming failed");
      if (r > 0) best = std::max(best, double(size) * count * 8 / secs / 1e9);  // r == 0: warm-up
    }
    n.gbps.push_back(best);
  }
  return n;
}

// ---- reference: plain blocking sockets (tcp) ----------------------------------------------------

int tcpSocket() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

int tcpReferenceServer(const Plan& plan, int rfd, int wfd) {
  const int ls = tcpSocket();
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (::bind(ls, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(ls, 1) != 0) return 3;
  ::getsockname(ls, reinterpret_cast<sockaddr*>(&a), &len);
  const std::uint16_t port = ntohs(a.sin_port);
  if (!writeAll(wfd, &port, 2)) return 4;
  const int fd = ::accept(ls, nullptr, nullptr);
  if (fd < 0) return 5;
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  std::uint8_t b[8];
  for (int i = 0; i < plan.warmupPingPongs + plan.pingPongs; ++i) {
    if (!readAll(fd, b, 8) || !writeAll(fd, b, 8)) return 6;
  }
  std::vector<std::uint8_t> buf(plan.sizes.back(), 0);
  for (std::size_t size : plan.sizes) {
    for (int r = 0; r < plan.reps + 1; ++r) {
      for (int m = 0; m < plan.messages(size); ++m) {
        if (!readAll(fd, buf.data(), size)) return 7;
      }
      if (!writeAll(fd, b, 1)) return 8;
    }
  }
  ::close(fd);
  ::close(ls);
  return 0;
}

Result<Numbers> tcpReferenceClient(const Plan& plan, int rfd, int wfd) {
  std::uint16_t port = 0;
  if (!readAll(rfd, &port, 2)) return unavailable("reference server did not start");
  const int fd = tcpSocket();
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0)
    return unavailable("connect failed");
  Numbers n;
  std::uint8_t b[8] = {1};
  std::vector<double> rtts;
  rtts.reserve(static_cast<std::size_t>(plan.pingPongs));
  for (int i = 0; i < plan.warmupPingPongs + plan.pingPongs; ++i) {
    const auto t0 = Clock::now();
    if (!writeAll(fd, b, 8) || !readAll(fd, b, 8)) return unavailable("reference ping-pong failed");
    if (i >= plan.warmupPingPongs) rtts.push_back(elapsed(t0));
  }
  n.latUs = medianHalfRttUs(rtts);
  std::vector<std::uint8_t> out(plan.sizes.back(), 0x5A);
  for (std::size_t size : plan.sizes) {
    double best = 0;
    for (int r = 0; r < plan.reps + 1; ++r) {
      const int count = plan.messages(size);
      const auto start = Clock::now();
      for (int m = 0; m < count; ++m) {
        if (!writeAll(fd, out.data(), size)) return unavailable("reference stream failed");
      }
      if (!readAll(fd, b, 1)) return unavailable("reference ack failed");
      const double secs = elapsed(start);
      if (r > 0) best = std::max(best, double(size) * count * 8 / secs / 1e9);
    }
    n.gbps.push_back(best);
  }
  ::close(fd);
  return n;
}

#if GRAPEVINE_BENCH_NATIVE_REFERENCES
// ---- references: the native tools (runtime/transport/{ucx,ofi}/native_reference.h) --------------
// UCX: Grapevine's endpoints need peer-failure handling, which on UCX 1.13 leaves tcp as the
// loopback transport, so ucx_perftest runs over tcp too (like for like).
Result<Numbers> ucxReference(const Plan& plan) {
  Numbers n;
  GV_ASSIGN_OR_RETURN(
      auto lat, transport::ucx::runPerftest(transport::ucx::PerftestKind::kTagLatency, 8, "tcp",
                                            plan.pingPongs));
  n.latUs = lat.latencyUs;
  for (std::size_t size : plan.sizes) {
    GV_ASSIGN_OR_RETURN(
        auto bw, transport::ucx::runPerftest(transport::ucx::PerftestKind::kTagBandwidth, size,
                                             "tcp", plan.messages(size)));
    n.gbps.push_back(bw.bytesPerSecond * 8 / 1e9);
  }
  return n;
}
// libfabric: fi_pingpong is a ping-pong, so its bandwidth is round-trip bound (no messages in
// flight).
Result<Numbers> libfabricReference(const Plan& plan) {
  Numbers n;
  GV_ASSIGN_OR_RETURN(auto lat, transport::ofi::runPingpong(8, "tcp;ofi_rxm", plan.pingPongs));
  n.latUs = lat.latencyUs;
  for (std::size_t size : plan.sizes) {
    GV_ASSIGN_OR_RETURN(auto bw, transport::ofi::runPingpong(size, "tcp;ofi_rxm",
                                                             std::max(4, plan.messages(size) / 4)));
    n.gbps.push_back(bw.bytesPerSecond * 8 / 1e9);
  }
  return n;
}
#endif

// ---- the reference table: one row per backend ---------------------------------------------------

struct Reference {
  std::string backend;
  std::string name;  // what was measured, for the report
  std::function<Result<Numbers>(const Plan&)> run;
};

std::vector<Reference> references() {
  return {
    {"tcp", "blocking sockets",
     [](const Plan& plan) {
       return runPair<Numbers>(
           false, [&](int r, int w) { return tcpReferenceServer(plan, r, w); },
           [&](int r, int w) { return tcpReferenceClient(plan, r, w); });
     }},
#if GRAPEVINE_BENCH_NATIVE_REFERENCES
        {"ucx", "ucx_perftest tag_lat/tag_bw (UCX_TLS=tcp)", ucxReference},
        {"libfabric", "fi_pingpong -e rdm -m tagged (tcp;ofi_rxm)", libfabricReference},
#endif
  };
}

// Names of Plan::security's modes.
constexpr const char* kSecurityModes[] = {"off", "mac", "encrypt"};

// The cipher of a row of security mode `mode` (kSecurityModes' index): MAC-only seals are always
// ChaCha20-Poly1305, encrypted ones use the plan's.
std::string_view rowCipher(const Plan& plan, std::size_t mode) {
  return security::cipherName(mode == 2 ? plan.cipher : security::Cipher::kChaCha20Poly1305);
}

// The --json rows: 8-byte latency, bandwidth per size, and with --security each mode's bandwidth
// and its ratio to "off".
nlohmann::json benchRows(const Plan& plan, const Numbers& ours, const std::optional<Numbers>& ref,
                         const std::string& refName, const std::vector<Numbers>& secured) {
  nlohmann::json rows = nlohmann::json::array();
  auto orNull = [](bool has, double v) {
    return has ? nlohmann::json(v) : nlohmann::json(nullptr);
  };
  rows.push_back({{"backend", plan.backend},
                  {"bytes", 8},
                  {"grapevine_gbps", nullptr},
                  {"reference_gbps", nullptr},
                  {"grapevine_lat_us", ours.latUs},
                  {"reference_lat_us", orNull(ref.has_value(), ref ? ref->latUs : 0)},
                  {"reference", refName}});
  for (std::size_t i = 0; i < plan.sizes.size(); ++i) {
    rows.push_back({{"backend", plan.backend},
                    {"bytes", plan.sizes[i]},
                    {"grapevine_gbps", ours.gbps[i]},
                    {"reference_gbps", orNull(ref.has_value(), ref ? ref->gbps[i] : 0)},
                    {"grapevine_lat_us", nullptr},
                    {"reference_lat_us", nullptr},
                    {"in_flight", plan.window},
                    {"messages", plan.messages(plan.sizes[i])},
                    {"reference", refName}});
  }
  for (std::size_t m = 0; m < secured.size(); ++m) {
    for (std::size_t i = 0; i < plan.sizes.size(); ++i) {
      rows.push_back({{"backend", plan.backend},
                      {"bytes", plan.sizes[i]},
                      {"security", kSecurityModes[m + 1]},
                      {"cipher", rowCipher(plan, m + 1)},
                      {"grapevine_gbps", secured[m].gbps[i]},
                      {"security_off_gbps", ours.gbps[i]},
                      {"ratio_to_off", secured[m].gbps[i] / ours.gbps[i]},
                      {"in_flight", plan.window},
                      {"messages", plan.messages(plan.sizes[i])}});
    }
  }
  return rows;
}

// The same as text.
void printBench(const Plan& plan, const Numbers& ours, const std::optional<Numbers>& ref,
                const std::string& refName, const std::vector<Numbers>& secured) {
  std::cout << "backend " << plan.backend << ", reference: " << refName << "\n";
  std::cout << std::fixed << std::setprecision(2);
  std::cout << "  latency 8 B      grapevine " << ours.latUs << " us";
  if (ref) std::cout << "   reference " << ref->latUs << " us   ratio " << ours.latUs / ref->latUs;
  std::cout << "\n";
  for (std::size_t i = 0; i < plan.sizes.size(); ++i) {
    std::cout << "  bandwidth " << std::setw(8) << plan.sizes[i] << " B  grapevine " << ours.gbps[i]
              << " Gb/s";
    if (ref)
      std::cout << "   reference " << ref->gbps[i] << " Gb/s   ratio "
                << ours.gbps[i] / ref->gbps[i];
    std::cout << "\n";
  }
  for (std::size_t m = 0; m < secured.size(); ++m) {
    for (std::size_t i = 0; i < plan.sizes.size(); ++i) {
      std::cout << "  security " << std::setw(7) << kSecurityModes[m + 1] << " " << std::setw(8)
                << plan.sizes[i] << " B  grapevine " << secured[m].gbps[i]
                << " Gb/s   ratio to off " << secured[m].gbps[i] / ours.gbps[i] << "   ("
                << rowCipher(plan, m + 1) << ")\n";
    }
  }
}
}  // namespace

Command registerBenchTransport(CLI::App& root) {
  auto* app = benchApp(root)->add_subcommand(
      "transport",
      "Latency and bandwidth of a transport between two processes, against its native reference");
  auto backend = std::make_shared<std::string>("tcp");
  auto json = std::make_shared<bool>(false);
  auto busyPoll = std::make_shared<bool>(false);
  auto quick = std::make_shared<bool>(false);
  app->add_option("--backend", *backend, "inproc | tcp | ucx | libfabric")->capture_default_str();
  app->add_flag("--json", *json,
                "Print one JSON list: one object per (backend, size). stdout has nothing else: "
                "the transport's and the native tools' own output go to a log file "
                "($TMPDIR/grapevine-native-tools-<pid>.log, named on stderr)");
  app->add_flag("--busy-poll", *busyPoll,
                "Spin instead of sleeping between messages (transport.busy_poll)");
  app->add_flag("--quick", *quick, "Fewer iterations (for tests)");
  auto withSecurity = std::make_shared<bool>(false);
  app->add_flag("--security", *withSecurity,
                "Also measure with security.key_file (MAC-only) and security.encrypt, in the same "
                "run: rows with \"security\": \"mac\" / \"encrypt\" and their ratio to \"off\"");
  return Command{
      app, [=] {
        Plan plan;
        plan.backend = *backend;
        plan.busyPoll = *busyPoll;
        if (*quick) {
          plan.pingPongs = 200;
          plan.warmupPingPongs = 20;
          plan.reps = 1;
          plan.sizes = {64 << 10, 4 << 20};
        }
        bool known = false;
        for (const auto& b : transport::backends()) {
          if (b.name != plan.backend) continue;
          known = true;
          if (!b.usable) {
            std::cerr << "bench transport: " << b.name << " is not usable here: " << b.reason
                      << "\n";
            return kExitFailure;
          }
        }
        if (!known) {
          std::cerr << "bench transport: unknown backend '" << plan.backend << "'\n";
          return kExitBadInput;
        }
        const std::string log = transport::native_tool::logPath();
        std::cerr << "bench transport: output of the processes measured goes to " << log << "\n";
        std::optional<Numbers> ref;
        std::string refName = "none";
        Result<Numbers> ours = internalError("not run");
        std::vector<Numbers> secured;  // --security: MAC-only, encrypted
        {
          const StdoutToLog quiet(log);
          ours = runPair<Numbers>(
              plan.backend == "inproc", [&](int r, int w) { return grapevineServer(plan, r, w); },
              [&](int r, int w) { return grapevineClient(plan, r, w); });
          if (!ours.isOk()) {
            std::cerr << "bench transport: " << ours.status().toString() << "\n";
            return kExitFailure;
          }
          for (int mode = 1; *withSecurity && mode <= 2; ++mode) {
            Plan sp = plan;
            sp.security = mode;
            sp.key = security::randomKey();  // before the fork: both processes share it
            auto res = runPair<Numbers>(
                sp.backend == "inproc", [&](int r, int w) { return grapevineServer(sp, r, w); },
                [&](int r, int w) { return grapevineClient(sp, r, w); });
            if (!res.isOk()) {
              std::cerr << "bench transport: security " << mode << ": " << res.status().toString()
                        << "\n";
              return kExitFailure;
            }
            secured.push_back(std::move(res).value());
          }
          for (const Reference& r : references()) {
            if (r.backend != plan.backend) continue;
            auto res = r.run(plan);
            if (!res.isOk()) {
              std::cerr << "bench transport: reference " << r.name
                        << " failed: " << res.status().toString() << "\n";
              return kExitFailure;
            }
            ref = std::move(res).value();
            refName = r.name;
          }
        }
        const nlohmann::json rows = benchRows(plan, *ours, ref, refName, secured);
        if (*json) {
          std::cout << rows.dump(2) << "\n";
          return kExitOk;
        }
        printBench(plan, *ours, ref, refName, secured);
        return kExitOk;
      }};
}

}  // namespace grapevine::cli
