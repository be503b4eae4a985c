#!/usr/bin/env bash
# Creates .venv with everything loaderscope needs. Idempotent: cheap when already done.
# torch is pinned here (a CPU build lies on local disk); the package itself only asks torch>=2.4.
#
# uv installs the packages (pip installs uv first): it links them from its cache (~/.cache/uv) rather
# than unpacking each wheel again, so a fresh clone's venv takes seconds once the cache holds them,
# where pip took ~150 s of a core here. The first time, both download the same packages from PyPI.
# Unlike pip, uv compiles no module at install (compiling all of them cost ~75 s of CPU here): Python
# writes each module's .pyc the first time it is imported. Where PYTHONDONTWRITEBYTECODE is set it
# writes none, and every process compiles torch again (import torch: 6 s instead of 2.5), so
# scripts/demo.sh and scripts/test.sh unset it.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
# Reinstall when pyproject.toml changed since the last install (new dependencies or test extras), or
# when the startup hook `loaderscope record` needs is missing (a venv made before it existed).
STAMP=.venv/.loaderscope-installed
WANT=$(sha256sum pyproject.toml scripts/bootstrap.sh scripts/uv.sh scripts/constraints.txt | sha256sum | cut -d' ' -f1)
if [ "$(cat "$STAMP" 2>/dev/null)" != "$WANT" ] || [ "${1:-}" = "--force" ] \
   || ! ls .venv/lib/python*/site-packages/loaderscope_auto.pth >/dev/null 2>&1 \
   || ! .venv/bin/python -c "import torch, loaderscope, mypy" 2>/dev/null; then
  source scripts/uv.sh
  uv_install .venv "torch==2.13.0"
  # mypy: scripts/test.sh type-checks the whole package (mypy.ini); a tool, not a dependency of the package.
  # scripts/constraints.txt: the versions the last green CI ran with
  uv_install .venv -e ".[test]" "mypy>=1.10" --constraint scripts/constraints.txt
  echo "$WANT" > "$STAMP"
fi
