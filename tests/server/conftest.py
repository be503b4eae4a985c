"""The server tests' fixtures: a real run's events (``recorded``, once per module) and a logdir that every
local user can write (``team_logdir``)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.logdirs import BATCHES, real_run


@pytest.fixture(scope="module")
def recorded() -> list[dict[str, Any]]:
    """One real 12-batch in-process run."""
    return real_run(4 * BATCHES, num_workers=0)


@pytest.fixture
def team_logdir() -> Iterator[Path]:
    """A logdir that every local user can write (no sticky bit: a team directory), outside pytest's
    private tmp (which the other user cannot reach)."""
    path = Path(tempfile.mkdtemp(prefix="loaderscope-team-"))
    path.chmod(0o777)
    yield path
    shutil.rmtree(path, ignore_errors=True)
