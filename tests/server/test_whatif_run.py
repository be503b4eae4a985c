"""What if, for a run of the user's own loader: POST /api/runs/{id}/sweeps fits and replays it."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, Dataset

import loaderscope
from tests.conftest import wait_for


class Slow(Dataset[torch.Tensor]):
    """A loader of the user's own, not a scenario: each sample takes a few ms to read."""

    def __len__(self) -> int:
        return 96

    def __getitem__(self, index: int) -> torch.Tensor:
        import time

        time.sleep(0.003)
        return torch.tensor([index])


def watched_run(server: Any) -> str:
    loader = loaderscope.watch(DataLoader(Slow(), batch_size=4, num_workers=1), url=server.page_url,
                               name="own_loader.py")
    with loader:
        for _ in loader:
            time_step()
    run_id = loader._probe_transport.run
    wait_for(lambda: server.run(run_id)["status"] == "done", what="the watched run to end")
    return str(run_id)


def time_step() -> None:
    import time

    time.sleep(0.004)  # the training step: with one worker, loading is the bottleneck


def test_the_what_if_panel_sweeps_a_watched_loader(server: Any) -> None:
    run_id = watched_run(server)
    with server.client() as http:
        answer = http.post(f"/api/runs/{run_id}/sweeps", json={"grid": {"num_workers": [1, 2, 4]}})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    rows = body["rows"]
    assert [r["num_workers"] for r in rows] == [1, 2, 4] and body["source"] == "run"
    # Whether 4 workers beat 1 on 24 batches depends on what starting them cost on this machine at
    # that moment (under load, more than the batches gain), and a 24-batch run is as noisy as the
    # machine (the accuracy on real loops: tests/probe/test_sim_fit_real.py, bench/fit_accuracy.py). What
    # holds: the answer compares its replay of the recorded setting (1 worker) with the batches/s
    # the page shows for the run, and says which costs it fitted.
    recorded = body["fit"]["recorded"]
    assert recorded["setting"]["num_workers"] == 1
    assert rows[0]["batches_per_s"] == pytest.approx(recorded["predicted_batches_per_s"])
    assert recorded["recorded_batches_per_s"] == pytest.approx(server.run(run_id)["statistics"]["batches_per_s"])
    fitted = {cost["field"]: cost for cost in body["fit"]["costs"]}
    assert {"sample", "step_ms", "spawn_ms", "startup_ms"} <= set(fitted)
    assert "training step" in fitted["step_ms"]["text"]
    # a recommendation, or (a replay more than 10% off its noisy recording, as under load) why there is none
    off = abs(recorded["predicted_batches_per_s"] / recorded["recorded_batches_per_s"] - 1)
    if off <= 0.10:
        assert "num_workers" in body["recommendation"]
    else:
        assert body["recommendation"].startswith("the simulator's replay of the recorded setting is off by")
        assert "no recommendation" in body["recommendation"]


def test_what_a_replay_cannot_change_is_refused_by_name(server: Any) -> None:
    run_id = watched_run(server)
    with server.client() as http:
        wrong_key = http.post(f"/api/runs/{run_id}/sweeps", json={"grid": {"batch_size": [8]}})
        wrong_value = http.post(f"/api/runs/{run_id}/sweeps", json={"grid": {"num_workers": ["4"]}})
        unknown = http.post("/api/runs/nope/sweeps", json={"grid": {"num_workers": [1]}})
    assert wrong_key.status_code == 422
    assert wrong_key.json()["detail"].startswith("batch_size=[8]: cannot sweep batch_size in a replay of a "
                                                 "recorded loader")
    assert wrong_value.status_code == 422 and wrong_value.json()["errors"][0]["field"] == "grid.num_workers"
    assert unknown.status_code == 404


def test_a_setting_out_of_bounds_is_refused_alike_for_a_scenario_and_a_run(server: Any) -> None:
    run_id = server.start_run("uniform", mode="sim", dataset_size=8)["id"]
    server.wait_status(run_id)
    grid = {"num_workers": [2], "prefetch_factor": [2, 64]}
    with server.client() as http:
        scenario = http.post("/api/sweeps", json={"scenario": "uniform", "grid": grid})
        run = http.post(f"/api/runs/{run_id}/sweeps", json={"grid": grid})
    assert scenario.status_code == run.status_code == 422
    assert scenario.json() == run.json() == {
        "detail": "prefetch_factor=64: Input should be less than or equal to 16; allowed: an integer from 1 to 16",
        "errors": [{"field": "grid.prefetch_factor", "message": "Input should be less than or equal to 16",
                    "allowed": "an integer from 1 to 16"}]}
