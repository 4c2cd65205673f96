"""pytest setup for the Python package's tests (tests/python/CMakeLists.txt runs each file).

A file whose every test skipped exits 77, so ctest reports it as skipped, never as passed. Every
skip is appended to GRAPEVINE_SKIP_LOG (tools/test checks the list), and a capability that
GRAPEVINE_TEST_REQUIRE names (torch, dataset) fails the run when it is missing instead of skipping.
"""

import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)  # gv_testing.py
UTIL = os.path.join(os.path.dirname(HERE), "test_util")
if UTIL not in sys.path:
    sys.path.insert(0, UTIL)  # gv_skip.py

import gv_skip  # noqa: E402
import gv_testing  # noqa: E402


def pytest_configure(config):
    if gv_skip.required("torch"):
        try:
            import torch  # noqa: F401
        except ImportError as e:
            pytest.exit(f"GRAPEVINE_TEST_REQUIRE names torch, which is missing: {e}", returncode=1)
    if gv_skip.required("dataset") and not os.path.isdir(gv_testing.FASHION_DIR):
        pytest.exit(f"GRAPEVINE_TEST_REQUIRE names dataset, which is missing: {gv_testing.FASHION_DIR}",
                    returncode=1)
    if gv_skip.required("dataset") and not os.path.exists(gv_testing.GCIDE_TEXT):
        pytest.exit(f"GRAPEVINE_TEST_REQUIRE names dataset, which is missing: {gv_testing.GCIDE_TEXT}",
                    returncode=1)


def _reason(report):
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return longrepr[2]
    return str(longrepr)


def pytest_runtest_logreport(report):
    if report.skipped and report.when in ("setup", "call"):
        gv_skip.log_skip(report.nodeid, _reason(report))


def pytest_collectreport(report):
    if report.skipped:
        gv_skip.log_skip(report.nodeid + " (whole file)", _reason(report))


def pytest_sessionfinish(session, exitstatus):
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None or exitstatus != 0:
        return
    ran = sum(len(reporter.stats.get(k, [])) for k in ("passed", "failed", "error", "xpassed"))
    if ran == 0 and reporter.stats.get("skipped"):
        session.exitstatus = 77
