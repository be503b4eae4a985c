"""Byte budgets for what one producer or one client can make the server hold or send.

Limits in events alone let 100 events of 4 MB take 800 MB: every budget here is in bytes. An event
over its budget is cut rather than refused (a training script's long stack or message must not end
its run), and the cut is recorded in the event itself: ``"cut": {field: bytes it had}``.
"""

from __future__ import annotations

import itertools
from typing import Any

import orjson

from loaderscope.events import COMMON_FIELDS, REQUIRED, Event
from loaderscope.traces.jobbudget import JobBudget

# One stored event, encoded: 100 KB stacks pass whole; a line stays under trace.MAX_LINE_BYTES (1 MiB),
# so every trace the server writes can be read back.
MAX_EVENT_BYTES = 256 * 1024
# What the reducer may keep of one event (its notes keep up to 1,000 of them): 1,000 x 8 KiB.
STATE_EVENT_BYTES = 8 * 1024
CUT_KEEP = 1024  # characters of JSON text a cut field keeps, so a person still sees what it was
MEMORY_BYTES = 32 * 1024 * 1024  # encoded events kept in memory per run (older ones: the trace file)
MAX_OPEN_TASKS = 65_536  # dispatched, unfinished tasks the reducer tracks per run (real loaders: thousands)
PAGE_BYTES = 4 * 1024 * 1024  # events per REST page, encoded; the page says where to continue
VIEWER_FRAME_BYTES = 1024 * 1024  # events per websocket message to a viewer
MAX_BODY_BYTES = 256 * 1024  # request bodies (a run or a sweep needs a few hundred bytes)
# One part of a Parquet trace in a logdir (traces/parquet.py), checked against its footer before a row is
# decoded: a few hundred KB of zstd can hold millions of alike rows, gigabytes once decoded. The
# writer's parts hold at most 65,536 events (parquet.ROW_GROUP_EVENTS), ~2 MB of columns.
PARQUET_PART_ROWS = 131_072
PARQUET_PART_BYTES = 32 * 1024 * 1024  # the file, and its columns decoded (the footer's sizes)
PARQUET_FOOTER_BYTES = 1024 * 1024  # parsed whole before any check (the writer's: 2-6 KB)

# One job table (GET /api/jobs/{job}/table, one at a time), each budget raised or lowered by its
# $LOADERSCOPE_JOB_TABLE_* variable: less than the CLI's, a dashboard being shared and long-lived. A rank's
# trace of 256 MiB is about an hour at 100 batches/s; a 1,024-rank job with shard digests (153 MiB of JSON
# lines, 13 MiB as Parquet) peaked at 430-490 MiB of RSS and took 6-7.5 s of CPU: 8-12 s of wall at load 5-8 on
# the 2-core VM, about 3-3.7 s on two idle cores (bench/job_table.py, 2026-11-29); past 120 s the query
# is interrupted and the slot freed for the next.
JOB_TABLE = JobBudget(trace_bytes=256 << 20, job_bytes=2 << 30, memory_bytes=1 << 30, seconds=120.0)

_KEEP_WHOLE = frozenset(COMMON_FIELDS) | {"cut"}


def encode(event: Event) -> bytes:
    # orjson's result keeps a 4 KiB buffer whatever its length: copy it to its own size, or 100k
    # stored events would hold 400 MiB instead of ~12.
    return bytes(memoryview(orjson.dumps(event, option=orjson.OPT_NON_STR_KEYS)))


def fitted(event: Event, line: bytes, budget: int) -> tuple[Event, bytes]:
    """``event`` (and its encoding) within ``budget`` bytes: its largest fields cut first.

    A cut field keeps about CUT_KEEP bytes and its JSON type (``_shortened``); an event that still does not
    fit (thousands of fields) keeps only the common and required fields. Either way ``cut`` names
    what was cut and how many bytes each had. Returns a new dict; ``event`` is not changed.
    """
    if len(line) <= budget:
        return event, line
    sizes = sorted(((len(encode(v)), k) for k, v in event.items() if k not in _KEEP_WHOLE), reverse=True)
    out, cut, total = dict(event), dict(event.get("cut") or {}), len(line)
    for size, name in sizes:
        if total <= budget or size <= CUT_KEEP:
            break
        out[name] = _shortened(out[name])
        cut[name] = size
        total -= size - len(encode(out[name]))
    out["cut"] = cut
    line = encode(out)
    if len(line) > budget:  # many small fields: keep what identifies the event
        keep = _KEEP_WHOLE | set(REQUIRED.get(str(event.get("kind")), ()))
        out = {k: (v if k in keep else None) for k, v in event.items() if k in keep}
        out["cut"] = {"fields": len(event) - len(out), "bytes": len(encode(event))}
        line = encode(out)
    return out, line


def _shortened(value: Any) -> Any:
    """``value`` in about CUT_KEEP bytes, of the same JSON type, so a page that maps a stack's frames
    still can: a string's head, a list's last items (a stack's innermost frames), a dict's first keys."""
    if isinstance(value, list):
        sizes = list(itertools.accumulate(len(encode(v)) for v in reversed(value)))
        return value[len(value) - sum(1 for s in sizes if s <= CUT_KEEP):]
    if isinstance(value, dict):
        sizes = list(itertools.accumulate(len(encode({k: v})) for k, v in value.items()))
        return dict(itertools.islice(value.items(), sum(1 for s in sizes if s <= CUT_KEEP)))
    text = value if isinstance(value, str) else encode(value).decode("utf-8", "replace")
    return text[:CUT_KEEP]


def state_view(event: Event, line: bytes) -> Event:
    """What the reducer gets: the event, or a cut copy when it is large (it may keep it in notes)."""
    if len(line) <= STATE_EVENT_BYTES or event.get("kind") == "batch_info":  # the reducer keeps 64 of those
        return event
    return fitted(event, line, STATE_EVENT_BYTES)[0]


def trim_open_tasks(tasks: dict[Any, Any], limit: int = MAX_OPEN_TASKS) -> int:
    """Forget the oldest open tasks beyond ``limit`` (down to half of it, so trimming is amortised).

    Returns how many were forgotten.
    """
    if len(tasks) <= limit:
        return 0
    oldest = list(itertools.islice(tasks, len(tasks) - limit // 2))
    for key in oldest:
        del tasks[key]
    return len(oldest)
