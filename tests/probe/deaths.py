"""A dataset whose worker dies inside torch's shutdown, importable by the scripts the forensics tests run."""

from __future__ import annotations

import os
import sys
from typing import Any

import torch
from torch.utils.data import Dataset, get_worker_info


class DiesInShutdown(Dataset[torch.Tensor]):
    """Sample 1 waits inside its fetch until torch's shutdown tells the workers to stop (its
    ``_worker_loop``'s ``done_event``), then exits with code 3: the worker dies after the probe's last
    look before the shutdown, and only the shutdown sees it go (CI's failure of
    test_a_dead_worker_leaves_no_throughput_verdict on a loaded box: a SIGKILLed worker that became a
    zombie only after that look)."""

    def __len__(self) -> int:
        return 4

    def __getitem__(self, index: int) -> torch.Tensor:
        if index == 1 and get_worker_info() is not None:
            _worker_loop_local("done_event").wait(60)
            os._exit(3)
        return torch.tensor([index])


def _worker_loop_local(name: str) -> Any:
    frame = sys._getframe()
    while frame.f_code.co_name != "_worker_loop":
        frame = frame.f_back
    return frame.f_locals[name]
