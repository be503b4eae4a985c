"""Jobs of several ranks for the job-table tests (server and page): a simulated job written as
``loaderscope run --ranks`` writes it, and a real torchrun job whose ranks each iterate two loaders."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from loaderscope.scenarios.plan import resolve
from loaderscope.sim import CostModel
from loaderscope.sim.job import JobRun
from loaderscope.sim.run import simulate_ranks
from loaderscope.traces.jsonl import write_trace
from loaderscope.traces.paths import trace_path
from tests.conftest import wait_for

PYTHON = sys.executable
TORCHRUN = str(Path(sys.executable).parent / "torchrun")
EPOCHS, TRAIN, VAL = 2, 64, 16  # samples; batches of 4 over the ranks: 8 and 2 a rank per epoch in a 2-rank job
SCRIPT = f'''
import os, sys, torch
import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset
from loaderscope import watch

distributed = "WORLD_SIZE" in os.environ
if distributed:
    dist.init_process_group("gloo")

def auto_dataloader(data):  # one helper builds both, and names them alike
    sampler = DistributedSampler(data, shuffle=False) if distributed else None
    return watch(DataLoader(data, batch_size=4, num_workers=1, sampler=sampler), logdir=sys.argv[1],
                 name="auto_dataloader")

train = auto_dataloader(TensorDataset(torch.arange({TRAIN}.)))
val = auto_dataloader(TensorDataset(torch.arange({VAL}.)))
for epoch in range({EPOCHS}):
    if distributed:
        train.sampler.set_epoch(epoch)
    for _ in train:
        pass
    for _ in val:
        pass
train.close()
val.close()
if distributed:
    dist.destroy_process_group()
'''


def simulated_job(logdir: Path, scenario: str, ranks: int, slow: dict[int, float],
                  values: dict[str, Any] | None = None) -> JobRun:
    """What ``loaderscope run SCENARIO --mode sim --ranks N --rank-factor R=F --logdir DIR`` writes."""
    plan = resolve(scenario, values or {})
    workload = plan.build()
    fetchers = range(max(workload.settings.num_workers, 1))
    costs = [CostModel(worker_factor={w: slow.get(rank, 1.0) for w in fetchers}) for rank in range(ranks)]
    job = simulate_ranks(workload, job=f"sim-{scenario}", scenario=scenario, params=plan.values(), costs=costs)
    for events in job.events:
        write_trace(trace_path(logdir, events[0]), events, events[0]["run"], scenario=scenario, mode="sim")
    return job


def served_job(start_server: Any, logs: Path, ranks: int, slow: dict[int, float]) -> tuple[Any, dict[int, str]]:
    """A simulated "straggler" job of ``ranks`` ranks written under ``logs``, a dashboard serving that logdir,
    and each rank's run id on it once every trace is listed."""
    simulated_job(logs, "straggler", ranks, slow)
    server = start_server(logdir=str(logs), logdir_poll=0.1)
    with server.client() as http:
        wait_for(lambda: len(http.get("/api/runs").json()) == ranks, what=f"the job's {ranks} traces listed")
        runs = {r["rank"]: r["id"] for r in http.get("/api/runs").json()}
    return server, runs


def recorded_job(directory: Path, job: str, ranks: int) -> Path:
    """The script run as a job of ``ranks`` ranks (torchrun, gloo; 1: a plain process), its traces under
    ``directory``."""
    script = directory / "train.py"
    directory.mkdir(parents=True, exist_ok=True)
    script.write_text(SCRIPT)
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOADERSCOPE_")} | {
        "OMP_NUM_THREADS": "1", "LOADERSCOPE_JOB": job}
    launch = [TORCHRUN, "--nproc-per-node", str(ranks), "--standalone"] if ranks > 1 else [PYTHON]
    done = subprocess.run([*launch, str(script), str(directory / "logs")], cwd=directory, env=env,
                          capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    return directory / "logs"
