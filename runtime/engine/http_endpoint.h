// A minimal HTTP/1.x server for one path (the peers' Prometheus /metrics), on a thread of its own,
// with bounds a stranger cannot stretch: the endpoint sits outside the pre-shared key's protection.
// civetweb (prometheus-cpp's server) gave each connection a thread for up to 30 s, so 100 idle
// connections made every scrape time out; here at most `maxClients` connections are held, a new
// one pushes out the oldest (an idle flood cannot keep a scraper out: the scraper's connection is
// the newest when it sends its request), a connection has `requestTimeout` to send its request and
// `maxRequestBytes` for it, and one GET gets one answer, then the connection closes. Out of
// descriptors it backs off as the peers' listeners do (transport/accept_bounds.h).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "runtime/common/status.h"

namespace grapevine::engine {

class HttpEndpoint {
 public:
  struct Options {
    std::string host;  // numeric IPv4
    int port = 0;
    std::string path = "/metrics";
    std::string contentType = "text/plain; version=0.0.4; charset=utf-8";
    int maxClients = 8;
    std::chrono::milliseconds requestTimeout{2000};
    std::size_t maxRequestBytes = 8192;
  };
  // The body of a GET of the path, made on the server's thread for each request.
  using Body = std::function<std::string()>;

  // Listens on host:port (kUnavailable naming it when that fails) and serves until destroyed.
  static Result<std::unique_ptr<HttpEndpoint>> start(Options options, Body body);
  // Stops the thread and closes every socket: once it returns the port refuses connections.
  ~HttpEndpoint();
  HttpEndpoint(const HttpEndpoint&) = delete;
  HttpEndpoint& operator=(const HttpEndpoint&) = delete;

  // Connections closed to make room for newer ones, or for their time or size.
  std::uint64_t evicted() const { return evicted_.load(); }

 private:
  HttpEndpoint(Options options, Body body, int listenFd, int wakeFd);
  void run();

  const Options options_;
  const Body body_;
  const int listenFd_;
  const int wakeFd_;  // an eventfd: written by the destructor to stop run()
  std::atomic<std::uint64_t> evicted_{0};
  std::thread thread_;
};

}  // namespace grapevine::engine
