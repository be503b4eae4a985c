"""``loaderscope job``'s printing and start-up: its table is the text rich's Table prints, on a pipe and
on a terminal, made without laying out each cell; the command loads no event schema it does not read."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from loaderscope.cli.job import print_table
from loaderscope.cli.output import PIPED_WIDTH
from tests.jobs import simulated_job

HEADERS = ["loader", "rank", "batches", "batches/s", "waiting for data", "slowest worker", "its p95", "last in",
           "worst lag"]
ROWS = [["(unnamed)", "3", "12", "383.3", "100%", "7", "20.0 ms", "5 of 12 steps", "20.0 ms"],
        ["train [bold]#2[/]", "10", "12", "41.0", "13%", "-", "-", "0 of 12 steps", "-"]]


def consoles() -> list[Console]:
    """A pipe (cli.output's), colour terminals wide and narrow (rich wraps a table wider than the console)."""
    return [Console(file=io.StringIO(), highlight=False, width=PIPED_WIDTH, soft_wrap=True),
            Console(file=io.StringIO(), highlight=False, width=200, force_terminal=True, color_system="truecolor"),
            Console(file=io.StringIO(), highlight=False, width=60, force_terminal=True, color_system="truecolor")]


def rich_table(console: Console, headers: list[str], rows: list[list[str]]) -> str:
    """The table as the command printed it with rich's Table."""
    table = Table(*headers, box=None, pad_edge=False)
    for row in rows:
        table.add_row(*map(escape, row))
    console.print(table)
    return console.file.getvalue()  # type: ignore[attr-defined]


@pytest.mark.parametrize("rows", [ROWS, [], [["tränïng", "0", "1", "1.0", "0%", "-", "-", "0 of 1 steps", "-"]]],
                         ids=["ascii", "no rows", "not ascii"])
def test_the_job_table_is_the_text_riches_table_prints(rows: list[list[str]]) -> None:
    for mine, theirs in zip(consoles(), consoles(), strict=True):
        print_table(mine, HEADERS, rows)
        assert mine.file.getvalue() == rich_table(theirs, HEADERS, rows)  # type: ignore[attr-defined]


# Imported after the command ran, the modules it must not need: the event schema (msgspec) and the
# readers of single traces load only in the commands that read them (show, compare, export).
LOADED = """
import sys
from loaderscope.cli.main import main
code = main(["job", sys.argv[1]])
print(code, sorted(m for m in sys.modules if m in ("msgspec", "loaderscope.events", "loaderscope.traces.jsonl")))
"""


def test_the_job_command_starts_without_the_event_schema(tmp_path: Path) -> None:
    simulated_job(tmp_path / "job", "uniform", 2, {}, {"dataset_size": 64, "epochs": 1})
    ran = subprocess.run([sys.executable, "-c", LOADED, str(tmp_path / "job")], capture_output=True, text=True,
                         timeout=120)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.splitlines()[-1] == "0 []", ran.stdout
