"""The advice on num_workers comes from the simulator fitted to the run, and every surface gives the same.

Real loops: bench/cached_loop.py (a DataLoader with real worker processes, its samples and its step
sleeps) run by ``loaderscope record`` in a subprocess, streamed to a real dashboard as it runs. The
advice must be the simulator's own answer for that recording (the choice over a sweep of the same
worker counts), ``loaderscope sim --from-trace``, ``loaderscope run``, ``GET /api/runs/{id}/advice``
and the what-if sweep must name the same count, and a recording the fit cannot replay within 10% must
get no count, with the reason. No throughput is asserted: which count the simulator names depends on
what starting workers cost on this machine at that moment; that it is the simulator's count does not.
(Whether the simulator's counts hold up when run for real side by side: bench/advice_check.py.)
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from loaderscope.model.advicetext import Advice, advice_text
from loaderscope.sim import fit_from_trace, trace_sweep
from loaderscope.sim.advice import TRUST, WORKER_COUNTS, advise, affordable
from loaderscope.sim.sweep import SATURATION, choose
from loaderscope.traces.jsonl import read_trace
from tests.live import LiveServer
from tests.recording import STARVED, environment, recorded

PYTHON = sys.executable
# Each sample 50 ms the first time a (persistent) worker reads it, 0.5 ms after, against a 50 ms step:
# the loader is the bottleneck in the first epoch, the step in the second. The fit charges each sample
# its mean over the epochs, so its replay overlaps a 25 ms fetch with the step in both: off by ~30%.
COLD_CACHE = ("workers=1", "samples=24", "batch=2", "cold=0.05", "warm=0.0005", "step=0.05", "persistent=yes")


def cli(*args: str, cwd: Path) -> str:
    done = subprocess.run([PYTHON, "-m", "loaderscope.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300, env=environment() | {"COLUMNS": "400"})
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def named(recommendation: str, workers: int) -> bool:
    """Whether a sweep's recommendation (sim.recommend) names ``workers`` as its count."""
    return any(recommendation.startswith(start) for start in (
        f"num_workers={workers} keeps the consumer fed", f"throughput levels off at num_workers={workers} ",
        f"the consumer is still starved at num_workers={workers} "))


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_advice_is_the_simulators_own_count_everywhere(tmp_path: Path, server: LiveServer) -> None:
    trace, events, run_id = recorded(tmp_path, server, *STARVED)
    advice = advise(events)
    counts = ",".join(str(n) for n in WORKER_COUNTS)
    if advice["status"] == "off":
        # A recording of a busy machine that the fit does not replay within 10% (seen at load ~15 on 2
        # cores): then every view gives the same refusal, never a count.
        assert abs(advice["error"] or 0) > TRUST, advice
        out = cli("sim", "--from-trace", str(trace), "--sweep", f"num_workers={counts}", cwd=tmp_path)
        assert f"workers: {advice_text(advice)}\n" in out
        with server.client() as http:
            served = http.get(f"/api/runs/{run_id}/advice").json()
        assert served["status"] == "off" and served["workers"] is None
        return
    assert advice["status"] in ("keep_up", "limited", "more"), advice["reason"]
    assert abs(advice["error"] or 0) <= TRUST and advice["recorded_workers"] == 1
    # the simulator's own sweep of the same counts, fitted and replayed apart from advise()
    rows = trace_sweep(events, {"num_workers": list(WORKER_COUNTS)}, fit_from_trace(events))
    choice = choose(rows)
    assert advice["workers"] == choice.row["num_workers"]
    assert advice["batches_per_s"] == pytest.approx(choice.row["batches_per_s"])
    assert [r["num_workers"] for r in advice["rows"]] == list(WORKER_COUNTS)
    assert advice == advise(events)  # deterministic: the same recording, the same advice
    text = advice_text(advice)
    assert text.startswith(f"the simulator fitted to this run predicts num_workers={advice['workers']} ")
    assert "recorded with num_workers=1" in text

    # the terminal: sim --from-trace says the same sentence, and its sweep of the same counts the same count
    out = cli("sim", "--from-trace", str(trace), "--sweep", f"num_workers={counts}", cwd=tmp_path)
    assert f"workers: {text}\n" in out
    assert named(out.rstrip().splitlines()[-1], advice["workers"]), out

    # the dashboard: the run streamed as it ran has the same advice, and its what-if sweep names the same count
    with server.client() as http:
        answer = http.get(f"/api/runs/{run_id}/advice")
        again = http.get(f"/api/runs/{run_id}/advice")  # an ended run's advice is kept
        swept = http.post(f"/api/runs/{run_id}/sweeps", json={"grid": {"num_workers": list(WORKER_COUNTS)}})
    assert answer.status_code == 200 and again.json() == answer.json()
    served = answer.json()
    assert (served["status"], served["workers"], served["recorded_workers"]) == (
        advice["status"], advice["workers"], 1)
    assert served["batches_per_s"] == pytest.approx(advice["batches_per_s"])
    assert advice_text(served) == text
    assert swept.status_code == 200 and named(swept.json()["recommendation"], advice["workers"])


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_loaderscope_run_prints_the_advice_of_the_run_it_recorded(tmp_path: Path) -> None:
    out = cli("run", "uniform", "--set", "num_workers=1", "--set", "dataset_size=32", "--set", "step_ms=2",
              "--out", str(tmp_path / "run.trace.jsonl"), cwd=tmp_path)
    advice = advise(read_trace(tmp_path / "run.trace.jsonl")[1])
    assert "Advice on num_workers (the simulator, fitted to this run)" in out
    assert f"  • {advice_text(advice)}\n" in out


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_fit_off_by_more_than_10_percent_recommends_nothing_and_says_why(tmp_path: Path,
                                                                          server: LiveServer) -> None:
    trace, events, run_id = recorded(tmp_path, server, *COLD_CACHE)
    advice = advise(events)
    assert advice["status"] == "off" and advice["workers"] is None and advice["batches_per_s"] is None
    assert abs(advice["error"] or 0) > TRUST
    off = f"off by {abs(advice['error'] or 0):.1%}"
    assert advice["reason"] is not None and advice["reason"].startswith(
        f"the simulator's replay of the recorded setting is {off} (")
    assert advice["reason"].endswith("more than the 10% it must come within: no recommendation")
    assert advice_text(advice) == f"no advice on num_workers: {advice['reason']}"

    out = cli("sim", "--from-trace", str(trace), "--sweep", "num_workers=1,2,4", cwd=tmp_path)
    assert f"workers: {advice_text(advice)}\n" in out
    assert out.rstrip().splitlines()[-1] == advice["reason"]  # said instead of the sweep's recommendation
    with server.client() as http:
        served = http.get(f"/api/runs/{run_id}/advice").json()
        swept = http.post(f"/api/runs/{run_id}/sweeps", json={"grid": {"num_workers": [1, 2, 4]}}).json()
    assert served["status"] == "off" and served["workers"] is None and off in served["reason"]
    assert swept["recommendation"] == served["reason"]


