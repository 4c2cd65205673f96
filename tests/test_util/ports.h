// Free TCP ports on 127.0.0.1 for tests that run peers: peers.base_port = p gives rank r the
// control port p + r, so a run of n peers needs p .. p + n - 1 free.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <vector>

namespace grapevine::test_util {

// A base port p with p .. p + count - 1 free right now (bound and released again). Another process
// may take them before the peers do; the kernel hands out ephemeral ports in a cycle, so that is
// unlikely within a test's lifetime.
inline int freeBasePort(int count) {
  for (int attempt = 0; attempt < 100; ++attempt) {
    std::vector<int> sockets;
    int base = -1;
    bool ok = true;
    for (int k = 0; k < count && ok; ++k) {
      const int s = socket(AF_INET, SOCK_STREAM, 0);
      REQUIRE(s >= 0);
      sockets.push_back(s);
      sockaddr_in addr{};
      addr.sin_family = AF_INET;
      addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      // The first port from the kernel, the others right after it.
      addr.sin_port = k == 0 ? 0 : htons(static_cast<std::uint16_t>(base + k));
      socklen_t len = sizeof addr;
      ok = (k == 0 || base + k <= 65535) &&
           bind(s, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
           getsockname(s, reinterpret_cast<sockaddr*>(&addr), &len) == 0;
      if (ok && k == 0) base = ntohs(addr.sin_port);
    }
    for (int s : sockets) close(s);
    if (ok) return base;
  }
  FAIL("no " << count << " consecutive free ports on 127.0.0.1");
  return -1;
}

}  // namespace grapevine::test_util
