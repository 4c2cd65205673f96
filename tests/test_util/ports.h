// Free TCP ports on 127.0.0.1 for tests that run peers: peers.base_port = p gives rank r the
// control port p + r (and data ports after them), so a run of n peers needs p .. p + count - 1
// free.
//
// The ports come from below the kernel's ephemeral range (net.ipv4.ip_local_port_range): a port
// inside it can be taken at any moment as the local port of some peer's outgoing connection, before
// the peer that should listen on it has bound it (seen in CI: "cannot listen on ...: Address
// already in use" with 16 peers starting slowly).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <fstream>
#include <vector>

namespace grapevine::test_util {

// The first port of the kernel's ephemeral range (32768 when it cannot be read).
inline int ephemeralPortsStart() {
  std::ifstream in("/proc/sys/net/ipv4/ip_local_port_range");
  int low = 0;
  int high = 0;
  if (in >> low >> high && low > 1024) return low;
  return 32768;
}

// True when count ports from base on are free right now (each bound and released again).
inline bool portsFree(int base, int count) {
  std::vector<int> sockets;
  bool ok = true;
  for (int k = 0; k < count && ok; ++k) {
    const int s = socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE(s >= 0);
    sockets.push_back(s);
    const int one = 1;
    setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<std::uint16_t>(base + k));
    ok = bind(s, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  }
  for (int s : sockets) close(s);
  return ok;
}

// A base port p with p .. p + count - 1 free right now, between 20000 and the ephemeral range. The
// search starts at a place derived from the process id, so tests that run at the same time look in
// different places; another process may still take the ports before the peers do.
inline int freeBasePort(int count) {
  constexpr int kLow = 20000;
  const int high = ephemeralPortsStart() - count;
  REQUIRE(high > kLow);
  const int span = high - kLow;
  const int start = kLow + static_cast<int>((static_cast<unsigned>(getpid()) * 7919U) % span);
  for (int step = 0; step < span; step += count + 3) {
    const int base = kLow + (start - kLow + step) % span;
    if (portsFree(base, count)) return base;
  }
  FAIL("no " << count << " consecutive free ports on 127.0.0.1 below the ephemeral range");
  return -1;
}

}  // namespace grapevine::test_util
