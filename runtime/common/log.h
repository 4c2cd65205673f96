// Minimal leveled logging to stderr: "[grapevine peer 3 12.345s] warn: neighbour 4 is suspect".
// Thread-safe (one write per line). The level and the peer prefix are set once at start-up.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace grapevine::log {

enum class Level { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3, kOff = 4 };

void setLevel(Level level);
Level level();
// The level names as configs (`run.log_level`) and log lines spell them: "debug", "info", "warn",
// "error", "off", in Level order. levelNames() is the one table; the config schema lists it.
std::string_view levelName(Level level);
// The level named `text`, or nullopt for anything not in levelNames().
std::optional<Level> parseLevel(std::string_view text);
const std::vector<std::string_view>& levelNames();
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

// How a message that someone else can trigger at will (a stranger's connections, forged frames, a
// neighbour's malformed messages) is logged: the first occurrence at once, then at most one line
// per `interval`, each telling how many were not logged since the last. Not thread-safe (one owner:
// a loop thread or a lock).
class Throttle {
 public:
  explicit Throttle(std::chrono::steady_clock::duration interval = std::chrono::seconds(1))
      : interval_(interval) {}
  // Counts one occurrence; true when it is to be logged.
  bool due();
  // " (N more since the last line)" when occurrences were not logged before this one, else "".
  // Meaningful right after due() returned true.
  std::string skipped() const;
  // Every occurrence counted.
  std::uint64_t total() const { return total_; }

 private:
  std::chrono::steady_clock::duration interval_;
  std::chrono::steady_clock::time_point last_{};
  std::uint64_t total_ = 0;
  std::uint64_t quiet_ = 0;    // not logged since the last line
  std::uint64_t skipped_ = 0;  // quiet_ when the last line was due
};

}  // namespace grapevine::log
