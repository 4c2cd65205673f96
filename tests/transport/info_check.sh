#!/bin/sh
# `grapevine info --transports`: exit 0, one line per backend in order (inproc and tcp always
# usable; ucx and libfabric usable or saying why not), and each backend GRAPEVINE_TEST_REQUIRE
# names (ucx, libfabric, or all) usable.  Usage: info_check.sh GRAPEVINE
set -u
out=$("$1" info --transports)
rc=$?
printf '%s\n' "$out"
[ "$rc" -eq 0 ] || { echo "info_check.sh: FAILED: exit $rc"; exit 1; }
# UCX prints its own warnings to stdout ("[time] [host:pid] ... UCX WARN"): only our lines count.
printf '%s\n' "$out" | grep -v '^\[' | awk '
  NR == 1 && $0 != "inproc  usable" { bad = 1 }
  NR == 2 && $0 != "tcp  usable" { bad = 1 }
  NR == 3 && $0 !~ /^ucx  (usable|not usable: .+)$/ { bad = 1 }
  NR == 4 && $0 !~ /^libfabric  (usable|not usable: .+)$/ { bad = 1 }
  END { exit (bad || NR != 4) }' || { echo "info_check.sh: FAILED: not the four documented lines"; exit 1; }
for backend in ucx libfabric; do
  case ",${GRAPEVINE_TEST_REQUIRE:-}," in
    *,"$backend",* | *,all,*)
      printf '%s\n' "$out" | grep -qx "$backend  usable" ||
        { echo "info_check.sh: FAILED: GRAPEVINE_TEST_REQUIRE names $backend, which is not usable"; exit 1; } ;;
  esac
done
echo "info_check.sh: ok"
