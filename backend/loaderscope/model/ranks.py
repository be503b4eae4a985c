"""Many ranks, one job: which rank is slowest to deliver each step, and do the sample shards fit.

Distributed data-parallel training runs one DataLoader per rank. Each rank's probe reports, at
every epoch end, how often it read each dataset index (a compressed count per index); here the
ranks' counts are added up: an index read by two ranks is an overlap, one read by none is missing.
Pure: events in, report out.
"""

from __future__ import annotations

import base64
import functools
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from loaderscope.model.wording import say


def encode_shard(indices: Iterable[int], length: int) -> str:
    """How many times each index 0..length-1 was read (capped at 255), zlib'd and base64'd."""
    counts = bytearray(length)
    for index in indices:
        if 0 <= index < length and counts[index] < 255:
            counts[index] += 1
    return base64.b64encode(zlib.compress(bytes(counts), 6)).decode()


# The most indices a digest may count (a dataset of 134M samples): one decoded digest and the sum of a
# check are a byte per index each, so this bounds what reading one epoch's shards holds, whatever a
# trace claims its dataset's length is.
MAX_SHARD_LENGTH = 1 << 27


def decode_shard(digest: str, length: int) -> bytes | bytearray:
    """The per-index read counts of a digest: exactly ``length`` bytes, inflated into them and never
    one byte past them (a digest that inflates further, a zip bomb, stops there).

    libdeflate (the ``deflate`` package of the ``job`` extra) inflates into a buffer of exactly
    ``length`` bytes, ten times faster than zlib here (3 GB/s against 0.34: a 1,024-rank job's nine
    epochs of 94,208 indices are 868 MB of counts); a digest it refuses, or without it, is inflated
    by zlib a piece at a time, which says what is wrong with it.

    Raises:
        ValueError: a length outside 0..MAX_SHARD_LENGTH, or a digest that is not base64 of a zlib
            stream of ``length`` counts.
    """
    _check_length(length)
    try:
        data = base64.b64decode(digest, validate=True)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"shard digest is not base64 text: {exc}") from None
    fast = _inflate_exactly(data, length)
    if fast is not None:
        return fast
    counts, filled, inflate = bytearray(length), 0, zlib.decompressobj()
    while not inflate.eof:
        try:
            piece = inflate.decompress(data, min(_PIECE, length + 1 - filled))  # never 0: that would mean no limit
        except zlib.error as exc:
            raise ValueError(f"shard digest cannot be inflated: {exc}") from None
        data = inflate.unconsumed_tail
        if filled + len(piece) > length:
            raise ValueError(f"shard digest holds more than {length:,} counts for a dataset of {length:,}")
        counts[filled:filled + len(piece)] = piece
        filled += len(piece)
        if not piece and not data:
            break  # the stream ends before its end: a cut digest
    if filled != length or not inflate.eof:
        raise ValueError(f"shard digest holds {filled:,} counts for a dataset of {length:,}")
    return counts


_PIECE = 1 << 20  # bytes inflated at once


def _inflate_exactly(data: bytes, length: int) -> bytes | None:
    """The ``length`` bytes a zlib stream inflates to, by libdeflate; None without it, or for a stream
    that is damaged or of another length (zlib then says which)."""
    libdeflate = _libdeflate()
    if libdeflate is None or length == 0:
        return None
    try:
        counts: bytes = libdeflate.zlib_decompress(data, length)  # a buffer of ``length`` bytes, never more
    except Exception:  # deflate.DeflateError, or whatever a version of it raises: zlib says it
        return None
    return counts if len(counts) == length else None


@functools.cache
def _libdeflate() -> Any:
    """The ``deflate`` module, imported at the first check (never by the probe, which only encodes)."""
    try:
        import deflate  # type: ignore[import-not-found,unused-ignore]  # optional: the `job` extra
    except ImportError:
        return None
    return deflate


def _check_length(length: int) -> None:
    if not 0 <= length <= MAX_SHARD_LENGTH:
        raise ValueError(f"a shard digest for a dataset of {length:,} samples: "
                         f"at most {MAX_SHARD_LENGTH:,} are checked")


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

    Indices that DistributedSampler's padding explains are ``padding``, not ``overlap``. Each rank's
    digest is inflated (C) and looked at whole by numpy: the indices it read (its nonzero counts), its
    reads (their sum, only when one index was read twice), and its counts added into the sum, a byte per
    index saturated at 3 (only 0, 1, 2 and more are told apart). A rank costs one inflate and a few
    passes in C over its counts (a scan for the places of its reads cost more than the inflate), nothing
    per index in Python; the check holds the sum and one rank's counts (and their capped copy, for a rank
    that read an index more than 3 times).

    Raises:
        ValueError: a digest that cannot be decoded (``decode_shard``).
    """
    import numpy as np  # here, not at import: the probe imports this module for encode_shard

    _check_length(length)
    total = np.zeros(length, dtype=np.uint8)
    capped = np.empty(0, dtype=np.uint8)  # made for the first rank that read an index more than 3 times
    per_rank: dict[int, int] = {}
    reads: list[int] = []
    for place, rank in enumerate(sorted(epoch_ends)):
        counts = np.frombuffer(decode_shard(epoch_ends[rank]["shard"], length), dtype=np.uint8)
        most = int(counts.max()) if length else 0
        per_rank[rank] = found = int(np.count_nonzero(counts))
        reads.append(found if most <= 1 else int(counts.sum(dtype=np.int64)))
        if most > 3:
            capped = capped if len(capped) == length else np.empty(length, dtype=np.uint8)
            counts = np.minimum(counts, 3, out=capped)
        np.add(total, counts, out=total)
        if place % _SATURATE_EVERY == _SATURATE_EVERY - 1:
            np.minimum(total, 3, out=total)
    np.minimum(total, 3, out=total)
    overlap, missing = _where(total, lambda part: part > 1, sample), _where(total, lambda part: part == 0, sample)
    twice = _where(total, lambda part: part == 2, 0)[0]
    padded = overlap[0] == twice and is_padding(reads, length, twice, missing[0])
    return {
        "ranks": sorted(epoch_ends),
        "per_rank": per_rank,
        "overlap": 0 if padded else overlap[0],
        "overlap_sample": [] if padded else overlap[1],
        "padding": overlap[0] if padded else 0,
        "padding_sample": overlap[1] if padded else [],
        "missing": missing[0],
        "missing_sample": missing[1],
        "disjoint": padded or not overlap[0],
        "complete": not missing[0],
    }


_SLICE = 1 << 20  # indices of the sum looked at at once: no array of the dataset's length is made beside it
_SATURATE_EVERY = 84  # ranks added into the byte sums between two saturations: 3 + 84 × 3 = 255


def _where(total: Any, test: Callable[[Any], Any], sample: int) -> tuple[int, list[int]]:
    """How many indices' counts pass ``test``, and the first ``sample`` of them."""
    import numpy as np

    found, first = 0, list[int]()
    for start in range(0, len(total), _SLICE):
        hits = test(total[start:start + _SLICE])
        found += int(np.count_nonzero(hits))
        if len(first) < sample:
            first += [start + int(i) for i in np.flatnonzero(hits)[:sample - len(first)]]
    return found, first


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
