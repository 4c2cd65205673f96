// The one Catch2 main shared by every test binary. Beyond Catch2's own main: when every test case
// that ran skipped itself (GV_SKIP, tests/test_util/skip.h) and nothing failed, the binary exits
// with GRAPEVINE_SKIP_RETURN_CODE so that ctest reports it as skipped, never as passed.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#include <iostream>

#include "tests/test_util/skip.h"

namespace {

// Counts the test cases that ran (a case with sections ends once).
struct RanCounter : Catch::TestEventListenerBase {
  using TestEventListenerBase::TestEventListenerBase;
  static int& ran() {
    static int n = 0;
    return n;
  }
  void testCaseEnded(const Catch::TestCaseStats& stats) override {
    ++ran();
    TestEventListenerBase::testCaseEnded(stats);
  }
};

}  // namespace

CATCH_REGISTER_LISTENER(RanCounter)

int main(int argc, char* argv[]) {
  const int result = Catch::Session().run(argc, argv);
  const auto skipped = static_cast<int>(grapevine::test_util::skippedTestCases().size());
  if (skipped > 0) {
    std::cout << skipped << " of " << RanCounter::ran() << " test cases skipped:";
    for (const auto& [name, why] : grapevine::test_util::skippedTestCases())
      std::cout << " \"" << name << "\" (" << why << ")";
    std::cout << std::endl;
  }
#ifdef GRAPEVINE_SKIP_RETURN_CODE
  if (result == 0 && skipped > 0 && skipped == RanCounter::ran()) return GRAPEVINE_SKIP_RETURN_CODE;
#endif
  return result;
}
