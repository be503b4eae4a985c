"""A run whose producer is connected but sends nothing is shown as silent, with its last event's age."""

from __future__ import annotations

import threading
from typing import Any

import orjson
import pytest

from tests.browser.pages import WAIT_MS, Page

pytestmark = pytest.mark.browser

START = [{"kind": "run_start", "t": 0.0, "mode": "real", "name": "hung_train.py", "config": {"num_workers": 1}},
         {"kind": "epoch_start", "t": 0.0, "epoch": 0}]


def test_a_silent_producer_is_shown_as_silent_with_its_age(start_server: Any, page: Page) -> None:
    server = start_server(silent_after=1.0)
    with server.connect("/ws/ingest") as producer:  # connected, then quiet: a hung training script
        run_id = orjson.loads(producer.recv(timeout=5))["run"]
        producer.send(orjson.dumps(START))
        pg = page.page
        pg.goto(f"{server.page_url}&run={run_id}")
        badge = pg.locator('[data-testid="run-status"]')
        pg.wait_for_function("() => document.querySelector('[data-testid=run-status]').dataset.status === 'silent'",
                             timeout=WAIT_MS)
        assert (badge.text_content() or "").startswith("silent ")
        assert "sent nothing" in (badge.get_attribute("title") or "")
        speaking = threading.Event()

        def speak() -> None:  # it speaks again, as a training loop does
            t = 1.0
            while not speaking.wait(0.2):
                t += 0.2
                producer.send(orjson.dumps([{"kind": "consumer_stuck", "t": t, "elapsed": 0.1}]))

        talker = threading.Thread(target=speak)
        talker.start()
        try:
            pg.wait_for_function("() => document.querySelector('[data-testid=run-status]').dataset.status"
                                 " === 'running'",
                                 timeout=WAIT_MS)
        finally:
            speaking.set()
            talker.join()
