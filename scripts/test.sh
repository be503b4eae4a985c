#!/usr/bin/env bash
# Quick start, part 2: set up (venv, Debian chromium and node for the browser and page tests) and run
# every test. Nothing is skipped for a missing tool: a run that compared nothing must not pass.
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
# The page's tests, and its agreement with the Python core through this interpreter.
PYTHON="$PWD/.venv/bin/python" node --test frontend/tests/
# The page's JSDoc types: TypeScript as package-lock.json pins it (a dev tool: the page has no build),
# installed again only when the lockfile changed; then the page (tsconfig.json) and its worker.
NPM_STAMP=node_modules/.loaderscope-installed
NPM_WANT=$(sha256sum package-lock.json | cut -d' ' -f1)
if [ "$(cat "$NPM_STAMP" 2>/dev/null)" != "$NPM_WANT" ] || [ ! -x node_modules/.bin/tsc ]; then
  npm ci --no-audit --no-fund --loglevel=error
  echo "$NPM_WANT" > "$NPM_STAMP"
fi
npx --no-install tsc -p tsconfig.json
npx --no-install tsc -p tsconfig.worker.json
.venv/bin/python -m mypy                  # mypy.ini: strict over the whole package
.venv/bin/lint-imports                    # .importlinter: no upward arrow between layers (DESIGN §1)
.venv/bin/python -m loaderscope.contract --check  # contract.gen.js and events.schema.json match the contract
.venv/bin/python scripts/check_wheel.py   # the wheel, installed without extras in a clean venv, used
# The oldest and newest supported torch, each in a venv of its own (scripts/test_torch_versions.sh),
# beside pytest: mostly downloads and installs the first time. Its log is shown if it fails.
mkdir -p test-artifacts
bash scripts/test_torch_versions.sh > test-artifacts/torch-versions.log 2>&1 & torch_versions=$!
status=0
.venv/bin/python -m pytest "$@" || status=$?
wait "$torch_versions" || { cat test-artifacts/torch-versions.log; status=1; }
exit "$status"
