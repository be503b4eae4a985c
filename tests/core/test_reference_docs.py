"""docs/reference/ names every route, subcommand, option and variable the code has.

The reference is written by hand where the contract cannot generate it (docs/reference/events.md is
generated: `loaderscope.contract --check`); these tests make a forgotten place fail instead of drift.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from loaderscope.cli.main import build_parser
from loaderscope.server.config import ServerConfig
from loaderscope.server.web.app import create_app

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "docs" / "reference"


def _text(*names: str) -> str:
    return "\n".join((REFERENCE / name).read_text() for name in names)


def _shape(path: str) -> str:
    """A route with its parameters' names left out: `/api/runs/{run_id}` and `/api/runs/{id}` agree."""
    return re.sub(r"\{[^}]*\}", "{}", path)


def _paths(routes: list[Any]) -> Iterator[str]:
    """Every route's path, through the routers the app includes (FastAPI wraps each in one)."""
    for route in routes:
        if isinstance(getattr(route, "path", None), str) and route.path:
            yield route.path
        inner = getattr(route, "original_router", None)
        if inner is not None:
            yield from _paths(inner.routes)


def test_every_route_the_app_serves_is_in_the_http_or_websocket_reference() -> None:
    app = create_app(ServerConfig(token="reference-docs-token-0123")).app
    paths = {*_paths(app.routes), *app.openapi()["paths"]}
    served = {_shape(path) for path in paths if path.startswith(("/api/", "/ws/", "/metrics"))}
    assert {"/api/runs/{}/sweeps", "/ws/ingest", "/metrics"} <= served, sorted(served)
    documented = _shape(_text("http.md", "websockets.md"))
    assert served, "the app lists no routes: the test no longer reads it"
    missing = sorted(path for path in served if path not in documented)
    assert not missing, f"add these routes to docs/reference/http.md or websockets.md: {missing}"


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    actions = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(actions[0].choices) if actions else {}


def test_every_subcommand_and_option_of_the_cli_is_in_the_cli_reference() -> None:
    reference = _text("cli.md")
    commands = _subcommands(build_parser())
    assert len(commands) >= 10, sorted(commands)
    missing = [f"loaderscope {name}" for name in commands if f"loaderscope {name}" not in reference]
    for name, sub in commands.items():
        for action in sub._actions:
            missing += [f"loaderscope {name} {option}" for option in action.option_strings
                        if option.startswith("--") and option != "--help" and option not in reference]
    assert not missing, f"add these to docs/reference/cli.md: {missing}"


def test_every_loaderscope_variable_the_code_reads_is_in_the_environment_reference() -> None:
    reference = _text("environment.md")
    sources = [*(ROOT / "backend").rglob("*.py")]
    # whole names only: `LOADERSCOPE_JOB_TABLE_` + a suffix is a prefix the table lists in full
    read = {name for path in sources for name in re.findall(r"LOADERSCOPE_[A-Z0-9_]*[A-Z0-9]\b", path.read_text())}
    assert "LOADERSCOPE_LOGDIR" in read
    missing = sorted(name for name in read if name not in reference)
    assert not missing, f"add these variables to docs/reference/environment.md: {missing}"
