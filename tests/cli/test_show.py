"""``loaderscope show TRACE|DIR [--json]`` on runs a real command recorded: a training script with two
loaders (train and val, two worker processes each) under ``loaderscope record``, as JSON lines and as
Parquet; the command run as a user runs it (a subprocess, piped, or on a terminal of 80 columns)."""

from __future__ import annotations

import csv
import io
import json
import os
import pty
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from loaderscope.model.diagnosis import MEMORY_CODES, findings
from loaderscope.model.state import reduce
from loaderscope.model.stats import summary
from loaderscope.report import first_epoch_orders
from loaderscope.traces.jsonl import read_trace

PYTHON = sys.executable
SECTIONS = ("Settings", "Throughput", "Waiting", "Workers", "Reordering", "Diagnosis")
HEADING = re.compile(r"^(?P<name>\S+) · rank (?P<rank>\d+)", re.MULTILINE)

# The user's script, which knows nothing of loaderscope: a train loader and a val loader, 2 epochs.
TRAIN = '''
import time
import torch
from torch.utils.data import DataLoader, Dataset

class Squares(Dataset):
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, index):
        time.sleep(0.004 if index % 8 == 0 else 0.001)  # a slow sample now and then: results arrive out of order
        return torch.tensor([index, index * index])

def main():
    train_loader = DataLoader(Squares(48), batch_size=4, num_workers=2)
    val_loader = DataLoader(Squares(40), batch_size=4, num_workers=2)
    for epoch in range(2):
        for batch in train_loader:
            pass
        for batch in val_loader:
            pass

if __name__ == "__main__":
    main()
'''


