"""Big trace files in the page: parsed by Web Workers in segments, applied in file order.

The default run checks, in Debian's chromium, that the workers' path gives the page exactly the
events the single-thread reader gives (every field of every event, in order) and stops at the
same damaged line with the same message, the line counted from the file's start across segments;
and that a Parquet trace's parts give the page's track what its JSON lines give, opened through the
workers under the dashboard's CSP and through the Open button.

The perf-marked test opens a cached simulated trace of 1M events, as JSON lines and as a Parquet
trace (``LOADERSCOPE_BIGTRACE_EVENTS`` picks other sizes, e.g. ``1000000,10000000``) through the
page's file input and prints the open time, pan/zoom frame rate and heap; ``bench/bigtrace.py`` is
the same as a script::

    .venv/bin/python -m pytest -m perf tests/browser/test_big_traces.py -s
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.browser.pages import Page

pytestmark = pytest.mark.browser

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

# Reads `text` as a file both ways and returns what each gave (events, or the error and the count before it).
BOTH_WAYS = """async ({ text, segmentBytes }) => {
  const { readTraceFile, readTraceFileInWorkers } = await import('/js/views/trace-file.js');
  const file = new File([text], 'small.trace.jsonl');
  const run = async (read, options) => {
    const events = [];
    let header = null, error = null;
    try {
      await read(file, { onHeader: (h) => { header = h; }, onEvent: (e) => events.push(JSON.stringify(e)),
                         ...options });
    } catch (err) { error = err.message; }
    return { header, events, error };
  };
  return { main: await run(readTraceFile, { sliceMs: 1e9 }),
           workers: await run(readTraceFileInWorkers, { workers: 3, segmentBytes }) };
}"""


def small_trace(tmp_path: Path) -> str:
    from bigtrace import write_simulated

    path = tmp_path / "small.trace.jsonl"
    write_simulated(path, 30_000)
    return path.read_text()


def read_both_ways(page: Any, server: Any, text: str, segment_bytes: int) -> dict[str, Any]:
    page.goto(server.page_url)
    page.wait_for_function("() => window.loaderscope")
    return page.evaluate(BOTH_WAYS, {"text": text, "segmentBytes": segment_bytes})


def test_workers_give_the_page_the_same_events_in_order(page: Page, server: Any, tmp_path: Path) -> None:
    text = small_trace(tmp_path)
    got = read_both_ways(page.page, server, text, segment_bytes=200_000)  # ~19 segments over 3 workers
    main, workers = got["main"], got["workers"]
    assert main["error"] is None and workers["error"] is None, (main["error"], workers["error"])
    assert len(main["events"]) == len(text.splitlines()) - 1
    assert workers["header"] == main["header"]
    assert workers["events"] == main["events"]


def test_a_damaged_line_in_a_later_segment_stops_there_with_its_file_line(page: Page, server: Any,
                                                                          tmp_path: Path) -> None:
    lines = small_trace(tmp_path).splitlines()
    bad = 23_456  # 1-based line number in the file: well inside a later segment
    lines[bad - 1] = lines[bad - 1][:40]
    got = read_both_ways(page.page, server, "\n".join(lines) + "\n", segment_bytes=200_000)
    main, workers = got["main"], got["workers"]
    assert main["error"] == f"small.trace.jsonl, line {bad}: not valid JSON (a truncated or edited file?)"
    assert workers["error"] == main["error"]
    assert workers["events"] == main["events"] and len(main["events"]) == bad - 2


# Reads `text` into a Track each way: the reference (one thread, JSON.parse, each event applied
# alone) and the page's (workers' columns, batches appended); what the page shows of each track.
TRACKS_BOTH_WAYS = """async ({ text, segmentBytes }) => {
  const { readTraceFile, readTraceFileInWorkers } = await import('/js/views/trace-file.js');
  const { Track } = await import('/js/model/track.js');
  const { summary } = await import('/js/model/stats.js');
  const file = new File([text], 'small.trace.jsonl');
  const reference = new Track({ rank: 0, label: 'reference', source: 'file' });
  const fast = new Track({ rank: 0, label: 'fast', source: 'file' });
  await readTraceFile(file, { onHeader: () => {}, onEvent: (e) => reference.ingest(e), sliceMs: 1e9 });
  await readTraceFileInWorkers(file, { workers: 3, segmentBytes, onHeader: () => {},
                                       onRows: (rows) => fast.ingestRows(rows) });
  const shown = (tr) => {
    const spans = [...tr.store.workers.values(), tr.store.consumer, tr.store.pin]
      .map((c) => [...c.start.subarray(0, c.n), ...c.end.subarray(0, c.n),
                   ...c.ref.subarray(0, c.n), ...c.ref2.subarray(0, c.n)]);
    // each row as the page reads it (a column's bytes for a field a row lacks are not read)
    const rows = Array.from({ length: tr.player.length }, (_, i) => tr.player.event(i));
    return JSON.stringify({ n: tr.player.length, summary: summary(tr.state), violations: tr.state.violations,
      notes: tr.noteItems, yields: [...tr.yields], parked: tr.parkedRows, spans, rows });
  };
  return { reference: shown(reference), fast: shown(fast) };
}"""


def test_a_trace_opened_the_fast_way_shows_what_the_reference_way_shows(page: Page, server: Any,
                                                                       tmp_path: Path) -> None:
    page.page.goto(server.page_url)
    page.page.wait_for_function("() => window.loaderscope")
    got = page.page.evaluate(TRACKS_BOTH_WAYS, {"text": small_trace(tmp_path), "segmentBytes": 200_000})
    assert json.loads(got["reference"])["n"] > 29_000
    assert first_difference(json.loads(got["fast"]), json.loads(got["reference"])) is None


# Reads a Parquet trace's parts (the page's file input holds them) into a Track through the workers,
# and the same events' JSON lines the reference way; what the page shows of each.
PARQUET_AND_REFERENCE = """async ({ text }) => {
  const { readTraceFile } = await import('/js/views/trace-file.js');
  const { readParquetTraceInWorkers } = await import('/js/views/parquet-trace.js');
  const { Track } = await import('/js/model/track.js');
  const { summary } = await import('/js/model/stats.js');
  const reference = new Track({ rank: 0, label: 'reference', source: 'file' });
  const parquet = new Track({ rank: 0, label: 'parquet', source: 'file' });
  await readTraceFile(new File([text], 'small.trace.jsonl'),
                      { onHeader: () => {}, onEvent: (e) => reference.ingest(e), sliceMs: 1e9 });
  const parts = [...document.querySelector('#probe-input').files];
  let header = null;
  await readParquetTraceInWorkers(parts, 'small.trace.parquet', { workers: 2, onHeader: (h) => { header = h; },
    onRows: (rows) => parquet.ingestRows(rows) });
  const shown = (tr) => JSON.stringify({ n: tr.player.length, summary: summary(tr.state),
    violations: tr.state.violations, notes: tr.noteItems, yields: [...tr.yields], parked: tr.parkedRows,
    rows: Array.from({ length: tr.player.length }, (_, i) => tr.player.event(i)) });
  return { header, parts: parts.length, reference: shown(reference), parquet: shown(parquet) };
}"""


def parquet_trace(tmp_path: Path, text: str) -> list[Path]:
    """The events of a JSON-lines trace as a Parquet trace of several parts; its part files."""
    from loaderscope.traces.parquet import ParquetTraceWriter

    lines = text.splitlines()
    head = json.loads(lines[0])
    path = tmp_path / "small.trace.parquet"
    with ParquetTraceWriter(path, head["run"], row_group_events=4096) as writer:
        writer.write([json.loads(line) for line in lines[1:]])
    return sorted(path.glob("part-*.parquet"))


def test_a_parquet_trace_shows_what_its_json_lines_show(page: Page, server: Any, tmp_path: Path) -> None:
    text = small_trace(tmp_path)
    parts = parquet_trace(tmp_path, text)
    pg = page.page
    pg.goto(server.page_url)
    pg.wait_for_function("() => window.loaderscope")
    pg.evaluate("() => { document.body.append(Object.assign(document.createElement('input'),"
                " { type: 'file', id: 'probe-input', multiple: true })); }")
    pg.set_input_files("#probe-input", [str(p) for p in parts])
    got = pg.evaluate(PARQUET_AND_REFERENCE, {"text": text})  # the zstd decoder compiles under the dashboard's CSP
    assert got["parts"] == len(parts) > 5
    assert got["header"]["run"] == json.loads(text.splitlines()[0])["run"]
    assert json.loads(got["reference"])["n"] > 29_000
    assert first_difference(json.loads(got["parquet"]), json.loads(got["reference"])) is None


def first_difference(got: Any, want: Any, where: str = "") -> str | None:
    """Where two decoded JSON values first differ (a dict's key order aside), or None; a short message
    where pytest's diff of 30,000 rows would take minutes."""
    if isinstance(got, dict) and isinstance(want, dict):
        if got.keys() != want.keys():
            return f"{where}: keys {sorted(got.keys() ^ want.keys())} in one only"
        return next(filter(None, (first_difference(got[k], want[k], f"{where}.{k}") for k in want)), None)
    if isinstance(got, list) and isinstance(want, list):
        if len(got) != len(want):
            return f"{where}: {len(got)} items, not {len(want)}"
        pairs = enumerate(zip(got, want, strict=True))
        return next(filter(None, (first_difference(g, w, f"{where}[{i}]") for i, (g, w) in pairs)), None)
    return None if got == want else f"{where}: {got!r:.200} is not {want!r:.200}"


def test_the_open_button_takes_a_parquet_traces_parts_as_one_run(page: Page, server: Any, tmp_path: Path) -> None:
    parts = parquet_trace(tmp_path, small_trace(tmp_path))
    pg = page.page
    pg.goto(server.page_url)
    pg.wait_for_function("() => window.loaderscope")
    pg.set_input_files("#file-input", [str(p) for p in parts])
    pg.wait_for_function("() => window.loaderscope.perf.load", polling=100)
    load = pg.evaluate("window.loaderscope.perf.load")
    assert load["files"] == len(parts) and load["events"] > 29_000
    assert pg.locator("#file-error").is_hidden()
    # one run, named by the run the parts hold (they were picked without their directory)
    assert pg.locator("#connection").inner_text().startswith("bigtrace.trace.parquet · ")
    pg.screenshot(path=str(tmp_path / "parquet-open.png"))


@pytest.mark.perf
@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_big_trace_opens_pans_and_zooms(browser: Any, server: Any, fmt: str) -> None:
    from bigtrace import open_trace, parquet_path, trace_path

    sizes = [int(n) for n in os.environ.get("LOADERSCOPE_BIGTRACE_EVENTS", "1000000").split(",")]
    for n in sizes:
        r = open_trace(browser, server.page_url, (parquet_path if fmt == "parquet" else trace_path)(n))
        print(f"\nbig {fmt} trace {n}: "
              + json.dumps({k: round(v, 2) if isinstance(v, float) else v for k, v in r.items()}))
        assert r["events"] >= 0.97 * n
        assert r["fps"] >= 30, "pan and zoom at 30 frames a second or more"
