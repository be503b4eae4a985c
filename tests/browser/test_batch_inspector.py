"""The batch inspector on a live run: structure and sizes by default, values only when asked."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.browser.pages import WAIT_MS, Page

pytestmark = pytest.mark.browser


def test_values_of_a_batch_come_only_when_asked(server: Any, page: Page, tmp_path: Path) -> None:
    pg = page.page
    # Values are asked of a running loader: the run must outlast a page loading on a busy machine
    # (600 samples ended in 1.5 s, before the page showed the button); it is stopped at the end.
    run = server.start_run("uniform", num_workers=2, dataset_size=20_000, sample_ms=5.0)
    pg.goto(f"{server.page_url}&run={run['id']}")
    pg.wait_for_selector("#inspector-card:not([hidden])", timeout=WAIT_MS)
    options = pg.locator("#inspector-pick option")
    assert "with values" not in (options.first.text_content() or "")
    assert pg.locator("#inspector code").count() == 0  # no values until asked
    pg.get_by_test_id("inspect-values").click()
    pg.wait_for_function("() => [...document.querySelectorAll('#inspector-pick option')]"
                         ".some(o => o.textContent.includes('with values'))", timeout=WAIT_MS)
    value = pg.evaluate("() => [...document.querySelectorAll('#inspector-pick option')]"
                        ".find(o => o.textContent.includes('with values')).value")
    pg.select_option("#inspector-pick", value)
    pg.wait_for_selector("#inspector code", timeout=WAIT_MS)
    assert pg.locator("#inspector code").first.text_content().startswith("[")
    pg.screenshot(path=str(tmp_path / "inspector.png"), full_page=True)
    with server.client() as http:
        http.post(f"/api/runs/{run['id']}/control", json={"action": "stop"})
