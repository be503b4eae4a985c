"""The browser tests' fixtures: one Debian chromium per process (``chromium``), shared by a module's
tests (``browser``), a fresh page per test that fails it on any page error (``page``), and recordings
made once per run whatever worker asks (``made_once``)."""

from __future__ import annotations

import fcntl
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.browser.pages import ARGS, CHROMIUM, Page


@pytest.fixture(scope="session")
def chromium() -> Iterator[Any]:
    """Debian's chromium through Playwright, launched once per process (``browser`` below)."""
    playwright = pytest.importorskip("playwright.sync_api")
    if not Path(CHROMIUM).exists():
        pytest.skip(f"{CHROMIUM} is not installed (apt-get install chromium)")
    with playwright.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        yield b
        b.close()


@pytest.fixture(scope="module")
def browser(chromium: Any) -> Any:
    """The process's one chromium, for the tests of a module."""
    return chromium


@pytest.fixture
def page(browser: Any) -> Iterator[Page]:
    p = Page(browser)
    yield p
    p.close()
    assert not p.errors, "\n".join(p.errors)


@pytest.fixture
def view_page(browser: Any) -> Any:
    """A page factory: ``open(scheme, width, height)``; every page's errors fail the test."""
    pages: list[Page] = []

    def open_page(scheme: str = "dark", width: int = 1440, height: int = 900) -> Any:
        p = Page(browser, color_scheme=scheme)
        p.page.set_viewport_size({"width": width, "height": height})
        pages.append(p)
        return p.page

    yield open_page
    errors = [e for p in pages for e in p.errors]
    for p in pages:
        p.close()
    assert not errors, "\n".join(errors)


@pytest.fixture(scope="session")
def made_once(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str, Callable[[Path], None]], Path]:
    """``made_once(NAME, make)``: a directory that ``make(directory)`` fills once per pytest run, by the first
    pytest-xdist worker to ask; the others wait for it and read the same one. A module-scoped recording was
    otherwise made again by each worker its tests went to (a minute of both cores for test_compare_memory.py's):
    scripts/test.sh's ``--dist loadgroup`` cannot keep them on one worker, as xdist 3.8 names a test's group in
    its ``_nodeid``, which pytest 9 no longer reads. Every worker's temporary directory is in the run's."""
    base = tmp_path_factory.getbasetemp()
    run = base.parent if "PYTEST_XDIST_WORKER" in os.environ else base

    def once(name: str, make: Callable[[Path], None]) -> Path:
        directory = run / f"once-{name}"
        with (run / f"once-{name}.lock").open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released as the file closes
            if not (run / f"once-{name}.made").exists():  # a worker that failed to make it left no mark
                shutil.rmtree(directory, ignore_errors=True)
                directory.mkdir()
                make(directory)
                (run / f"once-{name}.made").touch()
        return directory

    return once
