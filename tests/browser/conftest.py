"""The browser tests' fixtures: one Debian chromium per process (``chromium``), shared by a module's
tests (``browser``), and a fresh page per test that fails it on any page error (``page``)."""

from __future__ import annotations

from collections.abc import Iterator
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
