#!/usr/bin/env bash
# Creates .venv with everything loaderscope needs. Idempotent: cheap when already done.
# torch is pinned here (a CPU build lies on local disk); the package itself only asks torch>=2.4.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
# Reinstall when pyproject.toml changed since the last install (new dependencies or test extras), or
# when the startup hook `loaderscope record` needs is missing (a venv made before it existed).
STAMP=.venv/.loaderscope-installed
WANT=$(sha256sum pyproject.toml scripts/bootstrap.sh | sha256sum | cut -d' ' -f1)
if [ "$(cat "$STAMP" 2>/dev/null)" != "$WANT" ] || [ "${1:-}" = "--force" ] \
   || ! ls .venv/lib/python*/site-packages/loaderscope_auto.pth >/dev/null 2>&1 \
   || ! .venv/bin/python -c "import torch, loaderscope, mypy" 2>/dev/null; then
  .venv/bin/pip install -q --disable-pip-version-check "torch==2.13.0"
  # mypy: scripts/test.sh type-checks the pure core (mypy.ini); a tool, not a dependency of the package
  .venv/bin/pip install -q --disable-pip-version-check -e ".[test]" "mypy>=1.10"
  echo "$WANT" > "$STAMP"
fi
