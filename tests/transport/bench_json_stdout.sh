#!/bin/sh
# `grapevine bench transport --json` prints only JSON on stdout: the processes it measures print
# to a log (named on stderr), never into the JSON. Usage: bench_json_stdout.sh GRAPEVINE BACKEND [RUNS]
# Each run's stdout alone must parse (jq) as the documented list: latency row + one row per size.
set -u
bin=$1
backend=$2
runs=${3:-1}
command -v jq >/dev/null 2>&1 || { echo "skipped: no jq (tools/install-deps)"; exit 77; }
i=0
while [ "$i" -lt "$runs" ]; do
  i=$((i + 1))
  out=$("$bin" bench transport --backend "$backend" --quick --json 2>/tmp/gv-bench-json-stderr.$$)
  rc=$?
  if [ "$rc" -ne 0 ]; then
    echo "run $i: exit $rc"; cat /tmp/gv-bench-json-stderr.$$; rm -f /tmp/gv-bench-json-stderr.$$
    exit 1
  fi
  if ! printf '%s\n' "$out" | jq -e 'type == "array" and length == 3
      and all(.[]; .backend == "'"$backend"'" and has("reference_gbps") and has("grapevine_lat_us"))' \
      >/dev/null; then
    echo "run $i: stdout is not the JSON list:"; printf '%s\n' "$out"
    rm -f /tmp/gv-bench-json-stderr.$$
    exit 1
  fi
  grep -q "output of the processes measured goes to" /tmp/gv-bench-json-stderr.$$ ||
    { echo "run $i: stderr does not name the log"; cat /tmp/gv-bench-json-stderr.$$; exit 1; }
  echo "run $i: stdout parses as JSON"
done
rm -f /tmp/gv-bench-json-stderr.$$
