// peers.rendezvous (runtime/engine/rendezvous.h): peers find each other's published addresses in a
// shared folder, a missing neighbour is named at the deadline, a malformed file is refused, and
// `auto` resolves to a numeric address. The end-to-end use (peers started by srun and mpirun) is
// tests/cluster.
#include "runtime/engine/rendezvous.h"

#include <arpa/inet.h>
#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/test_util/ports.h"

using namespace grapevine;
namespace fs = std::filesystem;

namespace {

std::string freshFolder(const std::string& name) {
  const std::string dir = std::string(GRAPEVINE_BINARY_DIR) + "/rendezvous_test_" + name;
  fs::remove_all(dir);
  return dir;  // not created: rendezvous() creates it
}

// Free control ports for ranks 0-3 (each publishes an address it could bind).
int basePort() {
  static const int base = test_util::freeBasePort(4);
  return base;
}

engine::RendezvousOptions options(const std::string& dir, int rank, std::vector<int> wait) {
  engine::RendezvousOptions o;
  o.dir = dir;
  o.rank = rank;
  o.count = 4;
  o.address = "127.0.0." + std::to_string(rank + 1) + ":" + std::to_string(basePort() + rank);
  o.wait = std::move(wait);
  o.timeoutSeconds = 60;  // a failure guard only: both sides publish at once
  return o;
}

}  // namespace

TEST_CASE("peers on a ring find their neighbours' published addresses") {
  const std::string dir = freshFolder("ring");
  std::vector<Result<std::vector<std::string>>> results(4, invalidArgument("not run"));
  std::vector<std::thread> peers;
  for (int r = 0; r < 4; ++r) {
    peers.emplace_back([&, r] {
      results[r] = engine::rendezvous(options(dir, r, {(r + 1) % 4, (r + 3) % 4}));
    });
  }
  for (auto& t : peers) t.join();
  for (int r = 0; r < 4; ++r) {
    INFO("rank " << r);
    REQUIRE(results[r].isOk());
    const auto& got = *results[r];
    REQUIRE(got.size() == 4);
    CHECK(got[r] == options(dir, r, {}).address);
    CHECK(got[(r + 1) % 4] == options(dir, (r + 1) % 4, {}).address);
    CHECK(got[(r + 3) % 4] == options(dir, (r + 3) % 4, {}).address);
    CHECK(got[(r + 2) % 4].empty());  // not a neighbour: not waited for
  }
  // Only the published files remain: the temporary names were renamed.
  int files = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    CHECK(e.path().filename().string().rfind("rank-", 0) == 0);
    ++files;
  }
  CHECK(files == 4);
}

TEST_CASE("a neighbour that never publishes is named at the deadline") {
  const std::string dir = freshFolder("missing");
  auto o = options(dir, 0, {1, 3});
  o.timeoutSeconds = 0.2;
  auto r = engine::rendezvous(o);
  REQUIRE_FALSE(r.isOk());
  CHECK(r.status().code() == ErrorCode::kDeadlineExceeded);
  CHECK(r.status().message().find("neighbour(s) 1, 3 in " + dir) != std::string::npos);
}

TEST_CASE("a malformed rank file is refused, naming it") {
  const std::string dir = freshFolder("malformed");
  fs::create_directories(dir);
  std::ofstream(dir + "/rank-1") << "no port here\n";
  auto r = engine::rendezvous(options(dir, 0, {1}));
  REQUIRE_FALSE(r.isOk());
  CHECK(r.status().code() == ErrorCode::kInvalidArgument);
  CHECK(r.status().message().find(dir + "/rank-1 holds 'no port here'") != std::string::npos);
}

TEST_CASE("a hostile rank file is refused promptly, its bytes quoted printable") {
  const std::string dir = freshFolder("hostile");
  fs::create_directories(dir);
  const std::string rank1 = dir + "/rank-1";
  const auto refused = [&](const std::string& why) {
    INFO(why);
    auto o = options(dir, 0, {1});
    o.timeoutSeconds = 30;  // a hang would show as the deadline, not as the refusal
    auto r = engine::rendezvous(o);
    REQUIRE_FALSE(r.isOk());
    CHECK(r.status().code() == ErrorCode::kInvalidArgument);
    CHECK_THAT(r.status().message(), Catch::Contains(why));
    fs::remove(rank1);
  };
  SECTION("trailing junk after the port, a port out of range") {
    std::ofstream(rank1) << "127.0.0.1:21001junk\n";
    refused("holds '127.0.0.1:21001junk'");
    std::ofstream(rank1) << "127.0.0.1:70000\n";
    refused("not host:port");
  }
  SECTION("binary bytes are not echoed raw") {
    std::ofstream(rank1) << std::string("\x1b[2J\x01\xff:1", 8) << "\n";
    refused("holds '\\x1b[2J\\x01\\xff:1'");
  }
  SECTION("a link to /dev/zero is not read") {
    fs::create_symlink("/dev/zero", rank1);
    refused("a device, not a regular file");
  }
  SECTION("a FIFO does not hang the peer") {
    REQUIRE(::mkfifo(rank1.c_str(), 0600) == 0);
    refused("a FIFO, not a regular file");
  }
  SECTION("a large file is not read") {
    std::ofstream(rank1) << "127.0.0.1:2100" << std::string(10000, ' ') << "\n";
    refused("at most 4096");
  }
}

TEST_CASE("a port taken on this machine is refused before it is published") {
  const std::string dir = freshFolder("taken");
  auto o = options(dir, 0, {1});
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(basePort()));
  inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  REQUIRE(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  REQUIRE(listen(fd, 1) == 0);
  auto r = engine::rendezvous(o);
  close(fd);
  REQUIRE_FALSE(r.isOk());
  CHECK(r.status().code() == ErrorCode::kUnavailable);
  CHECK(r.status().message().find("cannot listen on " + o.address) != std::string::npos);
  CHECK_FALSE(fs::exists(dir + "/rank-0"));
}

TEST_CASE("a stop request ends the wait") {
  const std::string dir = freshFolder("stop");
  std::atomic<bool> stop{true};
  auto o = options(dir, 0, {1});
  o.stop = &stop;
  auto r = engine::rendezvous(o);
  REQUIRE_FALSE(r.isOk());
  CHECK(r.status().code() == ErrorCode::kCancelled);
}

TEST_CASE("peers.host auto resolves to a numeric IPv4 address; others pass through") {
  auto a = engine::resolveHost("auto");
  REQUIRE(a.isOk());
  in_addr parsed{};
  CHECK(inet_pton(AF_INET, a->c_str(), &parsed) == 1);
  CHECK(*engine::resolveHost("10.1.2.3") == "10.1.2.3");
}
