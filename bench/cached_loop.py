"""A training loop over a dataset that caches what it read, for bench/advice_check.py and tests/server/test_advice.py.

Each sample takes ``cold`` seconds the first time a worker reads it and ``warm`` seconds after (the
worker's own cache: with persistent workers, every epoch after the first reads warm), and the step
sleeps ``step`` seconds. Sleeps, not CPU work: the loop's pace does not depend on how many cores
the machine has. Arguments are ``key=value``:

    .venv/bin/loaderscope record -- .venv/bin/python bench/cached_loop.py workers=1 samples=96 persistent=yes
"""

from __future__ import annotations

import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset


class Cached(Dataset[torch.Tensor]):
    def __init__(self, length: int, cold: float, warm: float) -> None:
        self.length, self.cold, self.warm = length, cold, warm
        self.seen: set[int] = set()

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> torch.Tensor:
        time.sleep(self.warm if index in self.seen else self.cold)
        self.seen.add(index)
        return torch.tensor([index])


def main(workers: str = "1", epochs: str = "2", samples: str = "48", batch: str = "4", cold: str = "0.009",
         warm: str | None = None, step: str = "0.004", persistent: str = "no") -> None:
    dataset = Cached(int(samples), float(cold), float(cold if warm is None else warm))
    loader = DataLoader(dataset, batch_size=int(batch), num_workers=int(workers),
                        persistent_workers=persistent == "yes")
    for _ in range(int(epochs)):
        for _batch in loader:
            time.sleep(float(step))  # the training step
    print("done", flush=True)


if __name__ == "__main__":
    main(**dict(arg.split("=", 1) for arg in sys.argv[1:]))
