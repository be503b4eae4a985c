"""Playback and replay of trace files in a real browser.

A simulated run started from the form plays from its first event; it can be paused, stepped one
event or one batch, scrubbed along the timeline, at any speed, and the state at any point equals
the reducer run from the start. Trace files open by the file picker or by drag-and-drop, are
checked (a file that is not a trace is refused with a clear message), and several ranks of one
job open side by side with their shard check.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from tests.browser.pages import FRAMES, WAIT_MS, Page, drawn, shoot
from tests.browser.views import sim_events, write

pytestmark = pytest.mark.browser

# The state of the page at its cursor, and the reducer run afresh over the events before it.
SAME_STATE = """async () => {
  const { reduce } = await import('/js/model/reducer.js');
  const { summary } = await import('/js/model/stats.js');
  const app = window.loaderscope, p = app.player;
  const events = []; for (let i = 0; i < p.cursor; i++) events.push(p.event(i));
  const fp = (s) => JSON.stringify({ seq: s.seq, send: s.send_idx, rcvd: s.rcvd_idx, rq: s.result_queue,
    buf: s.parked, tasks: [...s.tasks.values()], batches: s.batches, sum: summary(s, { workers: false }) });
  return { same: fp(app.state) === fp(reduce(events)), cursor: p.cursor, n: p.length };
}"""


def position(pg: Any) -> dict[str, Any]:
    return pg.evaluate("() => { const a = window.loaderscope, p = a.player;"
                       " return {cursor: p.cursor, n: p.length, batches: a.state.batches, t: p.time,"
                       " playing: a.playing, last: p.cursor ? p.event(p.cursor - 1).kind : null}; }")


def test_simulated_run_plays_steps_and_scrubs(server: Any, page: Page, tmp_path: Path) -> None:
    pg = page.page
    pg.goto(server.page_url)
    pg.wait_for_selector('#scenario option[value="out_of_order"]', state="attached", timeout=WAIT_MS)
    pg.select_option("#scenario", "out_of_order")
    pg.check("#mode-sim")
    pg.click("#params-box summary")
    pg.fill("#param-dataset_size", "400")
    pg.click("#btn-start")
    pg.wait_for_url(lambda url: "run=" in url, timeout=WAIT_MS)
    run_id = pg.url.split("run=", 1)[1].split("&", 1)[0]
    # it plays from the first event at the run's own speed; a quarter of it from here on. On a loaded box
    # it once stopped by itself at the last event applied, the run being done before the page had applied
    # them (main.js allShown); what the page was doing is said if that comes back.
    try:
        pg.wait_for_function("() => window.loaderscope.player.cursor > 30", timeout=WAIT_MS)
    except Exception as exc:
        shoot(pg, tmp_path, "sim_not_playing")
        seen = pg.evaluate("() => ({following: window.loaderscope.player.following, url: location.href})")
        raise AssertionError(f"the simulated run did not play: {position(pg) | seen}; "
                             f"server: {server.run(run_id)['status']}") from exc
    pg.select_option("#pb-speed", "0.25")
    a = position(pg)
    assert a["playing"] and a["cursor"] < a["n"], a
    assert pg.evaluate("window.loaderscope.speed") == 0.25
    pg.wait_for_function(f"() => window.loaderscope.player.cursor > {a['cursor'] + 5}", timeout=WAIT_MS)
    b = position(pg)
    assert b["t"] > a["t"], "playing moves the cursor and the clock"
    # pause: nothing moves
    pg.click("#pb-play")
    c = position(pg)
    pg.evaluate(FRAMES, 10)  # playback advances only in animation frames
    assert position(pg)["cursor"] == c["cursor"] and not c["playing"]
    # one event, one batch, one batch back
    pg.click("#pb-event")
    assert position(pg)["cursor"] == c["cursor"] + 1
    before = position(pg)
    pg.click("#pb-batch")
    d = position(pg)
    assert d["batches"] == before["batches"] + 1 and d["last"] == "yield"
    pg.click("#pb-batch-back")
    e = position(pg)
    assert e["batches"] == before["batches"] and (e["last"] == "yield" or e["batches"] == 0)
    assert pg.evaluate(SAME_STATE)["same"]
    # scrub: click a quarter into the timeline's time axis, then drag to three quarters
    final = server.wait_status(run_id, timeout=60)
    pg.wait_for_function(f"() => window.loaderscope.player.length === {final['events']}", timeout=WAIT_MS)
    pg.click("#btn-fit")
    box = pg.locator("#timeline .timeline-canvas").bounding_box()
    assert box is not None
    x = lambda f: box["x"] + 112 + (box["width"] - 112) * f  # noqa: E731
    pg.mouse.click(x(0.25), box["y"] + 8)
    q1 = position(pg)
    assert 0 < q1["cursor"] < final["events"] // 2, q1
    assert pg.evaluate(SAME_STATE)["same"]
    pg.mouse.move(x(0.25), box["y"] + 8)
    pg.mouse.down()
    pg.mouse.move(x(0.5), box["y"] + 8, steps=5)
    pg.mouse.move(x(0.75), box["y"] + 8, steps=5)
    pg.mouse.up()
    q3 = position(pg)
    assert q1["cursor"] < q3["cursor"] < final["events"], q3
    assert pg.evaluate(SAME_STATE)["same"]
    pg.mouse.move(box["x"] + 40, box["y"] - 40)  # no tooltip in the picture
    drawn(pg)  # panels catch up with the playhead (they refresh a few times a second)
    shoot(pg, tmp_path, "sim_scrubbed")
    # back and forth across snapshots: the slider, then the keyboard
    pg.fill("#pb-scrub", "3")
    assert position(pg)["cursor"] == 3
    pg.keyboard.press("End")
    end = position(pg)
    assert end["cursor"] == final["events"] and end["batches"] == final["batches"] == 100
    pg.keyboard.press("Shift+ArrowLeft")
    assert position(pg)["batches"] == 99
    pg.keyboard.press("ArrowLeft")
    assert pg.evaluate(SAME_STATE)["same"]
    # play at 1000x from the start runs to the end and stops there
    pg.keyboard.press("Home")
    pg.select_option("#pb-speed", "1000")
    pg.click("#pb-play")
    pg.wait_for_function("() => !window.loaderscope.playing", timeout=WAIT_MS)
    assert position(pg)["cursor"] == final["events"]
    assert pg.evaluate("window.loaderscope.state.violations") == []


# --- trace files ---------------------------------------------------------------------------------


def test_trace_file_with_an_active_pin_stage(server: Any, page: Page, tmp_path: Path) -> None:
    """A trace whose loader pins (simulated with a pin cost): the pin thread and its row, MB/s, and the
    same diagnosis as the Python reducer computes for the same file."""
    from loaderscope.model.diagnosis import diagnosis
    from loaderscope.model.state import reduce
    from loaderscope.model.stats import summary

    events = sim_events("uniform", {"num_workers": 3, "batch_size": 8, "dataset_size": 240, "sample_ms": 2,
                                    "pin_memory": True}, pin_ms_per_mb=40, sample_bytes=100_000)
    path = write(tmp_path / "pinned.trace.jsonl", events)
    expected = reduce(json.loads(json.dumps(events)))
    pg = page.page
    pg.goto(server.page_url)
    pg.set_input_files("#file-input", str(path))
    pg.wait_for_function("() => window.loaderscope.perf.load", timeout=WAIT_MS)
    stage = pg.locator('[data-testid="pin-stage"]')
    stage.wait_for(timeout=WAIT_MS)
    assert stage.get_attribute("data-state") == "active"
    pg.wait_for_function("() => !isNaN(parseFloat(document.querySelector('[data-counter=pin] .v').textContent))",
                         timeout=WAIT_MS)
    got = pg.evaluate("() => ({pins: window.loaderscope.store.pin.n, events: window.loaderscope.player.length,"
                      " mbs: document.querySelector('[data-counter=pin] .v').textContent})")
    assert got["events"] == len(events)
    assert got["pins"] == expected.batches == 30
    assert abs(float(got["mbs"]) - summary(expected)["pin_mb_per_s"]) < 0.1
    pg.wait_for_function("() => document.querySelectorAll('#diagnosis li').length > 1", timeout=WAIT_MS)
    assert pg.eval_on_selector_all("#diagnosis li", "els => els.map((e) => e.textContent)") == diagnosis(expected)
    # mid-run, a batch sits in the pin thread: scrub to the first pin_start and look
    row = next(i for i, e in enumerate(events) if e["kind"] == "pin_start")
    pg.fill("#pb-scrub", str(row + 1))
    pg.wait_for_function("() => document.querySelector('[data-testid=pin-stage]').dataset.current !== ''",
                         timeout=WAIT_MS)
    drawn(pg)
    shoot(pg, tmp_path, "pin_active")


DROP = """async ([name, text]) => {
  const dt = new DataTransfer();
  dt.items.add(new File([text], name, { type: 'application/x-ndjson' }));
  window.dispatchEvent(new DragEvent('dragenter', { dataTransfer: dt }));
  window.dispatchEvent(new DragEvent('drop', { dataTransfer: dt }));
}"""


def test_drop_a_trace_and_refuse_other_files(server: Any, page: Page, tmp_path: Path) -> None:
    events = sim_events("out_of_order", {"num_workers": 4, "dataset_size": 64})
    text = write(tmp_path / "ooo.trace.jsonl", events).read_text()
    pg = page.page
    pg.goto(server.page_url)
    pg.evaluate(DROP, ["ooo.trace.jsonl", text])
    pg.wait_for_function(f"() => window.loaderscope.player.length === {len(events)}", timeout=WAIT_MS)
    pg.wait_for_function("() => document.querySelector('#run-title').textContent.includes('ooo.trace.jsonl')",
                         timeout=WAIT_MS)
    assert pg.text_content('[data-testid="cursor-rcvd"]') == "16"
    assert pg.locator('[data-testid="playback"]').is_visible()
    # not a trace: refused by name and reason, and what was open stays open
    pg.evaluate(DROP, ["notes.txt", "hello, this is not a trace\n"])
    err = pg.locator('[data-testid="file-error"]')
    err.wait_for(timeout=WAIT_MS)
    assert "notes.txt is not a loaderscope trace" in (err.text_content() or "")
    assert pg.evaluate("window.loaderscope.player.length") == len(events)
    pg.evaluate(DROP, ["other.jsonl", '{"format": "something-else"}\n'])
    pg.wait_for_function("() => document.querySelector('[data-testid=file-error]').textContent.includes('other.jsonl')")
    assert "the first line must be a header" in (err.text_content() or "")
    # a damaged trace: what comes before the damage opens, and the note says where it is
    cut = "\n".join(text.splitlines()[:40]) + '\n{"seq": 39, "t": \n'
    pg.evaluate(DROP, ["cut.jsonl", cut])
    pg.wait_for_function("() => window.loaderscope.player.length === 39", timeout=WAIT_MS)
    pg.wait_for_function("() => document.querySelector('#notes').textContent.includes('line 41: not valid JSON')")


def rank_traces(tmp_path: Path, job: str, ranks: list[int]) -> list[Path]:
    """One simulated rank of a 2-rank DistributedSampler job per entry of ``ranks`` (a repeated rank
    makes overlapping shards), written as the probe would: rank, job and wall_start in run_start, the
    shard digest in epoch_end."""
    from loaderscope.model.ranks import encode_shard

    paths = []
    for position, rank in enumerate(ranks):
        events = sim_events("samplers", {"sampler": "distributed", "world_size": 2, "rank": rank, "num_workers": 2,
                                         "dataset_size": 64, "sample_ms": 3 + 2 * position})
        indices: list[int] = []
        for e in events:
            e["rank"] = position
            e["run"] = f"{job}-{position}"
            if e["kind"] == "run_start":
                e.update(job=job, world_size=2, wall_start=1000.0 + 0.01 * position, name="train.py")
            elif e["kind"] == "dispatch":
                indices += e.get("indices") or []
            elif e["kind"] == "epoch_end":
                e.update(shard=encode_shard(indices, 64), shard_length=64)
        paths.append(write(tmp_path / f"{job}-rank{position}.trace.jsonl", events))
    return paths


def test_ranks_side_by_side_with_shard_check(server: Any, page: Page, tmp_path: Path) -> None:
    pg = page.page
    pg.goto(server.page_url)
    pg.set_input_files("#file-input", [str(p) for p in rank_traces(tmp_path, "jobA", [0, 1])])
    cards = pg.locator('[data-testid="rank-card"]')
    cards.first.wait_for(timeout=WAIT_MS)
    assert cards.count() == 2
    shards = pg.locator('[data-testid="shards"] > div')
    pg.wait_for_function("() => document.querySelector('[data-testid=shards] > div')?.dataset.disjoint",
                         timeout=WAIT_MS)
    assert shards.first.get_attribute("data-disjoint") == "true"
    assert shards.first.get_attribute("data-complete") == "true"
    assert "rank 0: 32, rank 1: 32" in (shards.first.text_content() or "")
    assert "slowest in" in (cards.nth(1).text_content() or "")
    # both ranks' rows are in the timeline; a click on rank 1 shows it in the picture
    assert pg.evaluate("window.loaderscope.timeline.tracks.length") == 2
    cards.nth(1).click()
    pg.wait_for_function("() => window.loaderscope.track.rank === 1")
    pg.wait_for_function("() => document.querySelectorAll('[data-testid=rank-card]')[1].textContent.includes('shown')")
    drawn(pg)
    shoot(pg, tmp_path, "ranks")
    # the same rank twice: half the indices read by both, half by none
    pg.set_input_files("#file-input", [str(p) for p in rank_traces(tmp_path, "jobB", [0, 0])])
    pg.wait_for_function("() => document.querySelector('[data-testid=shards] > div')?.dataset.disjoint === 'false'",
                         timeout=WAIT_MS)
    text = pg.text_content('[data-testid="shards"]') or ""
    assert "OVERLAP: 32 indices" in text and "MISSING: 32 indices" in text


@pytest.mark.slow
def test_ranks_of_a_torchrun_job_found_on_the_server(server: Any, page: Page, tmp_path: Path) -> None:
    """Two real ranks (torchrun, gloo on CPU) watch() into the dashboard; opening one rank's run finds
    the other by its job and shows both, with disjoint and complete shards."""
    import subprocess
    import sys
    import uuid

    example = Path(__file__).parents[2] / "examples" / "train_cnn.py"
    job = f"job-{uuid.uuid4().hex[:8]}"
    env = {**os.environ, "LOADERSCOPE_URL": server.page_url, "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--rdzv-id", job,
               "--rdzv-backend", "c10d", "--rdzv-endpoint", "127.0.0.1:0", str(example),
               "--samples", "256", "--workers", "1", "--batch-size", "16"]
    result = subprocess.run(command, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stdout + result.stderr
    with server.client() as http:
        runs = http.get("/api/runs").json()
        ours = []
        for run in runs:
            first = http.get(f"/api/runs/{run['id']}/events", params={"after": -1, "limit": 1}).json()["events"]
            if first and first[0].get("job") == job:
                ours.append((first[0]["rank"], run["id"]))
    assert sorted(r for r, _ in ours) == [0, 1]
    pg = page.page
    pg.goto(f"{server.page_url}&run={dict(ours)[1]}")
    cards = pg.locator('[data-testid="rank-card"]')
    pg.wait_for_function("() => document.querySelectorAll('[data-testid=rank-card]').length === 2", timeout=WAIT_MS)
    pg.wait_for_function("() => document.querySelector('[data-testid=shards] > div')?.dataset.complete === 'true'",
                         timeout=WAIT_MS)
    shard = pg.locator('[data-testid="shards"] > div').first
    assert shard.get_attribute("data-disjoint") == "true"
    assert "rank 0: 128, rank 1: 128" in (shard.text_content() or "")
    assert "shown" in (cards.nth(1).text_content() or ""), "the run opened is the rank shown"
    shoot(pg, tmp_path, "ranks_torchrun")


def test_real_h100_trace_pins_and_splits_the_step(server: Any, page: Page, tmp_path: Path) -> None:
    """A gpu_step run recorded on an H100 (frontend/tests/fixtures): the pin thread is active, MB/s is
    the recorded one, and the consumer box splits a batch's time into copy and compute."""
    from loaderscope.model.state import reduce
    from loaderscope.model.stats import summary
    from loaderscope.traces import jsonl as trace

    fixture = Path(__file__).parents[2] / "frontend" / "tests" / "fixtures" / "gpu_step_h100.jsonl"
    _, events = trace.read_trace(fixture)
    expected = summary(reduce(events))
    pg = page.page
    pg.goto(server.page_url)
    pg.set_input_files("#file-input", str(fixture))
    stage = pg.locator('[data-testid="pin-stage"]')
    stage.wait_for(timeout=WAIT_MS)
    assert stage.get_attribute("data-state") == "active"
    pg.wait_for_function("() => !isNaN(parseFloat(document.querySelector('[data-counter=pin] .v').textContent))",
                         timeout=WAIT_MS)
    assert abs(float(pg.text_content('[data-counter="pin"] .v') or 0) - expected["pin_mb_per_s"]) < 1
    split = pg.text_content(".consumer-sub") or ""
    assert "batch: copy" in split and "compute" in split and "unpinned" in split, split
    assert "NVIDIA H100" in (pg.get_attribute(".consumer-label", "title") or "")
    pg.wait_for_function("() => document.querySelector('#diagnosis').textContent.includes('pinned memory pays')",
                         timeout=WAIT_MS)
    # a moment when a batch is in the pin thread and pinned ones wait for the training loop
    rows = [i for i, e in enumerate(events) if e["kind"] == "pin_start"]
    pg.fill("#pb-scrub", str(rows[len(rows) // 2] + 1))
    drawn(pg)
    shoot(pg, tmp_path, "pin_active_h100")


def test_simulate_with_a_cost_model_from_the_form(server: Any, page: Page, tmp_path: Path) -> None:
    """The simulate toggle shows the cost model; a pin cost gives a simulated run an active pin stage,
    and a value the simulator refuses is named next to its field."""
    pg = page.page
    page.expected_status.add(422)
    pg.goto(server.page_url)
    pg.wait_for_selector('#scenario option[value="uniform"]', state="attached", timeout=WAIT_MS)
    pg.select_option("#scenario", "uniform")
    assert not pg.locator("#costs-box").is_visible(), "costs are for simulated runs only"
    pg.check("#mode-sim")
    pg.click("#costs-box summary")
    pg.fill("#cost-stuck_after_s", "0")
    pg.click("#btn-start")
    error = pg.locator('#costs [data-field="stuck_after_s"] .field-error')
    error.wait_for(state="visible", timeout=WAIT_MS)
    assert "greater than 0" in (error.text_content() or ""), error.text_content()
    assert "run=" not in pg.url
    pg.fill("#cost-stuck_after_s", "10")
    pg.fill("#cost-pin_ms_per_mb", "30")
    pg.fill("#cost-sample_bytes", "100000")
    pg.fill("#cost-slow_worker", "1")
    pg.click("#params-box summary")
    pg.check("#param-pin_memory")
    pg.click("#btn-start")
    pg.wait_for_url(lambda url: "run=" in url, timeout=WAIT_MS)
    stage = pg.locator('[data-testid="pin-stage"]')
    stage.wait_for(timeout=WAIT_MS)
    assert stage.get_attribute("data-state") == "active"
    pg.wait_for_function("() => window.loaderscope.store.pin.n > 3", timeout=WAIT_MS)
    pg.wait_for_function("() => document.querySelector('#diagnosis').textContent.includes('straggler: worker 1')",
                         timeout=WAIT_MS)