def test_the_replays_stay_within_a_sweep_s_budget_and_a_run_too_long_gets_no_advice() -> None:
    # 2,000,000 simulated events: 40 replays of a 50,000-event run, 5 of a 400,000-event one (the recorded
    # setting and the first four counts of PRIORITY besides it), not 2 of a run over 1,000,000
    assert affordable(50_000, 1) == [n for n in WORKER_COUNTS if n != 1]
    assert affordable(400_000, 2) == [1, 4, 8, 16]
    assert affordable(1_000_001, 1) == []
    start = {"kind": "run_start", "seq": 0, "t": 0.0, "run": "r", "mode": "real", "config": {"num_workers": 2}}
    advice = advise([start] * 1_000_001)  # refused by its length alone: nothing is reduced, fitted or replayed
    assert advice["status"] == "none" and advice["workers"] is None and advice["recorded_workers"] == 2
    assert advice["reason"] == ("the run holds 1,000,001 events: replaying it at two worker counts would "
                                "simulate more than the 2,000,000 events a sweep may")
    assert advise([])["reason"] == "the trace has no run_start: it does not say which loader it recorded"
    assert advise([start])["reason"] == "the run yielded no batch: nothing to advise on"


def test_the_sentence_names_the_share_the_choice_takes() -> None:
    """advice_text lives below the simulator (the diagnosis words an advice it is given), so it says the
    sweep's SATURATION in words: they must agree."""
    limited = advise_like(status="limited")
    assert f"comes within {1 - SATURATION:.0%} of the fastest count it tried" in advice_text(limited)


def advise_like(**values: Any) -> Advice:
    """An advice as advise() returns one, with ``values`` changed."""
    return Advice(**({"status": "keep_up", "workers": 3, "batches_per_s": 41.0, "waiting": 0.05, "recorded_workers": 1,
                      "recorded_batches_per_s": 14.5, "replayed_batches_per_s": 14.7, "error": 0.014, "setting": {},
                      "step_ms": 20.0, "rows": [], "reason": None} | values))
