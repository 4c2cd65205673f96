// The emulated network end to end on real sockets in real namespaces: rate (iperf3), latency and
// jitter (a UDP echo), loss, isolation, cleanup. Every case needs namespaces: the binary skips (77)
// without root, /dev/net/tun or `ip`. Only the rate case needs iperf3: without it that case alone
// skips (GV_SKIP; its own ctest entry, netemu_rate_test, reports it).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <cerrno>
#include <nlohmann/json.hpp>
#include <thread>

#include "tests/netemu/test_util.h"
#include "tests/test_util/pipes.h"
#include "tests/test_util/skip.h"

using namespace grapevine;
using namespace grapevine::netemu;
using namespace netemu_test;

namespace {

// Late, never early: on a shared 2-core machine a wake-up can be this late (measured: 11 ms at
// worst with two compilers running); the lower bounds are exact.
constexpr double kSchedulingSlackMs = 15.0;

std::unique_ptr<Network> makeNetwork(int peers, LinkSpec spec, std::uint64_t seed = 1) {
  requireNetemu();
  Options o;
  o.peers = peers;
  o.link = [spec](int, int) { return spec; };
  o.seed = seed;
  auto net = Network::create(o);
  INFO((net.isOk() ? std::string() : net.status().toString()));
  REQUIRE(net.isOk());
  return std::move(*net);
}

sockaddr_in endpoint(const std::string& ip, int port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  ::inet_pton(AF_INET, ip.c_str(), &a.sin_addr);
  return a;
}

int udpSocketIn(const Network& net, int rank, int port) {
  auto fd = socketInNamespace(net.namespaceName(rank), AF_INET, SOCK_DGRAM);
  REQUIRE(fd.isOk());
  if (port > 0) {
    sockaddr_in a = endpoint(net.address(rank), port);
    REQUIRE(::bind(*fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  }
  return *fd;
}

using grapevine::test_util::readable;

// Echoes every datagram on `fd` back to its sender until `stop`.
struct Echo {
  std::atomic<bool> stop{false};
  std::thread thread;
  explicit Echo(int fd)
      : thread([this, fd] {
          char buf[2048];
          while (!stop) {
            if (!readable(fd, 50)) continue;
            sockaddr_in from{};
            socklen_t len = sizeof from;
            const ssize_t n =
                ::recvfrom(fd, buf, sizeof buf, 0, reinterpret_cast<sockaddr*>(&from), &len);
            if (n > 0)
              ::sendto(fd, buf, static_cast<size_t>(n), 0, reinterpret_cast<sockaddr*>(&from), len);
          }
        }) {}
  ~Echo() {
    stop = true;
    thread.join();
  }
};

bool listening(pid_t pid, int port) {
  char hex[8];
  std::snprintf(hex, sizeof hex, ":%04X", port);
  for (const char* file : {"/net/tcp", "/net/tcp6"}) {
    std::ifstream in("/proc/" + std::to_string(pid) + file);
    std::string line;
    while (std::getline(in, line)) {
      std::istringstream f(line);
      std::string sl, local, remote, state;
      f >> sl >> local >> remote >> state;
      if (local.size() > 5 && local.substr(local.size() - 5) == hex && state == "0A") return true;
    }
  }
  return false;
}

// iperf3 from rank 0 to rank 1 for `seconds`; returns received Mbit/s and the emulator's CPU %.
std::pair<double, double> iperf(Network& net, int seconds) {
  const std::string addr = net.address(1);
  std::vector<std::string> server = net.execPrefix(1);
  for (const char* a : {"iperf3", "-s", "-B"}) server.push_back(a);
  server.push_back(addr);
  Process srv = Process::start(server, tempPath("iperf-server"));
  for (int i = 0; i < 200 && !listening(srv.pid, 5201); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  REQUIRE(listening(srv.pid, 5201));
  std::vector<std::string> client = net.execPrefix(0);
  for (const char* a : {"iperf3", "-c"}) client.push_back(a);
  client.push_back(addr);
  client.insert(client.end(), {"-t", std::to_string(seconds), "-J"});
  const double cpu0 = cpuSeconds(net.emulatorPid());
  const auto t0 = std::chrono::steady_clock::now();
  Process cli = Process::start(client, tempPath("iperf-client"));
  const int status = cli.wait(seconds + 20);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double cpu = (cpuSeconds(net.emulatorPid()) - cpu0) / wall * 100;
  srv.stop();
  INFO(cli.output());
  REQUIRE(status == 0);
  const auto j = nlohmann::json::parse(cli.output());
  return {j["end"]["sum_received"]["bits_per_second"].get<double>() / 1e6, cpu};
}

}  // namespace

TEST_CASE("rate: iperf3 through a 50 Mbit/s link gets 50 Mbit/s", "[netemu][iperf3]") {
  requireNetemu();
  if (!haveProgram("iperf3")) GV_SKIP_MISSING("tools", "no iperf3 (tools/install-deps)");
  for (double mbit : {50.0, 200.0}) {
    auto net = makeNetwork(2, {mbit, 1, 0, 0});
    const auto [got, cpu] = iperf(*net, 3);
    WARN("link " << mbit << " Mbit/s: iperf3 received " << got << " Mbit/s, emulator CPU " << cpu
                 << "%");
    CHECK(got > 0.9 * mbit);
    CHECK(got < 1.1 * mbit);
    auto s = net->stats(0, 1);
    REQUIRE(s.isOk());
    CHECK(s->packets > 0);
    CHECK(s->bytes > static_cast<std::uint64_t>(0.9 * mbit * 1e6 / 8 * 3));
  }
}

TEST_CASE("latency: 40 ms each way is an 80 ms round trip; jitter spreads it, never reorders",
          "[netemu]") {
  requireNetemu();
  {
    auto net = makeNetwork(2, {0, 40, 0, 0});
    const int server = udpSocketIn(*net, 1, 7000);
    const int client = udpSocketIn(*net, 0, 0);
    Echo echo(server);
    const sockaddr_in to = endpoint(net->address(1), 7000);
    std::vector<double> rtts;
    for (int i = 0; i < 12; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      REQUIRE(::sendto(client, &i, sizeof i, 0, reinterpret_cast<const sockaddr*>(&to),
                       sizeof to) == sizeof i);
      REQUIRE(readable(client, 2000));
      int back = -1;
      REQUIRE(::recv(client, &back, sizeof back, 0) == sizeof back);
      CHECK(back == i);
      rtts.push_back(
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(rtts.begin(), rtts.end());
    WARN("40 ms one way: RTT min " << rtts.front() << " median " << rtts[rtts.size() / 2] << " max "
                                   << rtts.back() << " ms");
    CHECK(rtts.front() >= 80.0);  // never early: the delay is a floor
    CHECK(rtts.front() < 85.0);   // nor inflated: the least disturbed round trip is on time
    CHECK(rtts[rtts.size() / 2] < 80.0 + kSchedulingSlackMs);
    ::close(server);
    ::close(client);
  }
  {
    auto net = makeNetwork(2, {0, 40, 10, 0}, 5);
    const int server = udpSocketIn(*net, 1, 7000);
    const int client = udpSocketIn(*net, 0, 0);
    Echo echo(server);
    const sockaddr_in to = endpoint(net->address(1), 7000);
    std::vector<double> rtts;
    for (int i = 0; i < 12; ++i) {  // one at a time: each round trip draws two fresh jitters
      const auto t0 = std::chrono::steady_clock::now();
      REQUIRE(::sendto(client, &i, sizeof i, 0, reinterpret_cast<const sockaddr*>(&to),
                       sizeof to) == sizeof i);
      REQUIRE(readable(client, 2000));
      int back = -1;
      REQUIRE(::recv(client, &back, sizeof back, 0) == sizeof back);
      rtts.push_back(
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(rtts.begin(), rtts.end());
    WARN("40 (+0-10) ms one way: RTT min " << rtts.front() << " max " << rtts.back() << " ms");
    CHECK(rtts.front() >= 80.0);  // jitter only adds: the latency stays the floor
    // Each way is at most 50 ms; single round trips can still be late on a loaded machine (21 ms
    // seen at load 7 on 2 cores), so the bound is on the median. The model test bounds the jitter
    // exactly.
    CHECK(rtts[rtts.size() / 2] < 100.0 + kSchedulingSlackMs);
    CHECK(rtts.back() - rtts.front() > 5.0);
    // A burst: 300 datagrams 0.2 ms apart (far closer than the jitter) come back in order.
    const int n = 300;
    for (int i = 0; i < n; ++i) {
      REQUIRE(::sendto(client, &i, sizeof i, 0, reinterpret_cast<const sockaddr*>(&to),
                       sizeof to) == sizeof i);
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    std::vector<int> got;
    while (readable(client, 500)) {
      int v;
      if (::recv(client, &v, sizeof v, 0) == sizeof v) got.push_back(v);
    }
    CHECK(got.size() == static_cast<std::size_t>(n));
    CHECK(std::is_sorted(got.begin(), got.end()));
    ::close(server);
    ::close(client);
  }
}

namespace {

struct LossRun {
  int received = 0;
  LinkStats stats;
};

// 2000 datagrams 0 -> 1 over a link with 20% loss (the way back is clean).
LossRun lossRun(std::uint64_t seed, int n) {
  Options o;
  o.peers = 2;
  o.link = [](int from, int) { return LinkSpec{0, 1, 0, from == 0 ? 20.0 : 0.0}; };
  o.seed = seed;
  auto made = Network::create(o);
  REQUIRE(made.isOk());
  auto& net = *made;
  const int server = udpSocketIn(*net, 1, 7001);
  const int client = udpSocketIn(*net, 0, 0);
  // Room for every datagram: the receiver must not be what drops them.
  const int rcvbuf = 8 << 20;
  REQUIRE(::setsockopt(server, SOL_SOCKET, SO_RCVBUFFORCE, &rcvbuf, sizeof rcvbuf) == 0);
  const sockaddr_in to = endpoint(net->address(1), 7001);
  LossRun run;
  auto drain = [&](int timeoutMs) {
    while (readable(server, timeoutMs)) {
      int v;
      if (::recv(server, &v, sizeof v, 0) == sizeof v) ++run.received;
    }
  };
  for (int i = 0; i < n; ++i) {
    REQUIRE(::sendto(client, &i, sizeof i, 0, reinterpret_cast<const sockaddr*>(&to), sizeof to) ==
            sizeof i);
    if (i % 50 == 49) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    drain(0);
  }
  drain(300);
  run.stats = *net->stats(0, 1);
  ::close(server);
  ::close(client);
  return run;
}

}  // namespace

TEST_CASE("loss: 20% of 2000 datagrams are lost, counted, the same ones for the same seed",
          "[netemu]") {
  requireNetemu();
  const int n = 2000;
  const LossRun a = lossRun(11, n);
  WARN("20% loss, seed 11: received " << a.received << " of " << n);
  CHECK(a.received / double(n) > 0.76);
  CHECK(a.received / double(n) < 0.84);
  CHECK(a.stats.packets == static_cast<std::uint64_t>(a.received));
  CHECK(a.stats.packets + a.stats.droppedLoss == static_cast<std::uint64_t>(n));
  CHECK(a.stats.droppedQueue == 0);
  const LossRun b = lossRun(11, n);
  CHECK(b.stats.droppedLoss == a.stats.droppedLoss);
}

TEST_CASE("isolation: unknown addresses are dropped and counted; no host loopback inside",
          "[netemu]") {
  auto net = makeNetwork(2, {});
  const int client = udpSocketIn(*net, 0, 0);
  const sockaddr_in nowhere = endpoint("10.77.0.200", 9);  // rank 199 of a 2-rank network
  REQUIRE(::sendto(client, "x", 1, 0, reinterpret_cast<const sockaddr*>(&nowhere),
                   sizeof nowhere) == 1);
  std::uint64_t unknown = 0;
  for (int i = 0; i < 100 && unknown == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    unknown = *net->unknownDestination(0);
  }
  CHECK(unknown == 1);
  CHECK(*net->unknownDestination(1) == 0);
  CHECK(net->stats(0, 1)->packets == 0);
  // Nothing but 10.77/16 is routed: the outside world is unreachable.
  const sockaddr_in outside = endpoint("192.0.2.1", 9);
  CHECK(::connect(client, reinterpret_cast<const sockaddr*>(&outside), sizeof outside) != 0);
  CHECK(errno == ENETUNREACH);
  ::close(client);

  // A TCP listener on the host's loopback is not the namespace's loopback.
  const int host = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in any = endpoint("127.0.0.1", 0);
  REQUIRE(::bind(host, reinterpret_cast<sockaddr*>(&any), sizeof any) == 0);
  REQUIRE(::listen(host, 4) == 0);
  socklen_t len = sizeof any;
  REQUIRE(::getsockname(host, reinterpret_cast<sockaddr*>(&any), &len) == 0);
  auto inside = socketInNamespace(net->namespaceName(0), AF_INET, SOCK_STREAM);
  REQUIRE(inside.isOk());
  CHECK(::connect(*inside, reinterpret_cast<const sockaddr*>(&any), sizeof any) != 0);
  CHECK(errno == ECONNREFUSED);
  ::close(*inside);
  ::close(host);
}

TEST_CASE("cleanup: no namespace outlives its Network, nor a SIGKILLed creator's next start",
          "[netemu]") {
  requireNetemu();
  const std::string mine = "gv" + std::to_string(::getpid()) + "-";
  pid_t emulator = -1;
  {
    auto net = makeNetwork(3, {});
    CHECK(listNamespaces(mine).size() == 3);
    emulator = net->emulatorPid();
    CHECK(net->emulatorStatus().isOk());
  }
  CHECK(listNamespaces(mine).empty());
  CHECK(!processLives(emulator));

  int pipeFds[2];
  REQUIRE(::pipe(pipeFds) == 0);
  const pid_t child = ::fork();
  if (child == 0) {
    ::close(pipeFds[0]);
    Options o;
    o.peers = 2;
    auto net = Network::create(o);
    const pid_t pids[2] = {net.isOk() ? (*net)->emulatorPid() : -1, 0};
    [[maybe_unused]] const bool sent =
        grapevine::test_util::writeAll(pipeFds[1], pids, sizeof pids);
    ::pause();  // until SIGKILL: no destructor runs
    _exit(0);
  }
  ::close(pipeFds[1]);
  pid_t pids[2] = {-1, -1};
  REQUIRE(readable(pipeFds[0], 20000));
  REQUIRE(grapevine::test_util::readAll(pipeFds[0], pids, sizeof pids));
  ::close(pipeFds[0]);
  REQUIRE(pids[0] > 0);
  const std::string theirs = "gv" + std::to_string(child) + "-";
  CHECK(listNamespaces(theirs).size() == 2);
  ::kill(child, SIGKILL);
  int status;
  ::waitpid(child, &status, 0);
  // The emulator dies with its creator (PR_SET_PDEATHSIG).
  for (int i = 0; i < 200 && processLives(pids[0]); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  CHECK(!processLives(pids[0]));
  CHECK(listNamespaces(theirs).size() == 2);  // left behind ...
  {
    auto net = makeNetwork(1, {});
    CHECK(listNamespaces(theirs).empty());  // ... and removed by the next create()
  }
  CHECK(listNamespaces(mine).empty());
}

TEST_CASE("bad options are refused with a reason", "[netemu]") {
  requireNetemu();
  Options o;
  o.peers = 0;
  auto r = Network::create(o);
  REQUIRE(!r.isOk());
  CHECK(r.status().code() == ErrorCode::kInvalidArgument);
  o.peers = 2;
  o.mtu = 100;
  r = Network::create(o);
  REQUIRE(!r.isOk());
  CHECK(r.status().message().find("mtu") != std::string::npos);
  CHECK(listNamespaces("gv" + std::to_string(::getpid()) + "-").empty());
}
