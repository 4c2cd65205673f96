#include "runtime/engine/http_endpoint.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <list>
#include <vector>

#include "runtime/transport/accept_bounds.h"

namespace grapevine::engine {
namespace {

using Clock = std::chrono::steady_clock;

struct Client {
  int fd = -1;
  Clock::time_point deadline;
  std::string in;          // the request so far
  std::string out;         // the answer, once the request is whole
  std::size_t sent = 0;    // of out
  bool answering = false;  // out is set: writing, then closing
};

std::string answer(int code, const char* reason, const std::string& type, const std::string& body) {
  return "HTTP/1.1 " + std::to_string(code) + " " + reason + "\r\nContent-Type: " + type +
         "\r\nContent-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" +
         body;
}

}  // namespace

Result<std::unique_ptr<HttpEndpoint>> HttpEndpoint::start(Options options, Body body) {
  const std::string where = options.host + ":" + std::to_string(options.port);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(options.port));
  if (inet_pton(AF_INET, options.host.c_str(), &a.sin_addr) != 1) {
    return invalidArgument(where + ": not a numeric IPv4 address");
  }
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return unavailable(where + ": socket: " + std::strerror(errno));
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (::bind(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a) != 0 || ::listen(fd, 64) != 0) {
    const int err = errno;
    ::close(fd);
    return unavailable(where + ": " + std::strerror(err));
  }
  const int wake = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake < 0) {
    const int err = errno;
    ::close(fd);
    return unavailable(where + ": eventfd: " + std::strerror(err));
  }
  return std::unique_ptr<HttpEndpoint>(
      new HttpEndpoint(std::move(options), std::move(body), fd, wake));
}

HttpEndpoint::HttpEndpoint(Options options, Body body, int listenFd, int wakeFd)
    : options_(std::move(options)),
      body_(std::move(body)),
      listenFd_(listenFd),
      wakeFd_(wakeFd),
      thread_([this] { run(); }) {}

HttpEndpoint::~HttpEndpoint() {
  const std::uint64_t one = 1;
  [[maybe_unused]] const ssize_t n = ::write(wakeFd_, &one, sizeof one);
  thread_.join();
  ::close(listenFd_);
  ::close(wakeFd_);
}

void HttpEndpoint::run() {
  std::list<Client> clients;  // oldest first
  Clock::time_point acceptPausedUntil{};
  transport::AcceptBackoff backoff;  // the listeners' policy for a shortage of descriptors
  const auto drop = [&](std::list<Client>::iterator it, bool evict) {
    ::close(it->fd);
    if (evict) ++evicted_;
    return clients.erase(it);
  };
  // The request is whole: the answer (the body only for a GET of the path).
  const auto respond = [&](Client& c) {
    const std::string line = c.in.substr(0, c.in.find("\r\n"));
    const auto sp1 = line.find(' '), sp2 = line.rfind(' ');
    const std::string method = line.substr(0, sp1);
    std::string target = sp1 < sp2 ? line.substr(sp1 + 1, sp2 - sp1 - 1) : "";
    target = target.substr(0, target.find('?'));
    if (method != "GET" || line.compare(sp2 + 1, 5, "HTTP/") != 0) {
      c.out = answer(405, "Method Not Allowed", "text/plain", "GET " + options_.path + "\n");
    } else if (target != options_.path) {
      c.out = answer(404, "Not Found", "text/plain", "see " + options_.path + "\n");
    } else {
      c.out = answer(200, "OK", options_.contentType, body_());
    }
    c.answering = true;
    c.deadline = Clock::now() + std::chrono::seconds(10);  // to write the answer
  };
  std::vector<pollfd> fds;
  for (;;) {
    const auto now = Clock::now();
    for (auto it = clients.begin(); it != clients.end();) {
      it = it->deadline <= now ? drop(it, true) : std::next(it);
    }
    fds.clear();
    fds.push_back({wakeFd_, POLLIN, 0});
    const bool accepting = now >= acceptPausedUntil;
    fds.push_back({accepting ? listenFd_ : -1, POLLIN, 0});
    Clock::time_point next = now + std::chrono::seconds(1);
    if (!accepting) next = std::min(next, acceptPausedUntil);
    for (const Client& c : clients) {
      fds.push_back({c.fd, static_cast<short>(c.answering ? POLLOUT : POLLIN), 0});
      next = std::min(next, c.deadline);
    }
    const auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(next - now).count();
    if (::poll(fds.data(), fds.size(), static_cast<int>(std::max<long long>(wait, 0) + 1)) < 0 &&
        errno != EINTR) {
      return;
    }
    if (fds[0].revents) return;  // stopping
    // Clients first (their pollfds follow the listener's, in list order), then new ones.
    std::size_t k = 2;
    for (auto it = clients.begin(); it != clients.end(); ++k) {
      Client& c = *it;
      const short ev = fds[k].revents;
      if (ev == 0) {
        ++it;
        continue;
      }
      if (!c.answering) {
        char buf[2048];
        const ssize_t n = ::recv(c.fd, buf, sizeof buf, 0);
        if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
          ++it;
          continue;
        }
        if (n <= 0) {
          it = drop(it, false);
          continue;
        }
        c.in.append(buf, static_cast<std::size_t>(n));
        if (c.in.find("\r\n\r\n") != std::string::npos) {
          respond(c);
        } else if (c.in.size() > options_.maxRequestBytes) {
          it = drop(it, true);
          continue;
        }
      }
      if (c.answering) {
        const ssize_t n =
            ::send(c.fd, c.out.data() + c.sent, c.out.size() - c.sent, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
          ++it;
          continue;
        }
        if (n < 0 || (c.sent += static_cast<std::size_t>(n)) == c.out.size()) {
          it = drop(it, false);
          continue;
        }
      }
      ++it;
    }
    if (accepting && fds[1].revents) {
      for (;;) {
        const int fd = ::accept4(listenFd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
          // Out of descriptors: stop accepting for a moment rather than spin on the listener.
          if (transport::isAcceptShortage({errno, boost::system::system_category()})) {
            acceptPausedUntil = Clock::now() + backoff.next();
          }
          break;
        }
        backoff.reset();
        if (static_cast<int>(clients.size()) >= options_.maxClients) drop(clients.begin(), true);
        clients.push_back({fd, Clock::now() + options_.requestTimeout, {}, {}, 0, false});
      }
    }
  }
}

}  // namespace grapevine::engine
