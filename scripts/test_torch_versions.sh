#!/usr/bin/env bash
# The probe's tests under the oldest and the newest torch loaderscope supports (README, "Supported
# torch versions"), each in a venv of its own, set up once and cached by a stamp as scripts/bootstrap.sh
# does. Beside loaderscope, only what these tests need. The venvs are the user's, not the checkout's
# ($XDG_CACHE_HOME/loaderscope/venv-torch-oldest, -newest): a fresh clone finds them built (building one
# takes a minute even from uv's cache, most of it compiling), and this checkout is installed into them
# (editable, no dependencies: a second) for the run, under a lock, so two runs never mix checkouts.
#   bash scripts/test_torch_versions.sh [--quick] [oldest|newest]...   (default: both, every test below)
# --quick is what scripts/test.sh runs each time, beside pytest: the checks that fail first when torch
# moves a private name (a minute or two of a core); the whole selection takes ~14 min of a core.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/uv.sh
PY=${PYTHON:-python3}
# oldest: PyPI's torch 2.4.1 is a CUDA build that imports only with its nvidia-* wheels (about 2.5 GB,
# minutes the first time; then pip's cache); numpy 1.26 is the package's own floor beside it.
# newest: torch 2.14.1 and torchvision 0.29.1 lie on this machine's disk and import together, so
# tests/stacks/test_torchvision.py runs torchvision's real ImageFolder.
declare -A TORCH=([oldest]="torch==2.4.1 numpy==1.26.*" [newest]="torch==2.14.1 torchvision==0.29.1")
# What must import there: the vision test skips without torchvision, and a run that compared nothing must fail.
declare -A IMPORTS=([oldest]="torch" [newest]="torch, torchvision")
# Every file here exercises torch's private protocol (probe/protocol.py): the check itself, the fault
# injection, a real image pipeline, tracebacks and warnings frame for frame against vanilla torch; then the probe against vanilla torch on the scenarios that make
# each transition of _task_info (park, skip, in_order=False, persistent workers, samplers), watch()'s
# lifecycle and `loaderscope record` (config_names needs accelerate, which these venvs leave out).
WHOLE=(tests/probe/test_torch_protocol.py tests/probe/test_fault_isolation.py tests/stacks/test_torchvision.py
       tests/probe/test_tracebacks_and_warnings.py)
# --quick: that torch has every private name the probe follows and does what it says of in_order=False;
# the probe against vanilla torch where results arrive in order (uniform), are parked (out_of_order)
# and where workers persist across epochs; torchvision's real ImageFolder where torchvision imports.
QUICK=(
  tests/probe/test_torch_protocol.py::test_this_torch_has_every_name_the_probe_follows
  tests/probe/test_torch_protocol.py::test_in_order_false_gets_exactly_what_this_torch_says
  "tests/probe/test_instrumented_loader.py::test_scenario_is_conformant_and_matches_vanilla[uniform-4]"
  "tests/probe/test_instrumented_loader.py::test_scenario_is_conformant_and_matches_vanilla[out_of_order-4]"
  "tests/probe/test_instrumented_loader.py::test_scenario_is_conformant_and_matches_vanilla[persistent_epochs-1]"
  tests/stacks/test_torchvision.py::test_torchvision_image_folder
)
declare -A PICK=(
  [tests/probe/test_instrumented_loader.py]="not (conformant or config_names) or uniform or out_of_order or iterable_shards or persistent_epochs or samplers"
  [tests/probe/test_watch_lifecycle.py]="dropped or breaks_early or old_iterator or re_created"
  [tests/probe/test_record.py]="conformant_trace or warnings_keep or spawned_workers"
)

# What each venv gets beside torch; with the pins and pyproject.toml, it makes the stamp (an edit
# elsewhere in this script reinstalls nothing).
EXTRA=("pytest>=8" "pytest-timeout>=2.3" "httpx>=0.27" "pillow>=10")
want=$({ declare -p TORCH; echo "${EXTRA[*]}"; cat pyproject.toml scripts/uv.sh; } | sha256sum | cut -d' ' -f1)
VENVS=${XDG_CACHE_HOME:-$HOME/.cache}/loaderscope
mkdir -p "$VENVS"
exec 9>"$VENVS/venv-torch.lock"
flock 9
current() {  # current oldest|newest: its venv is built with these pins and dependencies
  local venv="$VENVS/venv-torch-$1"
  [ "$(cat "$venv/.loaderscope-installed" 2>/dev/null)" = "$want" ] && [ -x "$venv/bin/python" ]
}

setup() {
  local venv="$VENVS/venv-torch-$1"
  if ! current "$1"; then build "$1"; fi
  uv_install "$venv" --no-deps --reinstall-package loaderscope -e .
  local where
  where=$("$venv/bin/python" -c "import loaderscope; print(loaderscope.__file__)")
  [[ $where == "$PWD"/* ]] || { echo "$venv imports loaderscope from $where, not from $PWD" >&2; exit 1; }
}

build() {
  local venv="$VENVS/venv-torch-$1"
  rm -rf "$venv"
  "$PY" -m venv "$venv"
  # compiled now: without .pyc files (PYTHONDONTWRITEBYTECODE set), each test's processes would compile
  # torch again, ~3 s of a core each
  # shellcheck disable=SC2086 # the pins are words
  UV_COMPILE_BYTECODE=1 uv_install "$venv" ${TORCH[$1]}
  UV_COMPILE_BYTECODE=1 uv_install "$venv" -e . "${EXTRA[@]}"
  "$venv/bin/python" -c "import ${IMPORTS[$1]}, loaderscope"
  echo "$want" > "$venv/.loaderscope-installed"
}

quick=0
if [ "${1:-}" = --quick ]; then quick=1; shift; fi
for which in "${@:-oldest newest}"; do
  for one in $which; do
    setup "$one"
    venv="$VENVS/venv-torch-$one"
    pytest=("$venv/bin/python" -m pytest -q -p no:cacheprovider)
    echo "== torch $("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("torch"))') ($one supported)"
    if [ $quick = 1 ]; then
      "${pytest[@]}" "${QUICK[@]}"
      continue
    fi
    "${pytest[@]}" "${WHOLE[@]}"
    for file in "${!PICK[@]}"; do
      "${pytest[@]}" "$file" -k "${PICK[$file]}"
    done
  done
done
