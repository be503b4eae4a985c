"""What if, for a run of the user's own loader: POST /api/runs/{id}/sweeps fits and replays it."""

from __future__ import annotations

from typing import Any

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
    assert rows[2]["batches_per_s"] > rows[0]["batches_per_s"]  # more workers feed this loader faster
    assert "num_workers" in body["recommendation"]


def test_what_a_replay_cannot_change_is_refused_by_name(server: Any) -> None:
    run_id = watched_run(server)
    with server.client() as http:
        wrong_key = http.post(f"/api/runs/{run_id}/sweeps", json={"grid": {"batch_size": [8]}})
        wrong_value = http.post(f"/api/runs/{run_id}/sweeps", json={"grid": {"num_workers": ["4"]}})
        unknown = http.post("/api/runs/nope/sweeps", json={"grid": {"num_workers": [1]}})
    assert wrong_key.status_code == 422 and "batch_size cannot be changed" in wrong_key.json()["detail"]
    assert wrong_value.status_code == 422 and wrong_value.json()["errors"][0]["field"] == "grid.num_workers"
    assert unknown.status_code == 404
