// Skipping one test case, visibly (Catch2 2.x has no SKIP), and refusing to skip what the run
// requires.
//
// GV_SKIP("why") prints a warning "skipped: why" (Catch2 always prints warnings) and returns from
// the calling TEST_CASE only; the other cases of the binary still run. GV_SKIP_MISSING(cap, "why")
// is the same for a case that needs a capability this machine lacks (a backend, root, a tool) —
// unless GRAPEVINE_TEST_REQUIRE names that capability: then the case fails instead. CI sets the
// variable (.ci/run), so a capability that disappears (a UCX probe that regresses, no root, no
// /dev/net/tun) can never turn into a green run of skips. GV_PART_MISSING(cap, "why") is for a case
// that covers several backends and goes on without the missing one: the part is recorded as
// skipped (or fails when required), never dropped without a word.
//
// Every skip, whole or in part, is appended to the file GRAPEVINE_SKIP_LOG names (tools/test sets
// it): tools/test prints the list and fails on any skip not in tests/expected_skips.txt.
//
// ctest sees a skip through the binary's exit code: when every test case that ran was skipped and
// nothing failed, the shared main (tests/catch_main.cc) exits with GRAPEVINE_SKIP_RETURN_CODE (77),
// which ctest reports as "Skipped". So a case that may skip gets a ctest entry of its own (a Catch2
// test spec, e.g. a tag, in the entry's arguments): then ctest shows exactly that case as skipped.
//
// A whole-binary skip (exitMissing() before any case) stays right only where every case needs the
// missing part, e.g. CUDA without a device.
#pragma once

#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>

namespace grapevine::test_util {

// The capabilities GRAPEVINE_TEST_REQUIRE may name (comma-separated, or "all" for every one but
// cuda, which needs a GPU no CI machine has).
inline constexpr const char* kCapabilities[] = {"ucx", "libfabric", "netemu",  "root",  "slurm",
                                                "mpi", "torch",     "dataset", "tools", "cuda"};

// Whether GRAPEVINE_TEST_REQUIRE names `cap` (or "all", which covers every capability but cuda).
inline bool capabilityRequired(const std::string& cap) {
  const char* env = std::getenv("GRAPEVINE_TEST_REQUIRE");
  if (env == nullptr) return false;
  std::stringstream list(env);
  std::string item;
  while (std::getline(list, item, ',')) {
    while (!item.empty() && item.front() == ' ') item.erase(item.begin());
    while (!item.empty() && item.back() == ' ') item.pop_back();
    if (item == cap || (item == "all" && cap != "cuda")) return true;
  }
  return false;
}

// This binary's file name, for the skip log.
inline std::string binaryName() {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return "?";
  const std::string path(buf, static_cast<size_t>(n));
  return path.substr(path.find_last_of('/') + 1);
}

// Appends "binary: what: why" (one line) to the file GRAPEVINE_SKIP_LOG names, if any.
inline void logSkip(const std::string& what, const std::string& why) {
  const char* path = std::getenv("GRAPEVINE_SKIP_LOG");
  if (path == nullptr || *path == '\0') return;
  std::string oneLine = why;
  for (char& c : oneLine)
    if (c == '\n') c = ' ';
  std::ofstream(path, std::ios::app) << binaryName() << ": " << what << ": " << oneLine << "\n";
}

// Test cases that skipped themselves in this run, with why (read by the main).
inline std::map<std::string, std::string>& skippedTestCases() {
  static std::map<std::string, std::string> names;
  return names;
}

inline void noteSkipped(const std::string& why) {
  const std::string name = Catch::getResultCapture().getCurrentTestName();
  skippedTestCases()[name] = why;
  logSkip(name, why);
}

// A part of the current case that did not run (a backend of several); the case goes on.
inline void notePartSkipped(const std::string& part, const std::string& why) {
  logSkip(Catch::getResultCapture().getCurrentTestName() + " [" + part + "]", why);
}

// For a binary whose every case needs `cap`: exits 77 (ctest: skipped) with the reason, or 1 when
// GRAPEVINE_TEST_REQUIRE names the capability. Call before any case runs.
[[noreturn]] inline void exitMissing(const std::string& cap, const std::string& why) {
  if (capabilityRequired(cap)) {
    std::cout << "FAILED: GRAPEVINE_TEST_REQUIRE names " << cap << ", which is missing: " << why
              << std::endl;
    std::exit(1);
  }
  std::cout << "skipped: " << why << std::endl;
  logSkip("(whole binary)", why);
#ifdef GRAPEVINE_SKIP_RETURN_CODE
  std::exit(GRAPEVINE_SKIP_RETURN_CODE);
#else
  std::exit(77);
#endif
}

}  // namespace grapevine::test_util

// Ends the current TEST_CASE as skipped. Use directly in the TEST_CASE body (it returns from the
// enclosing function).
#define GV_SKIP(why)                                         \
  do {                                                       \
    std::ostringstream gv_skip_why_;                         \
    gv_skip_why_ << why;                                     \
    WARN("skipped: " << gv_skip_why_.str());                 \
    ::grapevine::test_util::noteSkipped(gv_skip_why_.str()); \
    return;                                                  \
  } while (false)

// Ends the current TEST_CASE as skipped because capability `cap` is missing, or fails it when
// GRAPEVINE_TEST_REQUIRE names `cap`.
#define GV_SKIP_MISSING(cap, why)                                                           \
  do {                                                                                      \
    if (::grapevine::test_util::capabilityRequired(cap)) {                                  \
      FAIL("GRAPEVINE_TEST_REQUIRE names " << (cap) << ", which is missing here: " << why); \
    }                                                                                       \
    GV_SKIP(why);                                                                           \
  } while (false)

// Records that the part `cap` of the current case does not run here (the case goes on), or fails
// the case (and goes on) when GRAPEVINE_TEST_REQUIRE names `cap`.
#define GV_PART_MISSING(cap, why)                                                \
  do {                                                                           \
    std::ostringstream gv_part_why_;                                             \
    gv_part_why_ << why;                                                         \
    if (::grapevine::test_util::capabilityRequired(cap)) {                       \
      FAIL_CHECK("GRAPEVINE_TEST_REQUIRE names "                                 \
                 << (cap) << ", which is missing here: " << gv_part_why_.str()); \
    } else {                                                                     \
      WARN("skipped part " << (cap) << ": " << gv_part_why_.str());              \
      ::grapevine::test_util::notePartSkipped(cap, gv_part_why_.str());          \
    }                                                                            \
  } while (false)
