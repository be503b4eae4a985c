"""Many ranks, one job: which rank is slowest to deliver each step, and do the sample shards fit.

Distributed data-parallel training runs one DataLoader per rank. Each rank's probe reports, at
every epoch end, how often it read each dataset index (a compressed count per index); here the
ranks' counts are added up: an index read by two ranks is an overlap, one read by none is missing.
Pure: events in, report out.
"""

from __future__ import annotations

import base64
import zlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any


def encode_shard(indices: Iterable[int], length: int) -> str:
    """How many times each index 0..length-1 was read (capped at 255), zlib'd and base64'd."""
    counts = bytearray(length)
    for index in indices:
        if 0 <= index < length and counts[index] < 255:
            counts[index] += 1
    return base64.b64encode(zlib.compress(bytes(counts), 6)).decode()


def decode_shard(digest: str, length: int) -> bytes:
    counts = zlib.decompress(base64.b64decode(digest), bufsize=length)
    if len(counts) != length:
        raise ValueError(f"shard digest holds {len(counts)} counts for a dataset of {length}")
    return counts


def shard_report(epoch_ends: Mapping[int, Mapping[str, Any]], length: int, sample: int = 10) -> dict[str, Any]:
    """Overlap and coverage of one epoch's shards across ranks (``{rank: epoch_end event}``)."""
    total = [0] * length
    per_rank = {}
    for rank, event in sorted(epoch_ends.items()):
        counts = decode_shard(event["shard"], length)
        per_rank[rank] = sum(1 for c in counts if c)
        for index, count in enumerate(counts):
            total[index] += count
    overlap = [i for i, c in enumerate(total) if c > 1]
    missing = [i for i, c in enumerate(total) if c == 0]
    return {
        "ranks": sorted(epoch_ends),
        "per_rank": per_rank,
        "overlap": len(overlap),
        "overlap_sample": overlap[:sample],
        "missing": len(missing),
        "missing_sample": missing[:sample],
        "disjoint": not overlap,
        "complete": not missing,
    }


# Ranks whose batches came within this of each other delivered together: no rank was last (a
# simulated job's ranks tie exactly; wall_start + t rounds to about 0.2 µs at today's epoch seconds).
TIE_S = 1e-6


def slowest_per_step(runs: Mapping[int, Sequence[Mapping[str, Any]]], epoch: int = 0) -> list[dict[str, Any]]:
    """For each step of ``epoch``, the rank whose batch came last (wall clock) and how late it was.

    Ranks step together (gradients are all-reduced), so the slowest rank's loader sets the pace.
    A step every rank delivered together (within ``TIE_S``) has no slowest rank: ``rank`` is None.
    """
    deliveries: dict[int, list[float]] = {}
    for rank, events in runs.items():
        wall0, current, times = 0.0, -1, []
        for e in events:
            if e["kind"] == "run_start":
                wall0 = e.get("wall_start", 0.0)
            elif e["kind"] == "epoch_start":
                current = e["epoch"]
            elif e["kind"] == "yield" and current == epoch:
                times.append(wall0 + e["t"])
        deliveries[rank] = times
    steps = min((len(t) for t in deliveries.values()), default=0)
    report = []
    for step in range(steps):
        at = {rank: times[step] for rank, times in deliveries.items()}
        slowest = max(at, key=at.__getitem__)
        lag = at[slowest] - min(at.values())
        report.append({"step": step, "rank": slowest if lag > TIE_S else None, "lag": lag})
    return report
