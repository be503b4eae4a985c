"""``loaderscope_auto.pth``: off means off, and loaderscope loads only with torch's DataLoader.

Each case is a real interpreter started with ``-S`` that then processes only a site directory
holding this checkout's ``.pth`` (the environment's installed copy may be older), with torch
importable from the environment's site-packages.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any

import loaderscope_hook
import pytest

BACKEND = Path(__file__).resolve().parents[2] / "backend"
PROBE = """
import json, site, sys
site.addsitedir(sys.argv[1])
at_start = sorted(m for m in sys.modules if m == "loaderscope" or m.startswith("loaderscope."))
from torch.utils.data import DataLoader
class Later(DataLoader):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
print(json.dumps({"at_start": at_start,
                  "autowatch": "loaderscope.autowatch" in sys.modules,
                  "patched": hasattr(DataLoader.__init__, "__wrapped__"),
                  "subclass_patched": hasattr(Later.__init__, "__wrapped__")}))
"""


def _start(tmp_path: Path, env: dict[str, str]) -> dict[str, Any]:
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    shutil.copy(BACKEND / "loaderscope_auto.pth", site)
    path = f"{BACKEND}:{sysconfig.get_paths()['purelib']}"
    clean = {k: v for k, v in os.environ.items() if not k.startswith("LOADERSCOPE_")}
    done = subprocess.run([sys.executable, "-S", "-c", PROBE, str(site)], env={**clean, "PYTHONPATH": path, **env},
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


@pytest.mark.parametrize("value", ["0", "false", "no", "off", "", " OFF ", "False"])
def test_record_off_values_mean_off(value: str) -> None:
    assert not loaderscope_hook.wanted({"LOADERSCOPE_RECORD": value})


@pytest.mark.parametrize("environ", [{"LOADERSCOPE_RECORD": "1"}, {"LOADERSCOPE_RECORD": "yes"},
                                     {"LOADERSCOPE_LOGDIR": "/tmp/runs"},
                                     {"LOADERSCOPE_LOGDIR": "/tmp/runs", "LOADERSCOPE_RECORD": "0"}])
def test_record_or_a_logdir_mean_on(environ: dict[str, str]) -> None:
    assert loaderscope_hook.wanted(environ)


def test_record_0_watches_nothing(tmp_path: Path) -> None:
    started = _start(tmp_path, {"LOADERSCOPE_RECORD": "0"})
    assert started["at_start"] == [] and not started["autowatch"] and not started["patched"]


@pytest.mark.parametrize("env", [{"LOADERSCOPE_RECORD": "1"}, {"LOADERSCOPE_LOGDIR": "runs"}])
def test_loaderscope_loads_with_torchs_dataloader_not_at_interpreter_start(tmp_path: Path, env: dict[str, str]) -> None:
    started = _start(tmp_path, env)
    assert started["at_start"] == []  # only the tiny loaderscope_hook, which is no part of the package
    assert started["autowatch"] and started["patched"] and started["subclass_patched"]
