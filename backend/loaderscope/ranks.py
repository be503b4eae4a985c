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

from loaderscope.wording import say


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


def is_padding(reads: Sequence[int], length: int, twice: int, missing: int) -> bool:
    """Whether the indices read twice are DistributedSampler's padding: with drop_last=False it gives
    every one of R ranks ceil(length / R) samples, the last ranks topped up with the first indices of the
    epoch's order (``torch/utils/data/distributed.py``: ``total_size = num_samples * num_replicas``), so
    every index is read, ranks read equally many, and R·ceil(length / R) − length of them twice."""
    ranks = len(reads)
    per_rank = -(-length // ranks) if ranks else 0
    return bool(twice) and not missing and all(n == per_rank for n in reads) and twice == per_rank * ranks - length


def shard_report(epoch_ends: Mapping[int, Mapping[str, Any]], length: int, sample: int = 10) -> dict[str, Any]:
    """Overlap and coverage of one epoch's shards across ranks (``{rank: epoch_end event}``).

    Indices that DistributedSampler's padding explains are ``padding``, not ``overlap``."""
    total = [0] * length
    per_rank, reads = {}, []
    for rank, event in sorted(epoch_ends.items()):
        counts = decode_shard(event["shard"], length)
        per_rank[rank] = sum(1 for c in counts if c)
        reads.append(sum(counts))
        for index, count in enumerate(counts):
            total[index] += count
    overlap = [i for i, c in enumerate(total) if c > 1]
    missing = [i for i, c in enumerate(total) if c == 0]
    twice = sum(1 for c in total if c == 2)
    padded = len(overlap) == twice and is_padding(reads, length, twice, len(missing))
    padding, overlap = (overlap, []) if padded else ([], overlap)
    return {
        "ranks": sorted(epoch_ends),
        "per_rank": per_rank,
        "overlap": len(overlap),
        "overlap_sample": overlap[:sample],
        "padding": len(padding),
        "padding_sample": padding[:sample],
        "missing": len(missing),
        "missing_sample": missing[:sample],
        "disjoint": not overlap,
        "complete": not missing,
    }


def shard_text(epoch: int, report: Mapping[str, Any]) -> str:
    """One epoch's shard check in words (the page's ``ranks.shardText``)."""
    if report["overlap"]:
        verdict = say("shards.overlap", indices=say("n.indices_read", n=report["overlap"]),
                      sample=", ".join(map(str, report["overlap_sample"])))
    elif report["padding"]:
        verdict = say("shards.padding", indices=say("n.indices_read", n=report["padding"]))
    else:
        verdict = say("shards.disjoint")
    coverage = say("shards.complete") if report["complete"] else say(
        "shards.missing", indices=say("n.indices_read", n=report["missing"]),
        sample=", ".join(map(str, report["missing_sample"])))
    return say("shards", epoch=epoch, verdict=verdict, coverage=coverage)


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
