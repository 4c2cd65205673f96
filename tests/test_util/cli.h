// Running the `grapevine` binary from tests, as a user would: the binary's path, a command with its
// output discarded, a run's summary.json, and whether a transport is usable in this build.
#pragma once

#include <sys/wait.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>

namespace grapevine::test_util {

// A fresh, empty folder GRAPEVINE_BINARY_DIR/<name> for one test's outputs.
inline std::string freshDir(const std::string& name) {
  const std::string dir = std::string(GRAPEVINE_BINARY_DIR) + "/" + name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

inline const std::string& grapevineBin() {
  static const std::string bin = std::string(GRAPEVINE_BINARY_DIR) + "/bin/grapevine";
  return bin;
}

// Runs `cmd` through the shell with stdout and stderr discarded; its exit status (-1: no exit).
inline int runQuiet(const std::string& cmd) {
  const int st = std::system((cmd + " > /dev/null 2>&1").c_str());
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

// The whole text of `path`; empty when it is missing or unreadable (tests poll for files that are
// still to come).
inline std::string readFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

inline nlohmann::json readSummary(const std::string& dir) {
  std::ifstream in(dir + "/summary.json");
  REQUIRE(in);
  return nlohmann::json::parse(in);
}

// `grapevine info --transports` output, and whether it lists `backend` as usable; the text says why
// not, for a skip message.
inline bool transportUsable(const std::string& backend, std::string* text) {
  FILE* info = popen((grapevineBin() + " info --transports").c_str(), "r");
  REQUIRE(info);
  char buf[256];
  text->clear();
  while (std::fgets(buf, sizeof buf, info)) *text += buf;
  pclose(info);
  return text->find(backend + "  usable") != std::string::npos;
}

}  // namespace grapevine::test_util
