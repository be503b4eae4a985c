"""Reading GET /metrics back, for the metrics tests: prometheus_client's parser, and a series by its
name and labels; and a loader whose batches arrive out of order (``Uneven``)."""

from __future__ import annotations

import time
from typing import Any

import httpx
import torch
from prometheus_client.parser import text_string_to_metric_families
from torch.utils.data import Dataset

Series = dict[tuple[str, frozenset[tuple[str, str]]], float]


def parse(text: str) -> Series:
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def scrape(server: Any) -> Series:
    answer = httpx.get(f"{server.url}/metrics", headers=server.headers, timeout=30)
    assert answer.status_code == 200, answer.text
    return parse(answer.text)


def of(series: Series, name: str, **labels: str) -> dict[frozenset[tuple[str, str]], float]:
    """The samples of ``name`` whose labels include ``labels``."""
    wanted = set(labels.items())
    return {found: value for (n, found), value in series.items() if n == name and wanted <= found}


def one(series: Series, name: str, **labels: str) -> float:
    found = of(series, name, **labels)
    assert len(found) == 1, f"{name}{labels}: {found}"
    return next(iter(found.values()))


def listing(server: Any) -> list[dict[str, Any]]:
    with server.client() as http:
        runs: list[dict[str, Any]] = http.get("/api/runs").json()
    return runs


def per_worker(series: Series, name: str, run: str) -> dict[str, float]:
    return {dict(labels)["worker"]: value for labels, value in of(series, name, run=run).items()}


class Uneven(Dataset[torch.Tensor]):
    """Every fourth batch is slow, so later ones overtake it and park in the reorder buffer."""

    def __len__(self) -> int:
        return 48

    def __getitem__(self, index: int) -> torch.Tensor:
        time.sleep(0.03 if (index // 4) % 4 == 0 else 0.002)
        return torch.tensor([index])