def environment(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOADERSCOPE_")}
    return env | {"OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"} | extra


def record(where: Path, *options: str) -> Path:
    """Record the script into ``where/runs``; returns the logdir."""
    (where / "train.py").write_text(TRAIN)
    done = subprocess.run([PYTHON, "-m", "loaderscope.record", "--logdir", "runs", *options, "--", PYTHON, "train.py"],
                          cwd=where, env=environment(), capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr
    return where / "runs"


def show(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``loaderscope show`` with its output piped, as into ``less`` or a file."""
    return subprocess.run([PYTHON, "-m", "loaderscope.cli", "show", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120, env=environment())


@pytest.fixture(scope="module")
def jsonl_logdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return record(tmp_path_factory.mktemp("jsonl"))


@pytest.fixture(scope="module")
def parquet_logdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return record(tmp_path_factory.mktemp("parquet"), "--format", "parquet")


def traces(logdir: Path, suffix: str = ".trace.jsonl") -> dict[str, Path]:
    """The logdir's traces by loader name (the one part of the file name before the class)."""
    found = {path.name.split("-", 1)[0]: path for path in logdir.glob(f"*/*{suffix}")}
    assert sorted(found) == ["train_loader", "val_loader"], found
    return found


def blocks(out: str) -> dict[str, str]:
    """The printed text of each run, by loader name: from its heading to the next run's."""
    starts = list(HEADING.finditer(out))
    ends = [m.start() for m in starts[1:]] + [len(out)]
    return {m["name"]: out[m.start():end] for m, end in zip(starts, ends, strict=True)}


def expected(path: Path) -> dict[str, Any]:
    """What the command should say of a trace, computed here from its events."""
    head, events = read_trace(path)
    state = reduce(events)
    stats = summary(state)
    return {"head": head, "start": events[0], "summary": stats, "rate": f"= {stats['batches_per_s']:.1f} batches/s",
            "findings": [{"code": f.code, "text": f.text} for f in findings(state, stats)],
            "orders": first_epoch_orders(events)}


def check_block(text: str, path: Path, cwd: Path) -> None:
    """The run's text: every section, its trace as given (relative to ``cwd``), its rate, its findings."""
    want = expected(path)
    for section in SECTIONS:
        assert re.search(rf"^{section}$", text, re.MULTILINE), (section, text)
    assert f"trace {path.relative_to(cwd)}" in text and f"run {want['head']['run']}" in text
    rate = [line for line in text.splitlines() if "batches/s" in line and " inside its epochs = " in line]
    assert len(rate) == 1 and rate[0].endswith(want["rate"]), rate  # one rate, the summary's, as printed
    lines = [line.rstrip() for line in text.splitlines()]  # a table's cells are padded to its column
    for finding in want["findings"]:
        assert f"  • {finding['text']}" in lines  # each finding whole, on one line
    arrivals, yields = want["orders"]
    if arrivals != yields:
        assert f"arrival order: {' '.join(map(str, arrivals))}\n" in text
        assert f"yield order:   {' '.join(map(str, yields))}\n" in text


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_show_dir_prints_each_loader_of_the_job_in_order_with_its_own_numbers(jsonl_logdir: Path) -> None:
    found = traces(jsonl_logdir)
    job = found["train_loader"].parent.name
    for where in ("runs", f"runs/{job}"):  # a logdir, or one job's directory in it
        result = show(where, cwd=jsonl_logdir.parent)
        assert result.returncode == 0 and result.stderr == "", result.stderr
        out = result.stdout
        assert out.count(f"\njob {job}\n") == 1
        runs = blocks(out)
        assert list(runs) == ["train_loader", "val_loader"]  # by job, then loader name, then rank
        for name, text in runs.items():
            check_block(text, found[name], jsonl_logdir.parent)
        assert runs["train_loader"].count("\nSettings\n") == 1


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_show_trace_prints_that_run_alone(jsonl_logdir: Path) -> None:
    val = traces(jsonl_logdir)["val_loader"]
    result = show(str(val.relative_to(jsonl_logdir.parent)), cwd=jsonl_logdir.parent)
    assert result.returncode == 0, result.stdout
    runs = blocks(result.stdout)
    assert list(runs) == ["val_loader"]
    check_block(runs["val_loader"], val, jsonl_logdir.parent)
    assert "num_workers=2  batch_size=4" in runs["val_loader"] and "dataset_length=40" in runs["val_loader"]


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_show_json_gives_each_runs_identity_summary_findings_and_orders(jsonl_logdir: Path) -> None:
    result = show("runs", "--json", cwd=jsonl_logdir.parent)
    assert result.returncode == 0, result.stdout
    document = json.loads(result.stdout)
    assert document["unreadable"] == []
    found = traces(jsonl_logdir)
    assert [run["identity"]["name"] for run in document["runs"]] == ["train_loader", "val_loader"]
    for run in document["runs"]:
        check_run(run, found[run["identity"]["name"]], jsonl_logdir.parent)


def check_run(run: dict[str, Any], path: Path, cwd: Path) -> None:
    want = expected(path)
    start, head = want["start"], want["head"]
    assert run["identity"] == {
        "file": str(path.relative_to(cwd)), "run": head["run"], "job": start["job"], "name": start["name"],
        "rank": 0, "world_size": 1, "pid": start["pid"], "host": start["host"], "loader": start["loader"],
        "mode": "real", "scenario": None, "truncated": False}
    assert run["settings"] == start["config"] and run["params"] is None
    assert run["summary"] == want["summary"]  # every key, the same numbers
    assert run["findings"] == want["findings"] and run["findings"]
    assert {f["code"] for f in run["findings"]} <= {"startup_bound", "input_bound", "step_bound", "reorder",
                                                    "other_loaders_bound", "straggler"}
    assert [run["reordering"]["arrivals"], run["reordering"]["yields"]] == list(want["orders"])


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_show_reads_parquet_traces(parquet_logdir: Path) -> None:
    found = traces(parquet_logdir, ".trace.parquet")
    assert all(path.is_dir() for path in found.values())
    result = show("runs", cwd=parquet_logdir.parent)
    assert result.returncode == 0, result.stdout
    runs = blocks(result.stdout)
    assert list(runs) == ["train_loader", "val_loader"]
    for name, text in runs.items():
        check_block(text, found[name], parquet_logdir.parent)
    document = json.loads(show(str(found["val_loader"].relative_to(parquet_logdir.parent)), "--json",
                               cwd=parquet_logdir.parent).stdout)
    check_run(document["runs"][0], found["val_loader"], parquet_logdir.parent)


def no_traceback(result: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in result.stdout + result.stderr


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_bad_paths_are_named_with_the_fix_and_a_damaged_trace_spares_the_others(jsonl_logdir: Path,
                                                                               tmp_path: Path) -> None:
    missing = show("nosuch.trace.jsonl", cwd=tmp_path)
    assert missing.returncode == 2 and "nosuch.trace.jsonl: no such file or directory" in missing.stdout
    no_traceback(missing)
    (tmp_path / "empty").mkdir()
    empty = show("empty", cwd=tmp_path)
    assert empty.returncode == 2 and "empty: no traces" in empty.stdout
    assert "loaderscope record --logdir empty" in empty.stdout
    no_traceback(empty)
    job = tmp_path / "job"
    job.mkdir()
    (job / "garbage.trace.jsonl").write_bytes(b"\x00\x01 not json\n")
    garbage = show("job/garbage.trace.jsonl", cwd=tmp_path)
    assert garbage.returncode == 2 and "job/garbage.trace.jsonl is not a loaderscope trace" in garbage.stdout
    no_traceback(garbage)

    val = traces(jsonl_logdir)["val_loader"]
    shutil.copy(val, job / val.name)
    lines = val.read_bytes().splitlines(keepends=True)
    (job / "killed.trace.jsonl").write_bytes(b"".join(lines[:len(lines) // 2]) + lines[len(lines) // 2][:20])
    mixed = show("job", cwd=tmp_path)
    assert mixed.returncode == 1, mixed.stdout
    no_traceback(mixed)
    assert [m["name"] for m in HEADING.finditer(mixed.stdout)] == ["val_loader", "val_loader"]  # whole and torn
    assert "truncated: no run_end (its process is still writing it, or was killed)" in mixed.stdout
    assert mixed.stdout.rstrip().endswith("could not read 1 of 3 traces\n  • job/garbage.trace.jsonl is not a "
                                          "loaderscope trace: its first line is not JSON")
    document = json.loads(show("job", "--json", cwd=tmp_path).stdout)
    assert document["unreadable"] == [{"file": "job/garbage.trace.jsonl",
                                       "error": "job/garbage.trace.jsonl is not a loaderscope trace: its first line "
                                                "is not JSON"}]
    assert sorted(run["identity"]["truncated"] for run in document["runs"]) == [False, True]


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_text_from_the_trace_cannot_drive_the_terminal(jsonl_logdir: Path, tmp_path: Path) -> None:
    """A loader's name is the user's code's; in a shared logdir, another user's: an escape sequence
    in it is printed as its code, never sent to the terminal."""
    val = traces(jsonl_logdir)["val_loader"]
    text = val.read_text().replace('"name":"val_loader"', '"name":"val\\u001b[2J[bold]x[/]"')
    (tmp_path / "odd.trace.jsonl").write_text(text)
    result = show("odd.trace.jsonl", cwd=tmp_path)
    assert result.returncode == 0, result.stdout
    assert "\x1b" not in result.stdout and "val\\x1b[2J[bold]x[/] · rank 0" in result.stdout


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_on_an_80_column_terminal_every_line_fits(jsonl_logdir: Path) -> None:
    """Over SSH: a terminal of 80 columns, colours or not; nothing runs past its edge."""
    leader, follower = pty.openpty()
    process = subprocess.Popen([PYTHON, "-m", "loaderscope.cli", "show", str(jsonl_logdir)], stdin=follower,
                               stdout=follower, stderr=follower, env=environment(COLUMNS="80", LINES="24",
                                                                                 TERM="xterm"))
    os.close(follower)
    output = b""
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # EIO: the command ended and closed the terminal
            break
        if not chunk:
            break
        output += chunk
    os.close(leader)
    assert process.wait(timeout=60) == 0
    text = re.sub(r"\x1b\[[0-9;]*m", "", output.decode()).replace("\r\n", "\n")
    # but the trace's path, which the terminal wraps itself: copied from it, it has no line break
    lines = [line for line in text.splitlines() if not line.startswith("  trace ")]
    assert all(len(line) <= 80 for line in lines), max(lines, key=len)
    for section in SECTIONS:
        assert text.count(f"\n{section}\n") == 2


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_run_and_show_print_the_same_sections_of_a_run(tmp_path: Path) -> None:
    """One printing function: what `run` said as its loader ended, `show` says of the trace it wrote."""
    ran = subprocess.run([PYTHON, "-m", "loaderscope.cli", "run", "out_of_order", "--set", "dataset_size=48",
                          "--out", "o.trace.jsonl"], cwd=tmp_path, capture_output=True, text=True, timeout=240,
                         env=environment())
    assert ran.returncode == 0, ran.stdout + ran.stderr
    shown = show("o.trace.jsonl", cwd=tmp_path)
    assert shown.returncode == 0, shown.stdout
    sections = shown.stdout[shown.stdout.index("\nSettings\n"):]
    assert ran.stdout[ran.stdout.index("\nSettings\n"):].startswith(sections)  # then what only `run` adds
    assert "\nDiagnosis\n" in sections and "arrival order: " in sections and "parked in _task_info" in sections


@pytest.mark.slow
def test_show_prints_each_process_memory_as_the_summary_has_it(jsonl_logdir: Path) -> None:
    for path in traces(jsonl_logdir).values():
        memory = expected(path)["summary"]["memory"]
        assert memory is not None and memory["source"] == "smaps_rollup", memory
        text = show(str(path), cwd=jsonl_logdir).stdout
        section = text.split("\nMemory\n", 1)[1].split("\nReordering\n", 1)[0]
        rows = {line.split()[0] + (line.split()[1] if line.split()[0] == "worker" else ""): line.split()
                for line in section.splitlines() if line.startswith(("  main ", "  worker "))}
        procs = [memory["main"], *memory["workers"]]
        assert len(rows) == len(procs), section
        for proc in procs:
            row = rows["main" if proc["worker"] is None else f"worker{proc['worker']}"]
            figures = row[1:] if proc["worker"] is None else row[2:]
            assert figures[:6] == [str(proc["pid"]), f"{proc['uss'] / 1e6:.1f}", f"{proc['pss'] / 1e6:.1f}",
                                   f"{proc['rss'] / 1e6:.1f}", f"{proc['shared'] / 1e6:.1f}",
                                   f"{proc['high_rss'] / 1e6:.1f}"], (row, proc)
        assert f"host headroom {memory['headroom'] / 1e6:.1f} MB now" in section, section


@pytest.mark.slow
def test_compare_json_and_csv_give_each_runs_memory_as_show_json_does(jsonl_logdir: Path) -> None:
    """`compare --format json|csv` holds both runs' memory figures and verdicts: the very figures and
    memory findings `show --json` gives of each run (one summary, not a second computation)."""
    found = traces(jsonl_logdir)
    document = json.loads(show("runs", "--json", cwd=jsonl_logdir.parent).stdout)
    shown = {run["identity"]["name"]: run for run in document["runs"]}
    args = [str(found["train_loader"]), str(found["val_loader"])]
    compared = subprocess.run([PYTHON, "-m", "loaderscope.cli", "compare", *args, "--format", "json"], cwd=jsonl_logdir,
                              capture_output=True, text=True, timeout=120, env=environment())
    assert compared.returncode == 0, compared.stdout + compared.stderr
    memory = json.loads(compared.stdout)["memory"]
    for side, name in (("a", "train_loader"), ("b", "val_loader")):
        run = shown[name]
        want = run["summary"]["memory"]
        assert want is not None and want["source"] == "smaps_rollup" and len(want["workers"]) == 2, want
        assert {k: v for k, v in memory[side].items() if k != "verdicts"} == want
        assert memory[side]["verdicts"] == [f for f in run["findings"] if f["code"] in MEMORY_CODES]
    table = subprocess.run([PYTHON, "-m", "loaderscope.cli", "compare", *args, "--format", "csv"], cwd=jsonl_logdir,
                           capture_output=True, text=True, timeout=120, env=environment())
    rows = {r["name"]: r for r in csv.DictReader(io.StringIO(table.stdout)) if r["section"] == "memory"}
    for side, name in (("a", "train_loader"), ("b", "val_loader")):
        want = shown[name]["summary"]["memory"]
        for proc in [want["main"], *want["workers"]]:
            who = "main" if proc["worker"] is None else f"worker {proc['worker']}"
            for key in ("uss", "pss", "rss", "shared", "high_uss", "high_pss", "high_rss"):
                assert rows[f"{who} {key}"][side] == str(proc[key]), (who, key)
        assert rows["headroom_low"][side] == str(want["headroom_low"])
