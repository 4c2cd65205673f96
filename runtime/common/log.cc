#include "runtime/common/log.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>

namespace grapevine::log {
namespace {
std::atomic<Level> g_level{Level::kInfo};
std::mutex g_mu;
std::string g_prefix;  // guarded by g_mu
const auto g_start = std::chrono::steady_clock::now();
}  // namespace

void setLevel(Level level) { g_level = level; }
Level level() { return g_level; }

bool parseLevel(std::string_view text, Level* out) {
  static constexpr std::pair<std::string_view, Level> kNames[] = {{"debug", Level::kDebug},
                                                                  {"info", Level::kInfo},
                                                                  {"warn", Level::kWarn},
                                                                  {"error", Level::kError},
                                                                  {"off", Level::kOff}};
  for (const auto& [name, lvl] : kNames) {
    if (text == name) {
      *out = lvl;
      return true;
    }
  }
  return false;
}

void setPrefix(std::string prefix) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_prefix = std::move(prefix);
}

void write(Level level, std::string_view message) {
  static constexpr const char* kNames[] = {"debug", "info", "warn", "error", "off"};
  const double t =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - g_start).count();
  std::lock_guard<std::mutex> lock(g_mu);
  std::fprintf(stderr, "[grapevine%s%s %.3fs] %s: %.*s\n", g_prefix.empty() ? "" : " ",
               g_prefix.c_str(), t, kNames[static_cast<int>(level)],
               static_cast<int>(message.size()), message.data());
}

}  // namespace grapevine::log
