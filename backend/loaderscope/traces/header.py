"""A trace's header: the format's name and version, checked before anything else is read.

Like ``torch.save``'s magic number and protocol version (torch/serialization.py, ``_legacy_save``:
``MAGIC_NUMBER`` and ``PROTOCOL_VERSION``), it names the format and its version, so a reader refuses
other files with a clear message instead of misreading them. JSON-lines traces (``traces/jsonl.py``) keep it
as their first line, Parquet traces (``traces/parquet.py``) in their key-value metadata. A module of its own
so that both formats check it and neither imports the other for it.
"""

from __future__ import annotations

import time
from typing import Any

import orjson

from loaderscope.events import SCHEMA_VERSION
from loaderscope.version import __version__

FORMAT = "loaderscope-trace"


class TraceError(ValueError):
    """A file that is not a loaderscope trace, or a damaged one; the message says which line and why."""


def header(run: str, **meta: Any) -> dict[str, Any]:
    return {"format": FORMAT, "version": SCHEMA_VERSION, "run": run, "created": time.time(),
            "loaderscope": __version__, **meta}


def meta_of(head: dict[str, Any]) -> dict[str, Any]:
    """What a header says beyond what ``header()`` writes itself: pass it to ``header()`` (or a trace
    writer) to write the same trace again; ``created`` is kept, so the copy says when the run was."""
    return {k: v for k, v in head.items() if k not in ("format", "version", "run", "loaderscope")}


def check_header(line: bytes | str, source: str) -> dict[str, Any]:
    try:
        head = orjson.loads(line)
    except orjson.JSONDecodeError:
        raise TraceError(f"{source} is not a loaderscope trace: its first line is not JSON") from None
    if not isinstance(head, dict) or head.get("format") != FORMAT:
        raise TraceError(f"{source} is not a loaderscope trace: the first line must be a header "
                         f'{{"format": "{FORMAT}", "version": {SCHEMA_VERSION}, ...}}')
    if head.get("version") != SCHEMA_VERSION:
        raise TraceError(f"{source} is a version {head.get('version')!r} trace; this loaderscope reads version "
                         f"{SCHEMA_VERSION}: open it with the loaderscope that wrote it ({head.get('loaderscope')})")
    return head


