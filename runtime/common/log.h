// Minimal leveled logging to stderr: "[grapevine peer 3 12.345s] warn: neighbour 4 is suspect".
// Thread-safe (one write per line). The level and the peer prefix are set once at start-up.
#pragma once

#include <sstream>
#include <string>
#include <string_view>

namespace grapevine::log {

enum class Level { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3, kOff = 4 };

void setLevel(Level level);
Level level();
// Parses "debug" | "info" | "warn" | "error" | "off"; returns false on anything else.
bool parseLevel(std::string_view text, Level* out);
// A short tag printed on every line, e.g. "peer 3".
void setPrefix(std::string prefix);
void write(Level level, std::string_view message);

namespace detail {
template <typename... Args>
std::string concat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
}  // namespace detail

template <typename... Args>
void debug(const Args&... a) {
  if (level() <= Level::kDebug) write(Level::kDebug, detail::concat(a...));
}
template <typename... Args>
void info(const Args&... a) {
  if (level() <= Level::kInfo) write(Level::kInfo, detail::concat(a...));
}
template <typename... Args>
void warn(const Args&... a) {
  if (level() <= Level::kWarn) write(Level::kWarn, detail::concat(a...));
}
template <typename... Args>
void error(const Args&... a) {
  if (level() <= Level::kError) write(Level::kError, detail::concat(a...));
}

}  // namespace grapevine::log
