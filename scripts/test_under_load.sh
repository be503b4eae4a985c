#!/usr/bin/env bash
# The suite on a busy machine: two CPU-bound processes run beside it for as long as it runs, as other
# jobs sharing the cores would. The tests wait on conditions, not on time, so they must pass here too.
#
#   bash scripts/test_under_load.sh                           # the README's test command (scripts/test.sh)
#   bash scripts/test_under_load.sh -n 2 tests/probe/test_watch.py  # pytest alone, with these arguments
#   BURNERS=4 bash scripts/test_under_load.sh -n 2 -m "browser and not perf"  # more load (a -m replaces the default "not perf")
set -euo pipefail
cd "$(dirname "$0")/.."
burners=()
stop_burners() {
  for pid in "${burners[@]}"; do kill "$pid" 2>/dev/null || true; done
}
trap stop_burners EXIT
for _ in $(seq "${BURNERS:-2}"); do
  python3 -c 'while True: pass' &
  burners+=($!)
done
echo "test_under_load: ${#burners[@]} CPU burners running beside the tests (pids ${burners[*]})"
if [ $# -eq 0 ]; then
  bash scripts/test.sh
else
  bash scripts/bootstrap.sh
  .venv/bin/python -m pytest "$@"
fi
