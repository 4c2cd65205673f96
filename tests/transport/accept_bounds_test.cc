// Bounds on what connecting strangers can make a listener hold (runtime/transport/accept_bounds.h,
// docs/security.md "Bounds"): the bootstrap's control port and the tcp data port hold at most
// kMaxPendingAccepts unidentified connections (the oldest closed), parked tcp sockets are bounded
// alike, and accept() backs off on EMFILE instead of spinning the loop thread. Counts are of this
// process's own descriptors (/proc/self/fd), waits are on progress (counters, the kernel's accept
// queue draining).
#include "runtime/transport/accept_bounds.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/common/subprocess.h"
#include "tests/test_util/pipes.h"
#include "tests/transport/bootstrap_test_util.h"

using namespace grapevine;
using namespace grapevine::transport;
using namespace grapevine::transport::testing;

namespace {

constexpr int kStorm = 100;

int ownFds() {
  int n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) ++n;
  return n;
}

// Connections waiting in the kernel's accept queue of the listening socket on `port` (the
// rx_queue column of its LISTEN row in /proc/net/tcp); -1 when there is no such row.
int acceptQueue(int port) {
  std::ifstream in("/proc/net/tcp");
  std::string line;
  std::getline(in, line);
  while (std::getline(in, line)) {
    std::istringstream f(line);
    std::string sl, local, remote, state, queues;
    f >> sl >> local >> remote >> state >> queues;
    if (state != "0A" || std::stoi(local.substr(local.find(':') + 1), nullptr, 16) != port)
      continue;
    return std::stoi(queues.substr(queues.find(':') + 1), nullptr, 16);
  }
  return -1;
}

// A connection to 127.0.0.1:port that sends `bytes` (maybe none) and then stays silent.
int connectSilent(int port, const std::vector<std::uint8_t>& bytes = {}) {
  const int fd = test_util::dialRaw(static_cast<std::uint16_t>(port));
  REQUIRE(fd >= 0);
  if (!bytes.empty()) REQUIRE(test_util::writeAll(fd, bytes.data(), bytes.size()));
  return fd;
}

int portOf(const std::vector<std::uint8_t>& address) {
  const std::string a(address.begin(), address.end());
  return std::stoi(a.substr(a.rfind(':') + 1));
}

// Lets the loop run the handlers of what the kernel has queued (accepts, reads) until the
// listener on `port` has accepted everything, then a little longer for the reads that follow.
void drainAccepts(Loop& loop, int port) {
  REQUIRE(loop.runUntil([&] { return acceptQueue(port) == 0; }, std::chrono::seconds(10)));
  loop.runUntil([] { return false; }, std::chrono::milliseconds(100));
}

}  // namespace

TEST_CASE("bootstrap: at most kMaxPendingAccepts silent connections are held, oldest closed") {
  Options o;
  o.backend = "tcp";
  // Rank 1 waits for neighbour 0, which never comes; strangers connect and say nothing.
  Cluster c(o, {{}, {0}}, {standardParts(), standardParts()});
  const int port = c.boots[1]->listenPort();
  const int before = ownFds();
  std::vector<int> clients;
  for (int i = 0; i < kStorm; ++i) clients.push_back(connectSilent(port));
  // The bound: kMaxPendingAccepts, plus one for the one neighbour of lower rank.
  const std::size_t limit = kMaxPendingAccepts + 1;
  const std::uint64_t evictions = kStorm - limit;
  REQUIRE(c.loop.runUntil(
      [&] {
        const auto r = c.boots[1]->rejected();
        const auto it = r.find("pending_limit");
        return it != r.end() && it->second >= evictions;
      },
      std::chrono::seconds(10)));
  drainAccepts(c.loop, port);
  const int held = ownFds() - before - kStorm;  // the bootstrap's side of the connections
  INFO("held " << held);
  CHECK(held <= static_cast<int>(limit));
  CHECK(c.boots[1]->rejected().at("pending_limit") == evictions);
  CHECK(!c.results[1].has_value());  // strangers do not end the bootstrap
  for (int fd : clients) ::close(fd);
  c.boots[1]->cancel();
  REQUIRE(c.run(1.0));
}

