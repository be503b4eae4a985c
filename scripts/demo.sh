#!/usr/bin/env bash
# Quick start, part 1: set up and open the dashboard with a live demo run.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
unset PYTHONDONTWRITEBYTECODE  # each module compiled once, at its first import (scripts/bootstrap.sh)
exec .venv/bin/loaderscope demo "$@"
