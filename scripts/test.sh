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
if [ ${#missing[@]} -gt 0 ]; then
  (apt-get update -q && apt-get install -y -q "${missing[@]}") >/dev/null
fi
# The page's tests, and its agreement with the Python core through this interpreter.
PYTHON="$PWD/.venv/bin/python" node --test frontend/tests/
.venv/bin/python -m mypy                  # mypy.ini: strict over the whole package
.venv/bin/lint-imports                    # .importlinter: no upward arrow between layers (DESIGN §1)
.venv/bin/python -m loaderscope.contract --check  # contract.gen.js and events.schema.json match the contract
.venv/bin/python scripts/check_wheel.py   # the wheel, installed without extras in a clean venv, used
exec .venv/bin/python -m pytest "$@"
