#!/usr/bin/env bash
# Quick start, part 2: set up (venv, Debian chromium and node for the browser and page tests) and run
# every test. Nothing is skipped for a missing tool: a run that compared nothing must not pass.
#
# pytest runs on every core (pytest-xdist); the other checks run beside it, each with its output kept
# in a file and shown when it fails. Arguments go to pytest (e.g. `bash scripts/test.sh -n 0 -x`).
# To add a check, add a `beside NAME COMMAND...` line below.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
missing=()
command -v chromium >/dev/null || missing+=(chromium)
command -v node >/dev/null || missing+=(nodejs)
if [ ${#missing[@]} -gt 0 ]; then
  (apt-get update -q && apt-get install -y -q "${missing[@]}") >/dev/null
fi
export PYTHON="$PWD/.venv/bin/python"   # the page's agreement tests compare with the Python core through it

logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
checks=()
beside() {  # beside NAME COMMAND...: start a check in the background; its output and status go to $logs
  local name=$1
  shift
  checks+=("$name")
  ( start=$SECONDS; rc=0; "$@" >"$logs/$name.log" 2>&1 || rc=$?
    echo "$rc $((SECONDS - start))" >"$logs/$name.status" ) &
}

beside node-tests node --test frontend/tests/        # the page's tests, and its agreement with the core
beside mypy "$PYTHON" -m mypy                       # mypy.ini: strict on the pure core
beside wheel "$PYTHON" scripts/check_wheel.py       # the wheel, installed without extras in a clean venv

failed=()
"$PYTHON" -m pytest -n auto --dist loadgroup "$@" || failed+=(pytest)
wait
for name in "${checks[@]}"; do
  rc=killed seconds='?'
  [ -f "$logs/$name.status" ] && read -r rc seconds <"$logs/$name.status"
  if [ "$rc" = 0 ]; then
    echo "$name: passed in ${seconds}s"
  else
    cat "$logs/$name.log"
    echo "$name: FAILED (exit $rc) in ${seconds}s"
    failed+=("$name")
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "failed: ${failed[*]}"
  exit 1
fi
