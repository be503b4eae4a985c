"""The trace formats by name, the suffix of each one's files, and the variable that picks the one to write:
what the command line needs of the formats before it reads or writes a trace, without the event schema
the readers and writers import (``jsonl.py``: a command that reads no trace, as ``loaderscope job``
reads none itself, starts without it)."""

from __future__ import annotations

FORMATS = ("jsonl", "parquet")
FORMAT_ENV = "LOADERSCOPE_FORMAT"  # the format of the traces record, watch(logdir=) and the logdir write
SUFFIXES = {"jsonl": ".trace.jsonl", "parquet": ".trace.parquet"}
