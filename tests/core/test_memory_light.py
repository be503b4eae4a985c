"""What the model keeps of light memory samples (probe/memory.py: each process's RSS and swap only, between
full ones): a real recorded run (frontend/tests/fixtures/memory_leak.jsonl, the probe's full samples) with a
light sample after each, as the probe takes them. frontend/tests/memory-track.test.js checks the page's
mirror the same way, and reducer.test.js that the two agree."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from loaderscope.model.memory import MAIN
from loaderscope.model.state import reduce
from loaderscope.model.stats import summary
from loaderscope.sim.footprint import footprint

FIXTURES = Path(__file__).resolve().parents[2] / "frontend" / "tests" / "fixtures"


def recorded(name: str) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in (FIXTURES / f"memory_{name}.jsonl").read_bytes().splitlines() if line]


def with_light_samples(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """After each memory sample, a light one 0.05 s later whose processes hold 1 MiB more resident (so the
    latest RSS and its high-water mark are light samples')."""
    out = []
    for e in events:
        out.append(e)
        if e["kind"] == "memory":
            procs = [{**{k: p[k] for k in ("worker", "pid", "swap") if k in p}, "rss": p["rss"] + 2**20}
                     for p in e["procs"]]
            out.append({**e, "t": e["t"] + 0.05, "procs": procs, "light": True, "cost": 0.0001})
    return [{**e, "seq": i} for i, e in enumerate(out)]


def of(samples: list[dict[str, Any]], key: int) -> list[dict[str, Any]]:
    return [p for e in samples for p in e["procs"] if p.get("worker", MAIN) == key]


def test_rss_and_its_high_come_from_every_sample_uss_and_pss_from_the_full_ones() -> None:
    run = recorded("leak")
    mixed = with_light_samples(run)
    every = [e for e in mixed if e["kind"] == "memory"]
    full = [e for e in every if not e.get("light")]
    m, alone = summary(reduce(mixed))["memory"], summary(reduce(run))["memory"]
    assert m["samples"] == len(every) and m["full_samples"] == len(full) >= 3
    for p in [m["main"], *m["workers"]]:
        key = MAIN if p["worker"] is None else p["worker"]
        assert p["rss"] == of(every, key)[-1]["rss"] and p["t"] == every[-1]["t"]
        assert p["high_rss"] == max(q["rss"] for q in of(every, key)) > max(q["rss"] for q in of(full, key))
        assert p["uss"] == of(full, key)[-1]["uss"] and p["full_t"] == full[-1]["t"]
        assert p["high_uss"] == max(q["uss"] for q in of(full, key))
    # what reads USS or PSS is as the full samples alone say it: copy-on-read, the PSS sum, its trend
    for name in ("total_pss", "total_high", "growth_per_s", "trend_span"):
        assert m[name] == alone[name], name
    assert [(w["grown"], w["copied"]) for w in m["workers"]] == [(w["grown"], w["copied"]) for w in alone["workers"]]


def test_the_what_if_footprint_reads_the_full_samples_among_light_ones() -> None:
    run = recorded("copy_on_read")
    mixed, alone = footprint(with_light_samples(run)), footprint(run)
    assert mixed is not None and alone is not None
    assert (mixed.main, mixed.worker, mixed.shared, mixed.peak) == (alone.main, alone.worker, alone.shared, alone.peak)
    # the memory the loader could have had (its PSS plus the headroom, at its least): a light sample has no PSS,
    # so it is no point of that (the light copies here hold the same host figures)
    assert mixed.available == alone.available is not None


def test_the_what_if_footprint_of_a_source_without_pss_takes_its_uss() -> None:
    # psutil off Linux gives USS but no PSS: no shared pages are known, and the workers still count
    run = recorded("copy_on_read")
    for e in run:
        if e["kind"] == "memory":
            e["procs"] = [{k: v for k, v in p.items() if k != "pss"} for p in e["procs"]]
    fp = footprint(run)
    assert fp is not None and fp.shared == 0
    peak = max((e for e in run if e["kind"] == "memory" and not e.get("light")),
               key=lambda e: sum(p["uss"] for p in e["procs"]))
    workers = [p["uss"] for p in peak["procs"] if p.get("worker") is not None]
    assert fp.worker == round(sum(workers) / len(workers)) > 0
    assert fp.main == next(p["uss"] for p in peak["procs"] if p.get("worker") is None)
