#!/usr/bin/env bash
# Flakiness check (issue 14): run the README's test suite N times in a row (default 20)
# and print how many runs passed. A deterministic suite passes N of N.
# Usage: bash scripts/repeat_tests.sh [N] [pytest args...]   e.g. bash scripts/repeat_tests.sh 5 tests/test_synthesis_taccl.py
set -uo pipefail
cd "$(dirname "$0")/.."
runs=${1:-20}
shift || true
if [ $# -eq 0 ]; then set -- tests simcoll gpu; fi
bash scripts/setup.sh
passed=0
for i in $(seq 1 "$runs"); do
  start=$(date +%s)
  if .venv/bin/python -m pytest -n 2 -q -p no:cacheprovider "$@" > "/tmp/simcoll-repeat-$i.log" 2>&1; then
    passed=$((passed + 1)); verdict=pass
  else
    verdict="FAIL (see /tmp/simcoll-repeat-$i.log)"
  fi
  echo "run $i/$runs: $verdict, $(( $(date +%s) - start )) s"
done
echo "passed $passed of $runs runs"
[ "$passed" -eq "$runs" ]
