"""What if, in bytes: a recorded run's memory at another ``num_workers`` and ``prefetch_factor``.

From a run's ``memory`` samples (``memory.MemoryModel``, docs/DESIGN.md §3 and §10) and its batches'
``fetch_end.nbytes``, ``footprint`` takes the parts a setting scales, in the sample where the processes
held the most between them: the shared pages (counted once: every process's PSS less its USS), the main
process's USS, a worker's USS with the copy-on-read growth in it; and the mean batch's bytes.
``estimate`` puts them together for a setting:

    shared + main + num_workers × worker + prefetch_factor × num_workers × batch

(the batches in flight never more than an epoch's batches). A worker with more samples to fetch than a recorded
one (fewer workers) copies more at the recorded rate per sample fetched, up to the shared memory it has left to
copy; one with fewer is charged as recorded: copy-on-read copies whole pages (a refcount write dirties the page
an object lies in, ``torch/utils/data/dataloader.py`` forks the workers), and fewer samples drawn at random
across a list still touch about the same pages. The room is the loader's PSS plus the host's headroom at the
tightest sample: what the loader's processes could have held then. Pure: no I/O; a run without memory samples
has no footprint, and nothing is said about its memory.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from loaderscope.model.memory import MAIN, MemoryModel, uss_pss
from loaderscope.model.state import reduce

SAID_SHARE = 0.01  # the batches in flight are named in a sentence from this share of the memory on
# what ``annotate`` adds to a row
MEMORY_KEYS = ("memory", "memory_worker", "memory_in_flight", "memory_available", "memory_fits")


@dataclass(frozen=True)
class Footprint:
    """The parts of a recorded run's memory a setting scales (bytes)."""

    recorded_workers: int
    shared: int  # the processes' shared pages, counted once
    main: int  # the main process's USS at the peak
    worker: int  # a worker's USS at the peak (the mean over workers), its copy-on-read growth in it
    per_sample: float  # the workers' copy-on-read per sample fetched
    samples: int  # the samples the workers fetched over that growth, together
    room_to_copy: int  # the shared memory a worker has left to copy (the mean)
    batch: float  # a batch's bytes, the mean of fetch_end.nbytes
    batches: int | None  # batches in an epoch: no more are ever in flight
    peak: int  # the processes' PSS summed, at its high: what the recorded setting held
    available: int | None  # the loader's PSS plus the host's headroom at the tightest sample


def footprint(events: Sequence[Mapping[str, Any]]) -> Footprint | None:
    """The run's footprint, or None for a run without memory samples of its workers and main process."""
    start = next((e for e in events if e["kind"] == "run_start"), None)
    m = reduce(events).memory
    main = m.procs.get(MAIN)
    workers = [p for key, p in m.procs.items() if key != MAIN]
    if start is None or main is None or main.uss is None or any(p.uss is None for p in workers):
        return None
    config = start.get("config", {})
    recorded = int(config.get("num_workers") or 0)
    at_peak = _at_peak(events)
    # a peak without workers in it (every worker exited holding nothing of its own): each one's last USS
    peak_workers = [uss for key, (uss, _) in at_peak.items() if key != MAIN] or [p.uss or 0 for p in workers]
    copied, samples = sum(p.copied for p in workers), sum(p.copied_samples for p in workers)
    sizes = [e["nbytes"] for e in events if e["kind"] == "fetch_end" and isinstance(e.get("nbytes"), int)]
    return Footprint(
        recorded_workers=recorded, shared=sum(pss - uss for uss, pss in at_peak.values()),
        main=at_peak[MAIN][0] if MAIN in at_peak else main.uss,
        worker=round(sum(peak_workers) / len(peak_workers)) if peak_workers else 0,
        per_sample=copied / samples if samples > 0 else 0.0, samples=samples,
        room_to_copy=round(sum(max(0, (p.base_shared or 0) - p.copied) for p in workers) / len(workers))
        if workers else 0,
        batch=sum(sizes) / len(sizes) if sizes else 0.0, batches=config.get("batches_per_epoch"),
        peak=m.total_high, available=_available(m))


