#!/bin/sh
# Runs a command and checks what it prints, exit code first: a ctest entry through this script fails
# when the command exits non-zero (a crash after its JSON included) or when its stdout is not JSON
# that FILTER holds true for (jq -e). stderr passes through.
#   json_check.sh FILTER COMMAND [ARG ...]
# Exit 77 (ctest: skipped) only without jq, and then 1 when GRAPEVINE_TEST_REQUIRE names "tools".
set -u
filter=$1
shift
if ! command -v jq >/dev/null 2>&1; then
  case ",${GRAPEVINE_TEST_REQUIRE:-}," in
    *,tools,* | *,all,*) echo "FAILED: GRAPEVINE_TEST_REQUIRE names tools, and jq is missing"; exit 1 ;;
  esac
  echo "skipped: no jq (tools/install-deps)"
  [ -n "${GRAPEVINE_SKIP_LOG:-}" ] && echo "json_check.sh: $*: no jq" >>"$GRAPEVINE_SKIP_LOG"
  exit 77
fi
out=$(mktemp)
trap 'rm -f "$out"' EXIT
"$@" >"$out"
rc=$?
cat "$out"
if [ "$rc" -ne 0 ]; then
  echo "json_check.sh: FAILED: '$*' exited with $rc"
  exit 1
fi
if ! jq -e "$filter" "$out" >/dev/null; then
  echo "json_check.sh: FAILED: the output does not satisfy: $filter"
  exit 1
fi
echo "json_check.sh: exit 0 and the output satisfies: $filter"
