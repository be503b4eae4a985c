"""``ranks.shard_report`` against a count per index in plain Python: the shards real samplers give
(torch's DistributedSampler, padded or not), shards that overlap or miss indices, an index read
hundreds of times, and more ranks than one saturation of the byte sums covers (84)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import pytest
from torch.utils.data import DistributedSampler

from loaderscope.model.ranks import encode_shard, shard_report


def oracle(shards: dict[int, Sequence[int]], length: int, sample: int = 10) -> dict[str, Any]:
    """What shard_report says of these shards, told index by index."""
    per_index = Counter(i for indices in shards.values() for i in set(indices) if 0 <= i < length)
    counts = {rank: Counter(i for i in indices if 0 <= i < length) for rank, indices in shards.items()}
    reads = [sum(min(n, 255) for n in counts[rank].values()) for rank in sorted(shards)]
    total = {i: sum(min(counts[rank][i], 255, 3) for rank in shards) for i in per_index}
    overlap = sorted(i for i, n in total.items() if n > 1)
    missing = [i for i in range(length) if i not in per_index]
    twice = sum(1 for n in total.values() if n == 2)
    per_rank_reads = -(-length // len(shards))
    padded = bool(twice) and twice == len(overlap) and not missing and all(n == per_rank_reads for n in reads) \
        and twice == per_rank_reads * len(shards) - length
    return {"ranks": sorted(shards), "per_rank": {rank: len(counts[rank]) for rank in sorted(shards)},
            "overlap": 0 if padded else len(overlap), "overlap_sample": [] if padded else overlap[:sample],
            "padding": len(overlap) if padded else 0, "padding_sample": overlap[:sample] if padded else [],
            "missing": len(missing), "missing_sample": missing[:sample],
            "disjoint": padded or not overlap, "complete": not missing}


def report_of(shards: dict[int, Sequence[int]], length: int) -> dict[str, Any]:
    return shard_report({rank: {"shard": encode_shard(indices, length)} for rank, indices in shards.items()}, length)


def sampled(length: int, ranks: int, drop_last: bool) -> dict[int, list[int]]:
    """Each rank's indices of one epoch, as torch's DistributedSampler gives them (shuffled)."""
    return {rank: list(DistributedSampler(range(length), num_replicas=ranks, rank=rank, shuffle=True, seed=3,
                                          drop_last=drop_last)) for rank in range(ranks)}


@pytest.mark.parametrize(("length", "ranks", "drop_last"), [(1000, 8, False), (1003, 8, False), (1003, 8, True),
                                                            (5000, 200, False)])
def test_distributed_samplers_shards_are_told_as_an_index_count_tells_them(length: int, ranks: int,
                                                                           drop_last: bool) -> None:
    shards = sampled(length, ranks, drop_last)
    report = report_of(shards, length)
    assert report == oracle(shards, length)
    assert report["disjoint"]
    assert report["complete"] == (not drop_last or length % ranks == 0)


def test_overlapping_and_missing_shards_across_more_ranks_than_one_saturation() -> None:
    # 200 ranks: each reads its own stride, every rank also reads indices 0-4, and no rank reads 990-999
    length = 1000
    shards = {rank: [i for i in range(rank, 990, 200)] + list(range(5)) for rank in range(200)}
    report = report_of(shards, length)
    assert report == oracle(shards, length)
    assert report["overlap"] == 5 and report["missing"] == 10 and not report["disjoint"]


def test_an_index_read_hundreds_of_times_is_an_overlap_and_its_reads_are_capped() -> None:
    length = 64
    shards = {0: [7] * 300 + list(range(0, 32)), 1: list(range(32, 64)) + [40, 40, 40, 40], 2: [40]}
    report = report_of(shards, length)
    assert report == oracle(shards, length)
    assert report["per_rank"] == {0: 32, 1: 32, 2: 1}
    assert report["overlap"] == 2 and report["overlap_sample"] == [7, 40]  # a rank read 7 again: an overlap too


def test_an_empty_dataset_has_nothing_to_check() -> None:
    assert report_of({0: [], 1: []}, 0) == oracle({0: [], 1: []}, 0)
