"""A team logdir (mode 2775, umask 002) that another local user can write: what they plant there never
makes a victim's own training write through a link or touch a file of hers, and her trace is still
written, whole.

Another local user is real: as root (CI), ``setpriv --reuid 4242`` runs the other user's commands,
with the team's group as her only group. The victim's training is a real DataLoader with real worker
processes, watched with ``logdir=`` as a user does.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyarrow")

from loaderscope.model import conformance
from loaderscope.traces import parquet as columnar
from loaderscope.traces.jsonl import read_trace_tolerant
from tests.conftest import wait_for
from tests.other_user import OTHER, as_other_user, needs_root
from tests.recording import environment, yields

# The victim's training: two epochs of a real DataLoader, each run's trace under the logdir. It waits on
# its stdin where the other user acts: before the loader exists ("ready"), and between the epochs.
TRAINING = '''
import os, sys, torch
from torch.utils.data import DataLoader, TensorDataset
from loaderscope import InstrumentedDataLoader, watch
from loaderscope.probe.logfile import LogfileSink
logdir, fmt, how = sys.argv[1:4]
data = TensorDataset(torch.arange(64.))
print("ready", os.getpid(), flush=True)
sys.stdin.readline()
if how == "named":  # the user names the run: its trace's name can be told in advance
    sink = LogfileSink(logdir, trace_format=fmt)
    loader = InstrumentedDataLoader(data, batch_size=4, num_workers=2, run_id="nightly", sink=sink)
else:
    loader = watch(DataLoader(data, batch_size=4, num_workers=2), logdir=logdir, trace_format=fmt)
totals = []
for epoch in range(2):
    totals.append(sum(float(batch[0].sum()) for batch in loader))
    print("epoch", epoch, flush=True)
    if epoch == 0:
        sys.stdin.readline()
loader.close()
if how == "named":
    sink.close()
print("totals", totals, flush=True)
'''
TOTALS = "totals [2016.0, 2016.0]"  # what the training computes, watched or not
PRIVATE = b"her key, 0600\n"
LONG_AGO = 1_000_000_000  # an mtime no write or touch of today can leave


@pytest.fixture
def team_logdir() -> Iterator[Path]:
    """A team directory as teams make them: group-owned by the team (the other user's group), 2775, no
    sticky bit; the victim works there with umask 002, so what she makes there her team can write."""
    path = Path(tempfile.mkdtemp(prefix="loaderscope-team-"))
    os.chown(path, 0, OTHER)
    path.chmod(0o2775)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def private_file(directory: Path, name: str = "id_ed25519") -> Path:
    """A file of the victim's that no one else may read or write, with an mtime from long ago."""
    directory.mkdir(exist_ok=True)
    path = directory / name
    path.write_bytes(PRIVATE)
    path.chmod(0o600)
    os.utime(path, (LONG_AGO, LONG_AGO))
    return path


def untouched(path: Path) -> bool:
    return path.read_bytes() == PRIVATE and path.stat().st_mtime == LONG_AGO and not path.is_symlink()


class Training:
    """The victim's training process (umask 002), paused on its stdin where the test says."""

    def __init__(self, tmp_path: Path, logdir: Path, fmt: str, how: str, **env: str) -> None:
        self.process = subprocess.Popen([sys.executable, "-c", TRAINING, str(logdir), fmt, how], cwd=tmp_path,
                                        env=environment() | {"LOADERSCOPE_JOB": "team-job"} | env, umask=0o002,
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                        text=True)
        ready, pid = self.line().split()
        assert ready == "ready"
        self.pid = int(pid)

    def line(self) -> str:
        assert self.process.stdout is not None
        return self.process.stdout.readline().strip()

    def go_on(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write("\n")
        self.process.stdin.flush()

    def finish(self) -> tuple[str, str]:
        out, err = self.process.communicate(timeout=120)
        assert self.process.returncode == 0, err
        return out, err

    def kill(self) -> None:
        self.process.kill()
        self.process.communicate()


@pytest.fixture
def trainings() -> Iterator[list[Training]]:
    started: list[Training] = []
    yield started
    for training in started:
        if training.process.poll() is None:
            training.kill()


def whole(trace: Path) -> list[dict[str, Any]]:
    """The events of a trace the victim's training wrote, checked complete and conformant."""
    _, events, _ = read_trace_tolerant(trace)
    assert events[0]["kind"] == "run_start" and events[-1]["kind"] == "run_end"
    assert yields(events) == 32 and conformance.check(events) == []
    return events


def no_traceback(err: str) -> None:
    assert "Traceback" not in err and "loaderscope: internal error" not in err, err


@needs_root
@pytest.mark.slow
def test_links_planted_at_a_parquet_writers_temporary_and_part_names_are_never_written_through(
        tmp_path: Path, team_logdir: Path, trainings: list[Training]) -> None:
    """The writer's temporary names were predictable (``.part-N.parquet.tmp``, opened following a link):
    a link planted there made the victim's own training overwrite her 0600 file with Parquet bytes."""
    key = private_file(tmp_path / "home")
    training = Training(tmp_path, team_logdir, "parquet", "watched", LOADERSCOPE_PART_SECONDS="3600")
    trainings.append(training)
    training.go_on()
    assert training.line() == "epoch 0"
    # the trace's directory exists from the run's first events; its first part comes at close
    trace = wait_for(lambda: next(team_logdir.rglob("*.trace.parquet"), None), what="the trace's directory")
    assert trace.stat().st_mode & 0o020, "the team can write in it (umask 002): that is what is being tried"
    names = [f".part-{n:06d}.parquet.tmp" for n in range(10)] + ["part-000000.parquet"]
    as_other_user("sh", "-c", " ".join(f"ln -s {key} {trace / name};" for name in names))
    training.go_on()
    out, err = training.finish()
    assert TOTALS in out  # the training's own result
    no_traceback(err)
    assert untouched(key)
    parts = sorted(trace.glob(columnar.PART_GLOB))
    assert parts and not any(part.is_symlink() for part in parts)  # the planted part name was replaced
    whole(trace)


@needs_root
@pytest.mark.slow
def test_the_parquet_heartbeat_touches_its_own_part_whatever_its_name_leads_to(
        tmp_path: Path, team_logdir: Path, trainings: list[Training]) -> None:
    """The heartbeat set the newest part's mtime by its name: a link swapped in for the part made the
    victim's quiet training touch any file of hers, every 5 s."""
    key = private_file(tmp_path / "home")
    # memory samples are events: they would keep the run from being quiet; off, as the heartbeat is tested
    training = Training(tmp_path, team_logdir, "parquet", "watched", LOADERSCOPE_PART_SECONDS="0.2",
                        LOADERSCOPE_MEMORY="0")
    trainings.append(training)
    training.go_on()
    assert training.line() == "epoch 0"
    trace = wait_for(lambda: next(team_logdir.rglob("*.trace.parquet"), None), what="the trace's directory")

    written: dict[Path, float] = {}  # each part's mtime when first seen: a part is written once

    def touched() -> list[Path] | None:
        """The parts, once the newest one's mtime moved: the heartbeat of a run that is quiet now."""
        parts = sorted(trace.glob(columnar.PART_GLOB))
        if not parts:
            return None
        mtime = parts[-1].stat().st_mtime
        return parts if mtime > written.setdefault(parts[-1], mtime) else None

    parts = wait_for(touched, timeout=120, what="the quiet run's heartbeat")
    # the other user swaps each part for a link to the victim's file, keeping the part aside
    for part in parts:
        as_other_user("sh", "-c", f"mv {part} {part}.aside && ln -s {key} {part}")
    aside = Path(f"{parts[-1]}.aside")
    os.utime(aside, (LONG_AGO, LONG_AGO))
    wait_for(lambda: aside.stat().st_mtime != LONG_AGO or not untouched(key), timeout=120,
             what="the next heartbeat")
    assert untouched(key)  # the part the writer holds was touched, not what its name leads to
    for part in parts:
        as_other_user("mv", f"{part}.aside", str(part))
    training.go_on()
    out, err = training.finish()
    assert TOTALS in out
    no_traceback(err)
    assert untouched(key)
    whole(trace)


@needs_root
@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["parquet", "jsonl"])
def test_a_link_planted_at_a_named_runs_trace_is_left_alone_and_the_trace_written_beside_it(
        tmp_path: Path, team_logdir: Path, trainings: list[Training], fmt: str) -> None:
    """A run with a name of its own (``run_id=``) has a trace name anyone can tell from its pid: a link
    planted there was written through (JSON lines: her file truncated and overwritten; Parquet: the
    trace's parts written into her directory). Now a trace is made new or not at all, and goes beside
    what is there, said once."""
    home = tmp_path / "home"
    key = private_file(home)
    before = sorted(os.listdir(home))
    training = Training(tmp_path, team_logdir, fmt, "named")
    trainings.append(training)
    job = team_logdir / "local"  # a run of no launcher's job
    as_other_user("mkdir", "-p", str(job))
    planted = job / f"InstrumentedDataLoader-rank0-pid{training.pid}-nightly.trace.{fmt}"
    as_other_user("ln", "-s", str(home if fmt == "parquet" else key), str(planted))
    training.go_on()
    assert training.line() == "epoch 0"
    training.go_on()
    out, err = training.finish()
    assert TOTALS in out
    no_traceback(err)
    assert untouched(key) and sorted(os.listdir(home)) == before
    assert err.count("already exists and is not this run's trace") == 1, err
    (trace,) = [path for path in job.glob(f"*.trace.{fmt}") if not path.is_symlink()]
    assert trace.name.startswith(planted.name.removesuffix(f".trace.{fmt}") + "-") and trace.name in err
    whole(trace)