def _at_peak(events: Sequence[Mapping[str, Any]]) -> dict[int, tuple[int, int]]:
    """Each process's (USS, PSS) in the full sample where their PSS summed was highest (the first such). The
    parts come from that one sample, not from each process's own high: a main process sampled after its
    workers exit holds privately the pages it had shared with them, and its high USS beside the shared pages
    counted them twice."""
    full = (uss_pss(e) for e in events if e["kind"] == "memory" and not e.get("light"))
    return max(full, key=lambda procs: sum(pss for _, pss in procs.values()), default={})


def _available(m: MemoryModel) -> int | None:
    """The loader's PSS plus the headroom, at the full sample where that was least (None: no headroom known;
    a light sample has no PSS)."""
    room = [p[1] + p[3] for p in m.series if p[1] is not None and p[3] is not None]
    if m.headroom is not None:
        room.append(m.headroom + m.total_pss)
    return min(room) if room else None


def worker_bytes(fp: Footprint, num_workers: int) -> int:
    """One worker's USS at ``num_workers``: as recorded, plus the copy-on-read of the more samples it fetches."""
    if num_workers <= 0:
        return 0
    if fp.recorded_workers <= 0 or num_workers >= fp.recorded_workers:
        return fp.worker
    more = fp.samples / num_workers - fp.samples / fp.recorded_workers
    return fp.worker + round(min(fp.per_sample * more, fp.room_to_copy))


def estimate(fp: Footprint, num_workers: int, prefetch_factor: int | None) -> dict[str, Any]:
    """The loader's memory at a setting: ``memory`` in all, a worker's, the batches in flight, and whether it
    fits the room the run had (None when the run sampled no headroom)."""
    worker = worker_bytes(fp, num_workers)
    tasks = (prefetch_factor or 0) * num_workers  # torch's window: prefetch_factor tasks per worker
    in_flight = round(min(tasks, fp.batches if fp.batches is not None else tasks) * fp.batch)
    total = fp.shared + fp.main + num_workers * worker + in_flight
    return {"memory": total, "memory_worker": worker, "memory_in_flight": in_flight, "memory_available": fp.available,
            "memory_fits": None if fp.available is None else total <= fp.available}


def annotate(rows: list[dict[str, Any]], fp: Footprint | None, setting: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Each sweep row with its ``estimate``; ``setting``: the recorded values a row does not sweep. Rows
    stay as they are without a footprint."""
    if fp is None:
        return rows
    return [row | estimate(fp, int(_value(row, setting, "num_workers") or 0), _value(row, setting, "prefetch_factor"))
            for row in rows]


def _value(row: Mapping[str, Any], setting: Mapping[str, Any], key: str) -> Any:
    return row[key] if key in row else setting.get(key)


def gb(n: float) -> str:
    """Bytes in GB with one decimal, in MB below 1 GB."""
    return f"{n / 1e9:.1f} GB" if n >= 1e9 else f"{n / 1e6:.0f} MB"


def over_text(row: Mapping[str, Any], swept: Sequence[str]) -> str | None:
    """Why a row's setting would not fit the room the run had, or None when it fits (or nothing is known);
    ``swept``: the keys that name the row's setting."""
    if row.get("memory_fits") is not False:
        return None
    where = ", ".join(f"{k}={row[k]}" for k in swept if k in row) or "the recorded setting"
    workers = row["memory"] - row["memory_in_flight"]  # with the main process and the shared pages
    flying = (f" and {gb(row['memory_in_flight'])} of batches in flight"
              if row["memory_in_flight"] >= SAID_SHARE * row["memory"] else "")
    each = (f"{row['num_workers']} × {gb(row['memory_worker'])}" if "num_workers" in row
            else f"{gb(row['memory_worker'])} a worker")
    return (f"{where}: about {each} for the workers ({gb(workers)} with the main process){flying}, "
            f"more than the {gb(row['memory_available'])} available")


def over_texts(rows: Sequence[Mapping[str, Any]], swept: Sequence[str]) -> list[str]:
    """A sentence for each row of a sweep whose setting would not fit the room the run had."""
    return [text for row in rows if (text := over_text(row, swept)) is not None]
