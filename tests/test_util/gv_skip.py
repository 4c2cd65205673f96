"""Skips in the Python tests, as tests/test_util/skip.h does for the C++ ones.

GRAPEVINE_TEST_REQUIRE (comma list, or "all" for every capability but cuda) names capabilities
whose absence is a failure, not a skip; every skip is appended to the file GRAPEVINE_SKIP_LOG names,
which tools/test checks against tests/expected_skips.txt.
"""

import os
import sys


def required(cap):
    items = [s.strip() for s in os.environ.get("GRAPEVINE_TEST_REQUIRE", "").split(",")]
    return cap in items or ("all" in items and cap != "cuda")


def log_skip(what, why):
    path = os.environ.get("GRAPEVINE_SKIP_LOG")
    if path:
        with open(path, "a") as f:
            f.write(f"{what}: {' '.join(str(why).split())}\n")


def exit_missing(what, cap, why):
    """Ends a whole script: exit 77 (ctest: skipped), or 1 when the run requires `cap`."""
    if required(cap):
        print(f"FAILED: GRAPEVINE_TEST_REQUIRE names {cap}, which is missing: {why}")
        sys.exit(1)
    print(f"skipped: {why}")
    log_skip(f"{what}: (whole script)", why)
    sys.exit(77)
