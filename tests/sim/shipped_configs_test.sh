#!/usr/bin/env bash
# Every shipped config (configs/*.yaml) trains: `grapevine sim` runs it for 300 rounds (a config
# with a fault schedule: its own run.rounds, where its events happen) and must exit 0 — no
# divergence, no error — with every peer finished (but those a `kill` fault takes) and a finite mean test accuracy above chance.
# Configs whose faults are timed in seconds are for `grapevine launch --emulate` and are listed as
# such. (configs/random16.yaml shipped with a consensus step that diverged at round 190.)
#   tests/sim/shipped_configs_test.sh SOURCE_DIR GRAPEVINE_BIN
set -euo pipefail
src=$1
bin=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failed=0
for cfg in "$src"/configs/*.yaml; do
  name=$(basename "$cfg" .yaml)
  if grep -qE '(^|[[:space:]{,-])at_seconds:' "$cfg"; then
    echo "$name: faults timed in seconds (grapevine launch --emulate), not a simulator config"
    continue
  fi
  n=300
  killed=0
  if "$bin" config "$cfg" | grep -qE '^  events: *\[ *\{'; then
    n=$("$bin" config "$cfg" | sed -n '/^run:/,/^[a-z]/s/^  rounds: *//p')
    # A peer killed for good does not finish; every other one must.
    killed=$("$bin" config "$cfg" | grep -oE 'kind: kill[,}]' | wc -l)
  fi
  rc=0
  "$bin" sim "$cfg" --out "$work/$name" --quiet --threads 2 --set run.rounds="$n" \
    --set workload.eval_every="$n" >"$work/$name.log" 2>&1 || rc=$?
  s="$work/$name/summary.json"
  if [ $rc -ne 0 ] || [ ! -f "$s" ]; then
    echo "FAIL: $name: grapevine sim exit $rc after $n rounds:" >&2
    tail -3 "$work/$name.log" >&2
    failed=1
    continue
  fi
  # Accuracy: the workload's test accuracy (fashion-mnist: 10 classes, chance 0.1); workloads
  # without one (quadratic) report none and are judged by exit status and finished peers.
  if ! jq -e --argjson killed "$killed" '.peers_finished == .peers - $killed and
              (.test_accuracy_mean == null or (.test_accuracy_mean > 0.3 and .test_accuracy_mean <= 1))' \
      "$s" >/dev/null; then
    echo "FAIL: $name: $(jq -c '{peers, peers_finished, test_accuracy_mean}' "$s")" >&2
    failed=1
    continue
  fi
  echo "$name: $n rounds, $(jq -c '{peers_finished, test_accuracy_mean}' "$s")"
done
exit $failed
