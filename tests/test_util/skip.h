// Skipping one test case, visibly (Catch2 2.x has no SKIP): GV_SKIP("why") prints a warning
// "skipped: why" (Catch2 always prints warnings) and returns from the calling TEST_CASE only; the
// other cases of the binary still run.
//
// ctest sees a skip through the binary's exit code: when every test case that ran was skipped and
// nothing failed, the shared main (tests/catch_main.cc) exits with GRAPEVINE_SKIP_RETURN_CODE (77),
// which ctest reports as "Skipped". So a case that may skip gets a ctest entry of its own (a Catch2
// test spec, e.g. a tag, in the entry's arguments): then ctest shows exactly that case as skipped.
//
// A whole-binary skip (std::exit(77) before any case) stays right only where every case needs the
// missing part, e.g. CUDA without a device.
#pragma once

#include <catch2/catch.hpp>
#include <set>
#include <string>

namespace grapevine::test_util {

// Names of the test cases that skipped themselves in this run (read by the main).
inline std::set<std::string>& skippedTestCases() {
  static std::set<std::string> names;
  return names;
}

inline void noteSkipped() {
  skippedTestCases().insert(Catch::getResultCapture().getCurrentTestName());
}

}  // namespace grapevine::test_util

// Ends the current TEST_CASE as skipped. Use directly in the TEST_CASE body (it returns from the
// enclosing function).
#define GV_SKIP(why)                       \
  do {                                     \
    WARN("skipped: " << why);              \
    ::grapevine::test_util::noteSkipped(); \
    return;                                \
  } while (false)
