"""How the commands print tables: to a terminal at its width, piped at full width, or as CSV / JSON.

Rich lays a table out to the console's width, and a console whose stdout is not a terminal is 80
columns wide: a sweep of two parameters piped into ``less`` or a file came out with every row
broken in two. Piped, the console is as wide as the widest line; ``--format csv|json`` gives the
rows to another program instead.
"""

from __future__ import annotations

import csv
import io
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import orjson
from rich.console import Console

FORMATS = ("table", "csv", "json")
PIPED_WIDTH = 10_000  # no line a command prints is wider: rich then wraps nothing


def stdout_console() -> Console:
    """The console for stdout: the terminal's width, or no wrapping when stdout is a pipe or a file."""
    if sys.stdout.isatty():
        return Console(highlight=False)
    return Console(highlight=False, width=PIPED_WIDTH, soft_wrap=True)


def add_format_option(parser: Any) -> None:
    parser.add_argument("--format", choices=FORMATS, default="table",
                        help="table (default; full width when piped), csv (one row per line) or json")


def to_csv(rows: Sequence[Mapping[str, Any]]) -> str:
    """Rows as CSV with a header line; keys in the order the first row has them, nested values as JSON."""
    out = io.StringIO()
    if rows:
        writer = csv.DictWriter(out, fieldnames=list(rows[0]), lineterminator="\n", extrasaction="ignore")
        writer.writeheader()
        writer.writerows({k: _cell(v) for k, v in row.items()} for row in rows)
    return out.getvalue()


def _cell(value: Any) -> Any:
    if value is None:
        return ""
    return orjson.dumps(value).decode() if isinstance(value, (dict, list)) else value


def to_json(value: Any) -> str:
    return orjson.dumps(value, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY, default=str).decode()
