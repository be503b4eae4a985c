"""A run moved to disk, opened in a real page: its viewer is sent to the trace file
for every event (resync), and the page shows the whole run from it. Real dashboard, real websocket
producers, real chromium."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from tests.browser.pages import WAIT_MS, Page
from tests.server.producers import batches, frames, leave, runs_by_id

pytestmark = pytest.mark.browser


def test_a_run_on_disk_opens_whole_in_the_page(start_server: Any, page: Page) -> None:
    server = start_server(max_runs=1, reconnect_grace=600)
    sent = list(batches(300))
    leave(server, "away", list(frames(iter(sent), 500)))
    leave(server, "later", [orjson.dumps(list(batches(1)))])
    assert runs_by_id(server)["away"]["on_disk"]
    pg = page.page
    pg.goto(f"{server.page_url}&run=away")
    pg.wait_for_function(f"() => window.loaderscope.player.length === {len(sent)}", timeout=WAIT_MS)
    pg.wait_for_function("() => document.getElementById('run-status').textContent === 'disconnected'",
                         timeout=WAIT_MS)
    # the picker says where the run now lives
    pg.wait_for_function("() => [...document.querySelectorAll('#run-picker option')]"
                         ".some((o) => o.value === 'away' && o.textContent.endsWith('on disk'))", timeout=WAIT_MS)
