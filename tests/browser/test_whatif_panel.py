"""The "What if…" panel: a sweep of simulated runs drawn as a chart, a table and a recommendation.

Not slow: a sweep of `uniform` over three worker counts on 96 samples simulates in well under a second.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest

from loaderscope.model.advicetext import advice_text
from tests.browser.pages import WAIT_MS, Page
from tests.recording import STARVED, recorded

pytestmark = pytest.mark.browser

SHOTS = Path(os.environ.get("LOADERSCOPE_SHOTS", "/tmp/loaderscope-shots"))


def open_sweep(pg: Any, server: Any, scenario: str, **params: Any) -> None:
    pg.goto(server.page_url)
    pg.wait_for_selector(f'#scenario option[value="{scenario}"]', state="attached", timeout=WAIT_MS)
    pg.select_option("#scenario", scenario)
    if params:
        pg.click("#params-box summary")
        for name, value in params.items():
            pg.fill(f"#param-{name}", str(value))


def test_sweep_num_workers_draws_chart_table_and_recommendation(server: Any, page: Page) -> None:
    pg = page.page
    open_sweep(pg, server, "uniform", dataset_size=96)
    assert pg.input_value("#sweep-key") == "num_workers"
    assert pg.input_value("#sweep-values") == "1,2,4,8"  # the default a first-time user sees
    pg.fill("#sweep-values", "1,2,4")
    pg.click("#btn-sweep")
    pg.wait_for_selector('[data-testid="sweep-chart"][data-points="3"]', timeout=WAIT_MS)
    rows = pg.locator('[data-testid="sweep-row"]')
    assert rows.count() == 3
    assert [rows.nth(i).locator("td").first.text_content() for i in range(3)] == ["1", "2", "4"]
    rec = pg.text_content('[data-testid="sweep-recommendation"]') or ""
    assert "num_workers" in rec
    assert pg.get_attribute('[data-testid="sweep-chart"]', "data-series") == "1"
    SHOTS.mkdir(parents=True, exist_ok=True)
    pg.locator("#sweep").scroll_into_view_if_needed()
    pg.locator("#sweep").screenshot(path=str(SHOTS / "sweep.png"))


def test_sweep_errors_next_to_the_field(server: Any, page: Page) -> None:
    pg = page.page
    page.expected_status.add(422)
    open_sweep(pg, server, "uniform", dataset_size=96)
    pg.fill("#sweep-values", "1,two")  # the server refuses "two" for num_workers: said next to the values
    pg.click("#btn-sweep")
    pg.wait_for_selector("#sweep-values-error:not([hidden])", timeout=WAIT_MS)
    assert "num_workers = 1,two" in (pg.text_content("#sweep-values-error") or "")
    SHOTS.mkdir(parents=True, exist_ok=True)
    pg.locator("#sweep").screenshot(path=str(SHOTS / "sweep-error.png"))
    pg.fill("#sweep-values", "1,2,3,4,5,6,7")  # 7 × 6 = 42 combinations: refused before sending
    pg.select_option("#sweep-key2", "batch_size")
    pg.fill("#sweep-values2", "1,2,3,4,5,6")
    pg.click("#btn-sweep")
    pg.wait_for_selector("#sweep-values2-error:not([hidden])", timeout=WAIT_MS)
    assert "36" in (pg.text_content("#sweep-values2-error") or "")


def test_what_if_replays_the_open_real_run_s_own_loader(server: Any, page: Page) -> None:
    """A real run (here a built-in scenario run for real; a watched script's run is the same to the
    panel) is swept as itself: costs fitted to its fetches, its own batches replayed."""
    run = server.start_run("uniform", num_workers=1, dataset_size=64, sample_ms=4, step_ms=2)
    server.wait_status(run["id"])
    pg = page.page
    pg.goto(f"{server.page_url}&run={run['id']}")
    option = pg.locator('#sweep-target option[value="run"]')
    pg.wait_for_function("() => !document.querySelector('#sweep-target option[value=run]').disabled", timeout=WAIT_MS)
    assert "own loader" in (option.text_content() or "")
    pg.select_option("#sweep-target", "run")
    assert sorted(pg.eval_on_selector_all("#sweep-key option", "os => os.map((o) => o.value)")) == sorted(
        ["num_workers", "prefetch_factor", "persistent_workers", "in_order", "pin_memory"])
    pg.fill("#sweep-values", "1,2,4")
    pg.click("#btn-sweep")
    pg.wait_for_selector('[data-testid="sweep-chart"][data-points="3"]', timeout=WAIT_MS)
    assert "replay" in (pg.text_content("#sweep-status") or "")
    said = pg.text_content('[data-testid="sweep-recommendation"]') or ""
    # a recording a load spike cut replays off by more than 10%, and the panel then says so instead of advising
    off = re.search(r"replay of the recorded setting is off by (\d+\.\d)%.*no recommendation", said)
    assert "num_workers" in said or (off and float(off[1]) > 10), said
    SHOTS.mkdir(parents=True, exist_ok=True)
    pg.locator("#sweep").scroll_into_view_if_needed()
    pg.locator("#sweep").screenshot(path=str(SHOTS / "sweep-run.png"))


def test_the_users_own_sweep_is_not_replaced_by_advice_landing_after_it(server: Any, page: Page) -> None:
    """The run's advice is held back until the user has typed values and pressed Sweep: it lands while
    the user's sweep waits for the server's one slot, and must not replace what the user asked for."""
    run = server.start_run("uniform", num_workers=1, dataset_size=64, sample_ms=4, step_ms=2)
    server.wait_status(run["id"])
    pg = page.page
    held: list[Any] = []
    pg.route("**/advice", lambda route: held.append(route))
    # the page asks for the advice once it knows the run ended: on a loaded CI box that came after a click
    # the test made at once, and the sweep then had no advice to wait for
    with pg.expect_request("**/advice", timeout=WAIT_MS):
        pg.goto(f"{server.page_url}&run={run['id']}")
        pg.wait_for_function("() => !document.querySelector('#sweep-target option[value=run]').disabled",
                             timeout=WAIT_MS)
        pg.wait_for_function("() => document.querySelector('#sweep-target').value === 'run'", timeout=WAIT_MS)
    pg.fill("#sweep-values", "1,3")
    pg.click("#btn-sweep")
    pg.wait_for_function("() => document.querySelector('#sweep-status').textContent.includes('advice')",
                         timeout=WAIT_MS)
    assert len(held) == 1
    held[0].continue_()
    pg.wait_for_selector('[data-testid="sweep-chart"][data-points="2"]', timeout=WAIT_MS)
    assert pg.input_value("#sweep-values") == "1,3"
    rows = pg.locator('[data-testid="sweep-row"]')
    assert [rows.nth(i).locator("td").first.text_content() for i in range(rows.count())] == ["1", "3"]
    # the advice did land: the own-loader line gives the step fitted to the run's events
    pg.wait_for_function("() => document.querySelector('[data-testid=sweep-own]').textContent.includes('fitted')",
                         timeout=WAIT_MS)


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_the_panel_starts_on_the_viewed_run_s_own_loader_with_its_advice(server: Any, page: Page,
                                                                       tmp_path: Path) -> None:
    """A recorded run of a script's own loader (bench/cached_loop.py under ``loaderscope record``, streamed to
    the dashboard) opened in the page: the what-if panel answers for that loader, not for the scenario
    under "Start a run": its recorded settings, its fitted step, and the advice the server gives for it,
    drawn from the replays the advice was chosen from."""
    trace, _events, run_id = recorded(tmp_path, server, *STARVED)
    with server.client() as http:
        advice = http.get(f"/api/runs/{run_id}/advice").json()
    assert advice["status"] != "none", advice["reason"]
    pg = page.page
    pg.goto(f"{server.page_url}&run={run_id}")
    counts = len(advice["rows"])
    pg.wait_for_selector(f'[data-testid="sweep-chart"][data-points="{counts}"]', timeout=WAIT_MS)
    assert pg.input_value("#sweep-target") == "run"
    assert pg.input_value("#sweep-key") == "num_workers"
    assert pg.input_value("#sweep-values") == ",".join(str(r["num_workers"]) for r in advice["rows"])
    own = pg.text_content('[data-testid="sweep-own"]') or ""
    assert own.startswith("this run's own loader (loader), as recorded: in_order=true, num_workers=1, "), own
    assert f"its training step {advice['step_ms']:.1f} ms per batch, fitted to its events" in own
    rec = pg.text_content('[data-testid="sweep-recommendation"]') or ""
    assert rec == f"Recommendation: {advice_text(advice)}"
    rows = pg.locator('[data-testid="sweep-row"]')
    assert [rows.nth(i).locator("td").first.text_content() for i in range(counts)] == [
        str(r["num_workers"]) for r in advice["rows"]]
    SHOTS.mkdir(parents=True, exist_ok=True)
    pg.locator("#sweep").scroll_into_view_if_needed()
    pg.locator("#sweep").screenshot(path=str(SHOTS / "sweep-advice.png"))


def test_a_sweep_pressed_while_the_servers_slot_is_held_waits_for_it(server: Any, page: Page) -> None:
    """The server replays one sweep at a time (another page's, or a run's advice): a sweep asked for
    meanwhile gets 429, and the panel asks again until the slot is free, instead of giving up."""
    run = server.start_run("uniform", num_workers=1, dataset_size=64, sample_ms=4, step_ms=2)
    server.wait_status(run["id"])
    pg = page.page
    page.expected_status.add(429)
    refused: list[str] = []

    def busy_once(route: Any) -> None:  # the first POST finds the slot held, as a 429 from the server says
        if route.request.method == "POST" and not refused:
            refused.append(route.request.url)
            route.fulfill(status=429, content_type="application/json", body='{"detail": "a sweep is running"}')
        else:
            route.continue_()

    pg.route("**/sweeps", busy_once)
    asked: list[str] = []  # what the page asked of the server and what came back: said if the chart never comes
    pg.on("request", lambda r: asked.append(f"{r.method} {r.url.split('/api/')[-1]}") if "/api/" in r.url else None)
    pg.on("response", lambda r: asked.append(f"{r.status} {r.url.split('/api/')[-1]}") if "/api/" in r.url else None)
    pg.goto(f"{server.page_url}&run={run['id']}")
    pg.wait_for_function("() => !document.querySelector('#sweep-target option[value=run]').disabled", timeout=WAIT_MS)
    pg.select_option("#sweep-target", "run")
    pg.fill("#sweep-values", "1,2")
    pg.click("#btn-sweep")
    try:
        pg.wait_for_selector('[data-testid="sweep-chart"][data-points="2"]', timeout=WAIT_MS)
    except Exception as failed:  # a flake seen twice under load: say where the panel was
        status = pg.evaluate("() => [document.getElementById('sweep-status').textContent,"
                             " document.getElementById('sweep-error').textContent]")
        raise AssertionError(f"{failed}\npanel: {status}\nrequests: {asked}\nrefused: {refused}") from None
    assert refused and pg.locator("#sweep-error").is_hidden()
