"""A logdir job in the page: the server's table of its 40 ranks (GET /api/jobs/{job}/table) names
the slow rank, keeps only a window of rows in the page as it scrolls, and opens a rank's stream
only when its row is clicked; a job of two loaders is its ranks × its loaders, never more ranks."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tests.browser.pages import VIEWPORT, WAIT_MS
from tests.conftest import wait_for
from tests.jobs import recorded_job, served_job, simulated_job

pytestmark = pytest.mark.browser

RANKS, SLOW = 40, 7


def test_a_logdir_jobs_table_is_asked_for_from_the_runs_info_not_its_stream(
        browser: Any, start_server: Any, tmp_path: Path) -> None:
    """The open rank's info names its job: the page asks for the table then, without waiting for its
    stream to deliver the run_start (which took 0.4 s more on a loaded box, bench/job_view.py). On its
    way it asks for nothing it does not need: the run list once (the rank's info has its logdir path),
    and no module of the Parquet reader (they load when a Parquet trace is opened). The rank it is, its info
    says too: its row of the table is marked from the first."""
    server, runs = served_job(start_server, tmp_path / "logs", 3, {2: 3.0})
    page = browser.new_page(viewport=VIEWPORT)
    asked: list[str] = []
    page.on("request", lambda request: asked.append(request.url))
    # the rank's events never come: its websocket answered by no server, its pages of events refused
    page.route_web_socket(re.compile(r".*/ws/runs/.+"), lambda ws: None)
    page.route(re.compile(r".*/api/runs/[^/]+/events.*"), lambda route: route.abort())
    page.goto(f"{server.page_url}&run={runs[1]}")
    sentence = page.get_by_test_id("job-slowest")
    sentence.wait_for(timeout=WAIT_MS)
    assert sentence.get_attribute("data-rank") == "2"
    assert page.evaluate("() => window.loaderscope.player.length") == 0, "no event of the rank arrived"
    # ... yet the open run is rank 1, as its info says: its row is the one marked (a CI run saw rank 0's)
    assert page.evaluate("() => window.loaderscope.track.rank") == 1
    assert page.locator("[data-testid=job-row].selected").get_attribute("data-rank") == "1"
    assert [url for url in asked if url.endswith("/api/runs")] == [f"{server.url}/api/runs"]
    assert not [url for url in asked if re.search(r"parquet|hyparquet|zstddec", url)]


@pytest.mark.slow
def test_a_logdir_jobs_table_scrolls_names_the_slow_rank_and_opens_a_rank_on_click(
        browser: Any, start_server: Any, tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    simulated_job(logs, "straggler", RANKS, {SLOW: 3.0})
    server = start_server(logdir=str(logs), logdir_poll=0.1)
    with server.client() as http:
        wait_for(lambda: len(http.get("/api/runs").json()) == RANKS, what=f"the job's {RANKS} traces listed")
        runs = {r["rank"]: r["id"] for r in http.get("/api/runs").json()}
        table = http.get("/api/jobs/sim-straggler/table").json()
    assert table["loaders"][0]["slowest"]["rank"] == SLOW
    assert {row["rank"]: row["dashboard_run"] for row in table["ranks"]} == runs  # the page opens a rank by it
    figures = {row["rank"]: row for row in table["ranks"]}

    page = browser.new_page(viewport=VIEWPORT)
    sockets: list[str] = []
    page.on("websocket", lambda ws: sockets.append(ws.url))
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url))
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.goto(f"{server.page_url}&run={runs[0]}")
    sentence = page.get_by_test_id("job-slowest")
    sentence.wait_for(timeout=WAIT_MS)
    assert sentence.get_attribute("data-rank") == str(SLOW)
    assert (sentence.text_content() or "").startswith(
        f"rank {SLOW} is the slowest: last to deliver {table['loaders'][0]['slowest']['steps']}"
        f" of {len(table['steps'])} steps")

    shards = page.get_by_test_id("shards").text_content() or ""  # 40 ranks of 17 samples: 24 of 656 padded
    assert "epoch 0 shards: padding: 24 indices read twice" in shards and "complete ✓" in shards, shards
    rows = page.get_by_test_id("job-row")
    seen: dict[int, str] = {}
    scroller = page.get_by_test_id("job-vtable").locator(".vscroll")
    height = scroller.evaluate("s => s.scrollHeight")
    view = scroller.evaluate("s => s.clientHeight")
    assert height > view, "40 rows do not fit: the table scrolls"
    for top in range(0, height, view // 2):
        scroller.evaluate("(s, top) => { s.scrollTop = top; }", top)
        first = min(RANKS - 1, top // 22)
        page.wait_for_function(f"() => document.querySelector(\"[data-testid=job-row][data-rank='{first}']\")",
                               timeout=WAIT_MS)
        in_dom = rows.count()
        assert 0 < in_dom < RANKS, f"{in_dom} rows in the page: only a window of the {RANKS}"
        for rank, text in rows.evaluate_all("rs => rs.map(r => [Number(r.dataset.rank), r.textContent])"):
            seen[rank] = text
    assert sorted(seen) == list(range(RANKS)), "every rank's row shows up as the table scrolls"
    for rank, text in seen.items():
        assert f"{figures[rank]['batches_per_s']:.1f}" in text and f"{figures[rank]['input_bound']:.0%}" in text, rank
    opened = [url for url in sockets if "/ws/runs/" in url]
    assert len(opened) == 1 and runs[0] in opened[0], f"one rank's stream before any click: {opened}"

    scroller.evaluate("(s, top) => { s.scrollTop = top; }", SLOW * 22)
    page.locator(f"[data-testid=job-row][data-rank='{SLOW}']").click()
    page.wait_for_function(f"() => window.loaderscope.track.rank === {SLOW}", timeout=WAIT_MS)
    page.wait_for_function(f"() => new URL(location.href).searchParams.get('run') === '{runs[SLOW]}'", timeout=WAIT_MS)
    assert page.locator("#run-picker").input_value() == runs[SLOW]
    page.wait_for_function(f"() => window.loaderscope.player.length > 0 && window.loaderscope.state.batches === "
                           f"{figures[SLOW]['batches']}", timeout=WAIT_MS)
    assert (page.locator(f"[data-testid=job-row][data-rank='{SLOW}']").get_attribute("class")
            == "vrow rank-line last selected")
    wait_for(lambda: len([url for url in sockets if "/ws/runs/" in url]) == 2, what="the clicked rank's stream")
    assert runs[SLOW] in [url for url in sockets if "/ws/runs/" in url][1]

    # a header sorts its column: by "last in", the slow rank is the first row whatever the job's size
    scroller.evaluate("s => { s.scrollTop = 0; }")
    page.locator("[data-testid=job-sort][data-key=slowest_steps]").click()
    page.wait_for_function("() => document.querySelector('[data-testid=job-row][data-i=\"0\"]')?.dataset.rank === "
                           f"'{SLOW}'", timeout=WAIT_MS)
    assert "▼" in (page.locator("[data-testid=job-sort][data-key=slowest_steps]").text_content() or "")
    page.locator("[data-testid=job-sort][data-key=slowest_steps]").click()  # again: the other way
    page.wait_for_function("() => document.querySelector('[data-testid=job-row][data-i=\"0\"]')?.dataset.rank !== "
                           f"'{SLOW}'", timeout=WAIT_MS)

    # Back to a rank this page has not opened yet opens that rank, not the job again
    tables = len([url for url in requests if "/api/jobs/" in url])
    vtable = page.get_by_test_id("job-vtable").element_handle()
    page.evaluate("([a, b]) => { history.pushState({}, '', `?run=${a}`); history.pushState({}, '', `?run=${b}`); "
                  "history.back(); }", [runs[3], runs[SLOW]])
    page.wait_for_function("() => window.loaderscope.track.rank === 3", timeout=WAIT_MS)
    assert page.locator("#run-picker").input_value() == runs[3]
    assert vtable.evaluate("t => t.isConnected"), "the job's table stayed: the job was not reloaded"
    assert len([url for url in requests if "/api/jobs/" in url]) == tables
    assert not errors, errors
    page.screenshot(path=str(tmp_path / "jobtable40.png"), full_page=True)
    print(f"screenshot: {tmp_path / 'jobtable40.png'}")
    page.close()


@pytest.mark.slow
def test_a_rank_without_a_run_on_the_dashboard_says_why(browser: Any, start_server: Any, tmp_path: Path) -> None:
    """A rank whose trace left the logdir's run list after the table was made (a race the server cannot
    close: the table and the list are read at different moments) is named, not silently ignored. The
    answer is the server's, with that one rank's run taken out on its way to the page."""
    server, runs = served_job(start_server, tmp_path / "logs", 4, {1: 3.0})
    page = browser.new_page(viewport=VIEWPORT)

    def without_rank_2(route: Any) -> None:
        answer = route.fetch().json()
        for row in answer["ranks"]:
            row["dashboard_run"] = None if row["rank"] == 2 else row["dashboard_run"]
        route.fulfill(json=answer)

    page.route("**/api/jobs/*/table", without_rank_2)
    page.goto(f"{server.page_url}&run={runs[0]}")
    page.get_by_test_id("job-slowest").wait_for(timeout=WAIT_MS)
    page.locator("[data-testid=job-row][data-rank='2']").click()
    notice = page.get_by_test_id("job-notice")
    notice.wait_for(timeout=WAIT_MS)
    assert (notice.text_content() or "").startswith("rank 2 has no run on this dashboard"), notice.text_content()
    assert page.evaluate("() => window.loaderscope.track.rank") == 0, "the open rank stays"
    page.locator("[data-testid=job-row][data-rank='1']").click()
    page.wait_for_function("() => window.loaderscope.track.rank === 1", timeout=WAIT_MS)
    assert notice.is_hidden(), "the notice goes once a rank opens"
    page.close()


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_job_of_train_and_val_loaders_is_two_ranks_with_a_loader_column(
        browser: Any, start_server: Any, tmp_path: Path) -> None:
    """A real 2-rank job whose ranks each iterate a train and a val loader of one name
    (tests/server/test_job_ranks_by_loaders.py): the page says 2 ranks × 2 loaders, a row per loader of each
    rank with its own loader's steps, a sentence per loader; a row of the other loader opens that loader's run
    and its ranks."""
    logs = recorded_job(tmp_path / "ig", "ig", 2)
    server = start_server(logdir=str(logs), logdir_poll=0.1)
    with server.client() as http:
        wait_for(lambda: len(http.get("/api/runs").json()) == 4, what="the job's 4 runs listed")
        answer = http.get("/api/jobs/ig/table").json()
    loaders = {entry["loader"]: entry for entry in answer["loaders"]}
    train, val = sorted(loaders, key=lambda name: -loaders[name]["steps"])
    run_of = {(row["loader"], row["rank"]): row["dashboard_run"] for row in answer["ranks"]}

    page = browser.new_page(viewport=VIEWPORT)
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(f"{server.page_url}&run={run_of[(train, 0)]}")
    sentence = page.get_by_test_id("job-slowest")
    sentence.wait_for(timeout=WAIT_MS)
    lines = sentence.locator("div").all_text_contents()
    assert [line.split(": ", 1)[0] for line in lines] == list(loaders), lines  # a sentence per loader, named
    head = page.locator("#ranks .ranks-head").text_content() or ""
    assert head.startswith(f"job ig · 2 ranks × 2 loaders ({', '.join(loaders)})"), head
    rows = page.get_by_test_id("job-row")
    wait_for(lambda: rows.count() == 4, what="a row per loader of each rank")
    shown = rows.evaluate_all("rs => rs.map(r => [r.dataset.loader, Number(r.dataset.rank), r.textContent])")
    assert sorted((loader, rank) for loader, rank, _ in shown) == sorted(run_of)
    for loader, rank, text in shown:
        assert text.startswith(f"{loader}rank {rank}") and f" of {loaders[loader]['steps']} steps" in text, text
    group = page.locator("#run-picker optgroup").first.get_attribute("label") or ""
    assert group.startswith("job ig · 2 loaders × 2 ranks"), group
    page.screenshot(path=str(tmp_path / "two-loaders.png"), full_page=True)
    print(f"screenshot: {tmp_path / 'two-loaders.png'}")

    page.locator(f"[data-testid=job-row][data-loader='{val}'][data-rank='1']").click()  # the other loader's rank 1
    page.wait_for_function(f"() => new URL(location.href).searchParams.get('run') === '{run_of[(val, 1)]}'",
                           timeout=WAIT_MS)
    page.wait_for_function("() => window.loaderscope.track.rank === 1", timeout=WAIT_MS)
    selected = page.locator("[data-testid=job-row].selected")
    selected.wait_for(timeout=WAIT_MS)
    assert (selected.get_attribute("data-loader"), selected.get_attribute("data-rank")) == (val, "1")
    slowest = loaders[val]["slowest"]
    assert sentence.get_attribute("data-rank") == ("" if slowest is None else str(slowest["rank"]))
    assert not errors, errors
    page.close()


@pytest.mark.slow
def test_the_job_view_says_which_ranks_of_its_world_size_are_missing(
        browser: Any, start_server: Any, tmp_path: Path) -> None:
    """A rank whose trace never reached the logdir: the table of the others says it lacks it, as
    `loaderscope job` does (jobquery.JobTable.notices)."""
    logs = tmp_path / "logs"
    simulated_job(logs, "uniform", 6, {})
    next(logs.rglob("*-rank4-*.trace.jsonl")).unlink()
    server = start_server(logdir=str(logs), logdir_poll=0.1)
    with server.client() as http:
        wait_for(lambda: len(http.get("/api/runs").json()) == 5, what="the job's 5 traces listed")
        first = next(r["id"] for r in http.get("/api/runs").json() if r["rank"] == 0)
    page = browser.new_page(viewport=VIEWPORT)
    page.goto(f"{server.page_url}&run={first}")
    damage = page.get_by_test_id("job-damage")
    damage.wait_for(timeout=WAIT_MS)
    assert (damage.text_content() or "") == "5 of 6 ranks tabled (world_size 6); missing: 1 rank 4"
    assert page.get_by_test_id("job-row").count() == 5
