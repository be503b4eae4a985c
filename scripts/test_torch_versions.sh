#!/usr/bin/env bash
# The probe's tests under the oldest and the newest torch loaderscope supports (README, "Supported
# torch versions"), each in a venv of its own (.venv-torch-oldest, .venv-torch-newest), set up once
# and cached by a stamp as scripts/bootstrap.sh does. Beside loaderscope, only what these tests need.
#   bash scripts/test_torch_versions.sh [oldest|newest]...   (default: both)
#   bash scripts/test_torch_versions.sh --built              (exit 0 when both venvs are built for this checkout)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
# oldest: PyPI's torch 2.4.1 is a CUDA build that imports only with its nvidia-* wheels (about 2.5 GB,
# minutes the first time; then pip's cache); numpy 1.26 is the package's own floor beside it.
# newest: torch 2.14.1 and torchvision 0.29.1 lie on this machine's disk and import together, so
# tests/test_stack_vision.py runs torchvision's real ImageFolder.
declare -A TORCH=([oldest]="torch==2.4.1 numpy==1.26.*" [newest]="torch==2.14.1 torchvision==0.29.1")
# What must import there: the vision test skips without torchvision, and a run that compared nothing must fail.
declare -A IMPORTS=([oldest]="torch" [newest]="torch, torchvision")
# Every file here exercises torch's private protocol (probe/protocol.py): the check itself, the fault
# injection, a real image pipeline; then the probe against vanilla torch on the scenarios that make
# each transition of _task_info (park, skip, in_order=False, persistent workers, samplers), watch()'s
# lifecycle and `loaderscope record` (config_names needs accelerate, which these venvs leave out).
WHOLE=(tests/test_torch_protocol.py tests/test_faults.py tests/test_stack_vision.py)
declare -A PICK=(
  [tests/test_probe.py]="not (conformant or config_names) or uniform or out_of_order or iterable_shards or persistent_epochs or samplers"
  [tests/test_watch_lifecycle.py]="dropped or breaks_early or old_iterator or re_created"
  [tests/test_record.py]="conformant_trace or warnings_keep or spawned_workers"
)

# What each venv gets beside torch; with the pins and pyproject.toml, it makes the stamp (an edit
# elsewhere in this script reinstalls nothing).
EXTRA=("pytest>=8" "pytest-timeout>=2.3" "httpx>=0.27" "pillow>=10")
want=$({ declare -p TORCH; echo "${EXTRA[*]}"; cat pyproject.toml; } | sha256sum | cut -d' ' -f1)
current() {  # current oldest|newest: its venv is built for this checkout
  local venv=".venv-torch-$1"
  [ "$(cat "$venv/.loaderscope-installed" 2>/dev/null)" = "$want" ] \
    && "$venv/bin/python" -c "import ${IMPORTS[$1]}, loaderscope" 2>/dev/null
}
if [ "${1:-}" = --built ]; then  # scripts/test.sh asks: are both built? (then a warm run tests them)
  current oldest && current newest
  exit
fi

setup() {
  local venv=".venv-torch-$1"
  current "$1" && return
  [ -x "$venv/bin/python" ] || "$PY" -m venv "$venv"
  # shellcheck disable=SC2086 # the pins are words
  "$venv/bin/pip" install -q --disable-pip-version-check ${TORCH[$1]}
  "$venv/bin/pip" install -q --disable-pip-version-check -e . "${EXTRA[@]}"
  "$venv/bin/python" -c "import ${IMPORTS[$1]}, loaderscope"
  echo "$want" > "$venv/.loaderscope-installed"
}

for which in "${@:-oldest newest}"; do
  for one in $which; do
    setup "$one"
    venv=".venv-torch-$one"
    echo "== torch $("$venv/bin/python" -c 'import torch; print(torch.__version__)') ($one supported)"
    "$venv/bin/python" -m pytest -q -p no:cacheprovider "${WHOLE[@]}"
    for file in "${!PICK[@]}"; do
      "$venv/bin/python" -m pytest -q -p no:cacheprovider "$file" -k "${PICK[$file]}"
    done
  done
done
