// Scraping a Prometheus endpoint from tests the way Prometheus does: a plain HTTP GET over a
// socket (no HTTP library) and a parser of the text format's samples and # TYPE lines.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace grapevine::test_util {

// One sample line: name{labels} value.
struct Sample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0.0;
};

// One parsed /metrics answer.
struct Scrape {
  std::map<std::string, std::string> types;  // # TYPE name type
  std::vector<Sample> samples;

  // The samples of `name` whose labels include `match`.
  std::vector<const Sample*> find(const std::string& name,
                                  const std::map<std::string, std::string>& match = {}) const {
    std::vector<const Sample*> out;
    for (const auto& s : samples) {
      if (s.name != name) continue;
      bool all = true;
      for (const auto& [k, v] : match) {
        auto it = s.labels.find(k);
        if (it == s.labels.end() || it->second != v) all = false;
      }
      if (all) out.push_back(&s);
    }
    return out;
  }
  // The one sample of `name` matching `match` (fails the test when there is not exactly one).
  double value(const std::string& name,
               const std::map<std::string, std::string>& match = {}) const {
    const auto found = find(name, match);
    INFO(name);
    REQUIRE(found.size() == 1);
    return found.front()->value;
  }
  double sum(const std::string& name) const {
    double total = 0;
    for (const auto* s : find(name)) total += s->value;
    return total;
  }
};

// Parses the Prometheus text format (version 0.0.4) as prometheus-cpp writes it: no timestamps,
// label values without escapes beyond \" \\ \n.
inline Scrape parse(const std::string& body) {
  Scrape out;
  std::istringstream in(body);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    if (line.rfind("# TYPE ", 0) == 0) {
      std::istringstream t(line.substr(7));
      std::string name, type;
      t >> name >> type;
      out.types[name] = type;
      continue;
    }
    if (line[0] == '#') continue;
    Sample s;
    std::size_t i = line.find_first_of("{ ");
    REQUIRE(i != std::string::npos);
    s.name = line.substr(0, i);
    if (line[i] == '{') {
      ++i;
      while (line[i] != '}') {
        const std::size_t eq = line.find('=', i);
        REQUIRE(eq != std::string::npos);
        REQUIRE(line[eq + 1] == '"');
        const std::string key = line.substr(i, eq - i);
        std::string value;
        std::size_t k = eq + 2;
        for (; line[k] != '"'; ++k) {
          if (line[k] == '\\') ++k;
          value += line[k];
        }
        s.labels[key] = value;
        i = k + 1;
        if (line[i] == ',') ++i;
      }
      ++i;
    }
    s.value = std::strtod(line.c_str() + i, nullptr);
    out.samples.push_back(std::move(s));
  }
  return out;
}

// Connects to 127.0.0.1:port; the socket, or -1 with errno set.
inline int connectTo(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  timeval tv{10, 0};  // a guard against a hung server, not a measurement
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    const int e = errno;
    close(fd);
    errno = e;
    return -1;
  }
  return fd;
}

// GET /metrics over HTTP/1.0; the body of a 200 answer, nullopt when the port does not answer.
inline std::optional<std::string> httpGet(int port) {
  const int fd = connectTo(port);
  if (fd < 0) return std::nullopt;
  const std::string request = "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
  if (send(fd, request.data(), request.size(), MSG_NOSIGNAL) !=
      static_cast<ssize_t>(request.size())) {
    close(fd);
    return std::nullopt;
  }
  std::string answer;
  char buf[8192];
  for (;;) {
    const ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    answer.append(buf, static_cast<std::size_t>(n));
  }
  close(fd);
  const auto end = answer.find("\r\n\r\n");
  if (answer.rfind("HTTP/1.", 0) != 0 || end == std::string::npos) return std::nullopt;
  const std::string status = answer.substr(0, answer.find("\r\n"));
  INFO(status);
  REQUIRE(status.find(" 200") != std::string::npos);
  return answer.substr(end + 4);
}

}  // namespace grapevine::test_util
