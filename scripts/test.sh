#!/usr/bin/env bash
# Quick start, part 2: set up (venv, Debian chromium for the browser tests) and run every test.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
if ! command -v chromium >/dev/null; then
  (apt-get update -q && apt-get install -y -q chromium) >/dev/null
fi
if command -v node >/dev/null; then
  node --test frontend/tests/
fi
.venv/bin/python scripts/check_wheel.py   # the wheel, installed without extras in a clean venv, used
exec .venv/bin/python -m pytest "$@"