TEST_CASE("tcp data port: silent and parked connections are bounded, oldest closed") {
  Loop loop;
  Options o;
  o.backend = "tcp";
  o.rank = 99;               // every rank below dials it: parked sockets are possible for 0..98
  o.ioTimeoutSeconds = 600;  // no deadline closes anything during the test
  auto ctx = makeContext(loop, o);
  REQUIRE(ctx.isOk());
  const int port = portOf((*ctx)->localAddress());
  const int before = ownFds();
  std::vector<int> clients;
  // Silent ones, then valid hellos ("GVTD", version 1) claiming ranks 0..kStorm-1 (99 and above
  // are not ranks that dial rank 99: closed at once).
  for (int i = 0; i < kStorm; ++i) clients.push_back(connectSilent(port));
  drainAccepts(loop, port);
  int held = ownFds() - before - kStorm;
  INFO("silent: held " << held);
  CHECK(held <= static_cast<int>(kMaxPendingAccepts));
  for (int i = 0; i < kStorm; ++i) {
    std::vector<std::uint8_t> hello = {'G', 'V', 'T', 'D', 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    hello[8] = static_cast<std::uint8_t>(i);
    clients.push_back(connectSilent(port, hello));
  }
  drainAccepts(loop, port);
  held = ownFds() - before - 2 * kStorm;
  INFO("silent and parked: held " << held);
  // The silent ones still pending (at most 32, closed oldest first as the hellos came) and at
  // most 32 parked.
  CHECK(held <= static_cast<int>(2 * kMaxPendingAccepts));
  for (int fd : clients) ::close(fd);
  (*ctx)->close();
  loop.runUntil([] { return false; }, std::chrono::milliseconds(20));
}

TEST_CASE("accept backs off on EMFILE: the loop thread stays idle while out of descriptors") {
  // In a child of its own: it runs out of descriptors on purpose.
  int ports[2];
  REQUIRE(::pipe(ports) == 0);
  auto child = Subprocess::forkCall([&]() -> int {
    ::close(ports[0]);
    Loop loop;
    Options o;
    o.backend = "tcp";
    o.rank = 1;
    auto ctx = makeContext(loop, o);
    if (!ctx.isOk()) return 10;
    const int port = portOf((*ctx)->localAddress());
    std::vector<int> filler;
    for (int fd; (fd = ::dup(2)) >= 0;) filler.push_back(fd);  // until EMFILE
    if (errno != EMFILE) return 11;
    // The parent connects now; every accept fails with EMFILE until we give descriptors back.
    if (!test_util::writeAll(ports[1], &port, sizeof port)) return 12;
    rusage u0{}, u1{};
    getrusage(RUSAGE_SELF, &u0);
    loop.runUntil([] { return false; }, std::chrono::seconds(2));
    getrusage(RUSAGE_SELF, &u1);
    const double cpu = (u1.ru_utime.tv_sec - u0.ru_utime.tv_sec) +
                       (u1.ru_utime.tv_usec - u0.ru_utime.tv_usec) * 1e-6 +
                       (u1.ru_stime.tv_sec - u0.ru_stime.tv_sec) +
                       (u1.ru_stime.tv_usec - u0.ru_stime.tv_usec) * 1e-6;
    // Descriptors back: the queued connections are accepted after the back-off.
    for (int fd : filler) ::close(fd);
    const bool drained =
        loop.runUntil([&] { return acceptQueue(port) == 0; }, std::chrono::seconds(10));
    (*ctx)->close();
    const int verdict = cpu < 0.2 ? 0 : 20;
    int code = drained ? verdict : 21;
    (void)!::write(ports[1], &code, sizeof code);
    (void)!::write(ports[1], &cpu, sizeof cpu);
    return code;
  });
  REQUIRE(child.isOk());
  ::close(ports[1]);
  int port = 0;
  REQUIRE(test_util::readAll(ports[0], &port, sizeof port));
  std::vector<int> clients;
  for (int i = 0; i < 8; ++i) clients.push_back(connectSilent(port));
  int code = -1;
  double cpu = -1;
  REQUIRE(test_util::readAll(ports[0], &code, sizeof code));
  REQUIRE(test_util::readAll(ports[0], &cpu, sizeof cpu));
  ::close(ports[0]);
  for (int fd : clients) ::close(fd);
  const int status = child->wait();
  WARN("CPU of the loop thread over 2 s out of descriptors: " << cpu << " s");
  CHECK(code == 0);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}
