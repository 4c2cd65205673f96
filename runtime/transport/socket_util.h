// Socket settings and host:port parsing shared by the TCP data backend (tcp/) and the bootstrap
// control connections; they live at the transport root so that neither includes the other.
#pragma once

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <algorithm>
#include <boost/asio/ip/tcp.hpp>
#include <charconv>
#include <string>
#include <string_view>

#include "runtime/common/status.h"

namespace grapevine::transport {

// TCP_NODELAY (frames are small and latency-bound), keepalive probing after a third of the timeout,
// and TCP_USER_TIMEOUT so unacknowledged data fails the socket after `timeoutSeconds` instead of
// the kernel default of ~15 minutes. Best effort: a failing setsockopt is not fatal (the deadlines
// still hold).
inline void configureSocket(boost::asio::ip::tcp::socket& socket, double timeoutSeconds) {
  boost::system::error_code ec;
  socket.set_option(boost::asio::ip::tcp::no_delay(true), ec);
  socket.set_option(boost::asio::socket_base::keep_alive(true), ec);
  const int fd = socket.native_handle();
  const int idle = std::max(1, static_cast<int>(timeoutSeconds / 3));
  const int interval = std::max(1, static_cast<int>(timeoutSeconds / 9));
  const int count = 3;
  const unsigned userTimeoutMs = static_cast<unsigned>(std::max(1.0, timeoutSeconds * 1000.0));
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof interval);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof count);
  ::setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &userTimeoutMs, sizeof userTimeoutMs);
}

// Parses "host:port" (IPv4 literal, "localhost", or "[v6]:port") into an endpoint. Blocking name
// resolution is avoided: only numeric addresses and localhost are accepted.
inline Result<boost::asio::ip::tcp::endpoint> parseEndpoint(std::string_view text) {
  const auto colon = text.rfind(':');
  if (colon == std::string_view::npos || colon == 0) {
    return invalidArgument("address '" + std::string(text) + "' is not host:port");
  }
  std::string host(text.substr(0, colon));
  if (host.size() > 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  if (host == "localhost") host = "127.0.0.1";
  unsigned port = 0;
  const std::string_view portText = text.substr(colon + 1);
  if (std::from_chars(portText.data(), portText.data() + portText.size(), port).ec != std::errc() ||
      port > 65535) {
    return invalidArgument("address '" + std::string(text) + "' has a bad port");
  }
  boost::system::error_code ec;
  auto address = boost::asio::ip::make_address(host, ec);
  if (ec) return invalidArgument("address '" + std::string(text) + "': host must be a numeric IP");
  return boost::asio::ip::tcp::endpoint(address, static_cast<unsigned short>(port));
}

inline std::string formatEndpoint(const boost::asio::ip::tcp::endpoint& ep) {
  const std::string host = ep.address().to_string();
  return (ep.address().is_v6() ? "[" + host + "]" : host) + ":" + std::to_string(ep.port());
}

}  // namespace grapevine::transport
