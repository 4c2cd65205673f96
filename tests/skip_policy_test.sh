#!/bin/sh
# The skip policy itself (tests/test_util/skip.h, tools/check-skips): a backend that is not usable
# makes a test skip (77) and log why; under GRAPEVINE_TEST_REQUIRE naming it the same test fails
# (1); tools/check-skips passes expected skips and fails on any other.
#   skip_policy_test.sh SOURCE_DIR CONFORMANCE_BINARY
set -u
src=$1
bin=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail=0
expect() {  # expect WHAT GOT WANT
  if [ "$2" = "$3" ]; then echo "ok    $1"; else echo "FAIL  $1: got $2, want $3"; fail=1; fi
}
# UCX made unusable: UCX_TLS names a transport that does not exist.
export GRAPEVINE_TEST_BACKEND=ucx GRAPEVINE_TEST_TRANSPORT_OPTIONS= UCX_TLS=no-such-transport
GRAPEVINE_SKIP_LOG=$work/skips.log GRAPEVINE_TEST_REQUIRE= "$bin" >"$work/skip.out" 2>&1
expect "unusable ucx: the conformance binary skips" "$?" 77
grep -q "transport_conformance: (whole binary): backend ucx" "$work/skips.log"
expect "the skip is logged with why" "$?" 0
GRAPEVINE_SKIP_LOG=$work/required.log GRAPEVINE_TEST_REQUIRE=tcp,ucx "$bin" >"$work/req.out" 2>&1
expect "GRAPEVINE_TEST_REQUIRE=tcp,ucx: it fails instead" "$?" 1
grep -q "GRAPEVINE_TEST_REQUIRE names ucx" "$work/req.out"
expect "and says which capability is missing" "$?" 0
GRAPEVINE_SKIP_LOG=$work/all.log GRAPEVINE_TEST_REQUIRE=all "$bin" >/dev/null 2>&1
expect "GRAPEVINE_TEST_REQUIRE=all: it fails too" "$?" 1
unset UCX_TLS GRAPEVINE_TEST_BACKEND GRAPEVINE_TEST_TRANSPORT_OPTIONS

# tools/check-skips: the ctest log's skipped entries and the skip log against the expected list.
printf '  1/3 Test #12: cuda_kernels_test ...........***Skipped   0.01 sec\n' >"$work/ctest.log"
printf 'cuda_kernels_test: (whole binary): no CUDA device (none)\n' >"$work/expected.log"
"$src/tools/check-skips" "$work/ctest.log" "$work/expected.log" "$src/tests/expected_skips.txt" >"$work/c1.out"
expect "check-skips: an expected skip passes" "$?" 0
cat "$work/skips.log" >>"$work/expected.log"
"$src/tools/check-skips" "$work/ctest.log" "$work/expected.log" "$src/tests/expected_skips.txt" >"$work/c2.out"
expect "check-skips: the ucx skip is not expected: it fails" "$?" 1
grep -q "UNEXPECTED  transport_conformance: (whole binary): backend ucx" "$work/c2.out"
expect "and names it" "$?" 0
printf '  2/3 Test #15: transport_conformance_ucx_tcp ....***Skipped   0.30 sec\n' >"$work/ctest2.log"
"$src/tools/check-skips" "$work/ctest2.log" /dev/null "$src/tests/expected_skips.txt" >/dev/null
expect "check-skips: a skipped ctest entry not expected fails" "$?" 1
[ "$fail" = 0 ] && echo "all passed"
exit "$fail"
