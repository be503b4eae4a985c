"""The verdicts on the host's memory on real loaders, against a real limit: a growing dataset's run in a memory
cgroup this test makes (the headroom is the cgroup's, not the host's), and a run whose /dev/shm is a small
tmpfs in a private mount namespace, nearly full (the host's own /dev/shm is too big to fill safely).
Both need root (CI runs as root) and run the training in a subprocess (tests/probe/memory_host.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.skipif(sys.platform != "linux" or os.geteuid() != 0,
                                                   reason="a cgroup and a mount namespace: Linux, as root")]
ROOT = Path(__file__).resolve().parents[2]
LIMIT = 2 * 2**30


def own_memory_cgroup() -> Path | None:
    """This process's memory cgroup directory: the v1 memory hierarchy's, else v2's where it has the controller."""
    mounts = {}
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields, _, after = line.partition(" - ")
        parts, tail = fields.split(), after.split()
        if tail[0] == "cgroup" and "memory" in tail[2].split(","):
            mounts["v1"] = (parts[3], parts[4])
        elif tail[0] == "cgroup2":
            mounts["v2"] = (parts[3], parts[4])
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        which = "v2" if controllers == "" else "v1" if "memory" in controllers.split(",") else None
        if which is None or which not in mounts or not path.startswith(mounts[which][0]):
            continue
        here = Path(mounts[which][1] + "/" + path[len(mounts[which][0]):].lstrip("/"))
        if which == "v1" or "memory" in (here / "cgroup.controllers").read_text().split():
            return here
    return None


@contextmanager
def memory_cgroup(limit: int) -> Iterator[Path]:
    """A child of this process's memory cgroup with ``limit``, removed (once its processes are gone) after."""
    parent = own_memory_cgroup()
    if parent is None:
        pytest.skip("no memory cgroup controller here")
    group = parent / f"loaderscope-test-{os.getpid()}"
    try:
        group.mkdir()
        v2 = (group / "memory.max").exists()
        (group / ("memory.max" if v2 else "memory.limit_in_bytes")).write_text(str(limit))
    except OSError as exc:  # a v2 parent with processes of its own cannot hand a child the memory controller
        if group.exists():
            group.rmdir()
        pytest.skip(f"cannot make a memory cgroup with a limit under {parent}: {exc}")
    try:
        yield group
    finally:
        wait_for(lambda: not (group / "cgroup.procs").read_text().strip(), timeout=30, what="the cgroup emptied")
        group.rmdir()


def run(argv: list[str]) -> dict[str, Any]:
    # generous: a loaded 2-core box took 110 s for the headroom run (torch imported, workers forked, 8+ samples)
    done = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, timeout=400)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])  # type: ignore[no-any-return]


@pytest.mark.timeout(420)
def test_headroom_in_a_cgroup_is_the_cgroups_and_its_exhaustion_is_foretold() -> None:
    with memory_cgroup(LIMIT) as group:
        # the shell joins the cgroup, then becomes the training process: the probe finds the limit from its start
        out = run(["sh", "-c", f'echo $$ > {group}/cgroup.procs && exec "$0" -m tests.probe.memory_host headroom '
                   f'{group}', sys.executable])
    m, sample, said = out["memory"], out["sample"], out["findings"]
    # the cgroup's figures: the limit this test set, the working set as the kernel counts it at a quiet moment
    assert sample["cgroup_limit"] == LIMIT, sample
    assert abs(sample["cgroup_usage"] - out["usage"]) <= 0.1 * out["usage"], (sample["cgroup_usage"], out["usage"])
    # whatever reads the processes reads the cgroup: psutil as the source too
    by_psutil = out["by_psutil"]
    assert by_psutil["source"] == "psutil" and by_psutil["cgroup_limit"] == LIMIT, by_psutil
    assert abs(by_psutil["cgroup_usage"] - out["usage"]) <= 0.1 * out["usage"], (by_psutil, out["usage"])
    # the host's figures are psutil's (read just after the sample; other processes on the host move it a little)
    assert abs(sample["available"] - out["psutil"]["available"]) <= 0.1 * out["psutil"]["available"]
    assert sample["total"] == out["psutil"]["total"]
    # the headroom is the cgroup's, smaller than the host's MemAvailable
    assert m["headroom"] == m["cgroup_limit"] - m["cgroup_usage"] < m["available"], m
    assert "headroom" in said, said
    text = said["headroom"]
    assert f"the host's {m['headroom'] / 1e6:.1f} MB of headroom lasts {m['headroom_s'] / 60:.0f} min" in text, text
    assert f"grew {m['growth_per_s'] / 1e6:.1f} MB/s" in text, text
    assert " epochs)" in text, text
    # at the rate said, the headroom said runs out within the time said (the rate is the loader's, measured)
    assert m["growth_per_s"] > 0 and m["headroom_s"] == pytest.approx(m["headroom"] / m["growth_per_s"])


@pytest.mark.timeout(420)
def test_dev_shm_nearly_full_is_named_with_what_was_free() -> None:
    # a private mount namespace: a 64 MiB tmpfs on /dev/shm for this run alone, gone with it
    tried = subprocess.run(["unshare", "-m", "true"], capture_output=True, text=True)
    if tried.returncode != 0:  # a container without CAP_SYS_ADMIN
        pytest.skip(f"no private mount namespace here: {tried.stderr.strip()}")
    out = run(["unshare", "-m", "--propagation", "private", "sh", "-c",
               'mount -t tmpfs -o size=64m tmpfs /dev/shm && exec "$0" -m tests.probe.memory_host shm',
               sys.executable])
    m, said = out["memory"], out["findings"]
    assert m["shm_total"] == out["total"] == 64 * 2**20, (m, out)
    # the fullest moment is at most as free as the run found it, less its batches in flight
    assert out["free"] - 2 * 2**20 <= m["shm_free_low"] <= out["free"], (m["shm_free_low"], out["free"])
    # the tmpfs's figures are psutil's (the workers idle: the ballast and what torch still holds there)
    sample, theirs = out["sample"], out["psutil"]
    assert sample["shm_total"] == theirs["total"] and abs(sample["shm_used"] - theirs["used"]) <= 0.1 * theirs["used"]
    assert "shm_low" in said, said
    assert f"{m['shm_free_low'] / 1e6:.1f} MB of {64 * 2**20 / 1e6:.1f} MB were free" in said["shm_low"], said
