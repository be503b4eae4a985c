#!/usr/bin/env bash
# Quick start, part 2: set up (venv, Debian chromium and node for the browser and page tests) and run
# every test. Nothing is skipped for a missing tool: a run that compared nothing must not pass.
#
# pytest runs on every core and one more (pytest-xdist); the other checks run beside it, each with its output kept
# in a file and shown when it fails. Arguments go to pytest (e.g. `bash scripts/test.sh -n 0 -x`).
# To add a check, add a `beside NAME COMMAND...` line below.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
missing=()
command -v chromium >/dev/null || missing+=(chromium)
command -v node >/dev/null || missing+=(nodejs)
command -v promtool >/dev/null || missing+=(prometheus)  # the metrics tests: Debian's prometheus and promtool
command -v npm >/dev/null || missing+=(npm)
if [ ${#missing[@]} -gt 0 ]; then
  (apt-get update -q && apt-get install -y -q "${missing[@]}") >/dev/null
fi
# The page's JSDoc types: TypeScript as package-lock.json pins it (a dev tool: the page has no build),
# installed again only when the lockfile changed.
NPM_STAMP=node_modules/.loaderscope-installed
NPM_WANT=$(sha256sum package-lock.json | cut -d' ' -f1)
if [ "$(cat "$NPM_STAMP" 2>/dev/null)" != "$NPM_WANT" ] || [ ! -x node_modules/.bin/tsc ]; then
  npm ci --no-audit --no-fund --loglevel=error
  echo "$NPM_WANT" > "$NPM_STAMP"
fi
export PYTHON="$PWD/.venv/bin/python"   # the page's agreement tests compare with the Python core through it
# Hundreds of the tests' processes import torch and loaderscope: each module is compiled once, at its
# first import, and its .pyc kept (scripts/bootstrap.sh compiles nothing ahead), which
# PYTHONDONTWRITEBYTECODE would forbid, each process then compiling them again.
unset PYTHONDONTWRITEBYTECODE

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
beside tsc-page npx --no-install tsc -p tsconfig.json           # the page's JSDoc types
beside tsc-worker npx --no-install tsc -p tsconfig.worker.json  # ... and its worker's
beside tsc-model npx --no-install tsc -p tsconfig.model.json    # ... and its pure model (frontend/js/model/) without the DOM
beside biome npx --no-install biome ci --linter-enabled=false frontend  # biome.json: the page's JS format, 120 columns
beside js-lines bash scripts/js_line_length.sh    # ... and what Biome cannot break (comments, strings): no line over 120
# mypy.ini: strict over the whole package. Its cache is kept per user, not per checkout: a fresh clone
# then re-checks only what differs (mypy compares each file's hash), ~2 s instead of ~40 s of a core.
beside mypy env MYPY_CACHE_DIR="${XDG_CACHE_HOME:-$HOME/.cache}/loaderscope/mypy" "$PYTHON" -m mypy
beside ruff .venv/bin/ruff check .                  # pyproject.toml [tool.ruff]: every Python file, 120 columns
beside lint-imports .venv/bin/lint-imports          # .importlinter: no upward arrow between layers (DESIGN §1)
beside contract "$PYTHON" -m loaderscope.contract --check  # every generated file (generate.OUTPUTS: the page's tables and types, docs/reference, the JSON Schema) matches the contract
beside wheel "$PYTHON" scripts/check_wheel.py        # the wheel, installed without extras in a clean venv, used
# Branch coverage of the pure core ([tool.coverage.run] in pyproject.toml) by its own tests, in one
# process: a floor, the measured total rounded down to 5, that a change leaving core code untested fails.
beside coverage env COVERAGE_FILE="$logs/coverage.data" "$PYTHON" -m pytest -p no:xdist -p no:cacheprovider -q \
  tests/core --cov --cov-report=term --cov-fail-under=90
# The oldest and newest supported torch (2.4.1, 2.14.1 + torchvision), each in a venv of its own, kept
# per user and built once: the quick selection each time, every test with LOADERSCOPE_TORCH_VERSIONS=1.
if [ "${LOADERSCOPE_TORCH_VERSIONS:-}" = 1 ]; then
  beside torch-versions bash scripts/test_torch_versions.sh
else
  beside torch-versions bash scripts/test_torch_versions.sh --quick
fi

failed=()
# One pytest worker more than there are cores: a third of a worker's time is spent waiting (a browser,
# a subprocess, a server), which the extra worker fills. Tests go out two at a time, the slow ones
# first (tests/conftest.py), so that no long test starts last.
"$PYTHON" -m pytest -n "$(($(nproc) + 1))" --dist load --maxschedchunk 2 "$@" || failed+=(pytest)
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
