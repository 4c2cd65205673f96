#include "runtime/common/log.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <iterator>
#include <mutex>

#include "runtime/common/elapsed.h"
#include "runtime/common/enum_names.h"

namespace grapevine::log {
namespace {
std::atomic<Level> g_level{Level::kInfo};
std::mutex g_mu;
std::string g_prefix;  // guarded by g_mu
const auto g_start = std::chrono::steady_clock::now();
// Indexed by Level (kDebug = 0 ... kOff = 4). Constant, so write() may use it at any time, even
// during static destruction.
constexpr std::string_view kLevelNames[] = {"debug", "info", "warn", "error", "off"};
}  // namespace

void setLevel(Level level) { g_level = level; }
Level level() { return g_level; }

const std::vector<std::string_view>& levelNames() {
  static const std::vector<std::string_view> names = enumNameList(kLevelNames);
  return names;
}

std::string_view levelName(Level level) { return enumName(kLevelNames, level, "?"); }

std::optional<Level> parseLevel(std::string_view text) {
  return parseEnum<Level>(kLevelNames, text);
}

void setPrefix(std::string prefix) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_prefix = std::move(prefix);
}

void write(Level level, std::string_view message) {
  const double t = secondsSince(g_start);
  std::lock_guard<std::mutex> lock(g_mu);
  const std::string_view name = levelName(level);
  std::fprintf(stderr, "[grapevine%s%s %.3fs] %.*s: %.*s\n", g_prefix.empty() ? "" : " ",
               g_prefix.c_str(), t, static_cast<int>(name.size()), name.data(),
               static_cast<int>(message.size()), message.data());
}

bool Throttle::due() {
  ++total_;
  const auto now = std::chrono::steady_clock::now();
  if (total_ > 1 && now - last_ < interval_) {
    ++quiet_;
    return false;
  }
  last_ = now;
  skipped_ = quiet_;
  quiet_ = 0;
  return true;
}

std::string Throttle::skipped() const {
  return skipped_ == 0 ? std::string()
                       : " (" + std::to_string(skipped_) + " more since the last line)";
}

}  // namespace grapevine::log
