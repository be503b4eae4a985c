# Sourced by scripts/bootstrap.sh and scripts/test_torch_versions.sh: `uv_install VENV ARGS...` installs
# into the venv VENV with uv, which is installed into that venv by its pip when missing.
#
# uv reads no pip configuration: the wheel directories pip is told to look in (PIP_FIND_LINKS, or
# pip's own config, where this machine's CPU builds of torch lie) are handed to uv, which then takes
# torch==2.13.0 from there rather than PyPI's CUDA build.

uv_install() {
  local venv=$1
  shift
  [ -x "$venv/bin/uv" ] || "$venv/bin/python" -m pip install -q --disable-pip-version-check "uv>=0.5"
  local links=${PIP_FIND_LINKS:-$("$venv/bin/python" -m pip config get global.find-links 2>/dev/null || true)}
  local args=()
  for link in $links; do args+=(--find-links "$link"); done
  "$venv/bin/uv" pip install -q --python "$venv/bin/python" "${args[@]}" "$@"
}
