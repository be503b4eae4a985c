"""torch.hub entry points as scenarios: from the command line, and offered by a dashboard."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from loaderscope.traces.jsonl import read_trace

EXAMPLES = Path(__file__).parents[2] / "examples"


def test_run_a_hub_entry_from_the_command_line(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "loaderscope.cli", "run", "--hub", f"{EXAMPLES}:synthetic_images",
         "--set", "samples=96", "--set", "num_workers=2", "--set", "batch_size=16", "--out", "h.jsonl"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    head, events = read_trace(tmp_path / "h.jsonl")
    assert head["scenario"] == "hub:synthetic_images"
    assert sum(e["kind"] == "yield" for e in events) == 6
    start = events[0]
    assert start["config"]["dataset"] == "CompressedImages" and start["config"]["hub"].endswith("synthetic_images")


def test_bad_hub_argument_is_explained(tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, "-m", "loaderscope.cli", "run", "--hub", str(tmp_path)],
                            capture_output=True, text=True, timeout=60, env={"COLUMNS": "200", "PATH": "/usr/bin"})
    assert result.returncode == 2 and "DIR:ENTRY" in result.stdout


def test_dashboard_offers_only_registered_hub_entries(start_server: Any) -> None:
    live = start_server(hub=[f"{EXAMPLES}:length_sorted_text"])  # run processes get the entry on their argv
    with live.client() as http:
        names = [s["name"] for s in http.get("/api/scenarios").json()]
        assert "hub:length_sorted_text" in names
        refused = http.post("/api/runs", json={"scenario": "hub:/etc/passwd", "mode": "real", "params": {}})
        assert refused.status_code in (404, 422) and "hub:length_sorted_text" in refused.text
    run = live.start_run("hub:length_sorted_text", num_workers=1)
    done = live.wait_status(run["id"])
    assert done["status"] == "done", done
    assert done["statistics"]["batches"] == 25  # the entry's 400 samples in batches of 16


def test_registering_a_hub_entry_leaves_the_environment_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    from loaderscope.scenarios.catalog import get, hub_scenario, register
    from loaderscope.scenarios.hub import HubEntry
    from loaderscope.scenarios.plan import resolve

    before = dict(os.environ)
    entry = HubEntry.parse(f"{EXAMPLES}:length_sorted_text", {"samples": 64})
    registered = register(hub_scenario(entry))
    assert dict(os.environ) == before
    assert get("hub:length_sorted_text") is registered
    assert HubEntry.from_json(entry.to_json()) == entry
    plan = resolve("hub:length_sorted_text", {"num_workers": 0})
    workload = plan.build()
    assert workload.settings.batch_size is None and workload.collate_fn is not None
    assert len(workload.sampler_order().batches[0]) == 4
