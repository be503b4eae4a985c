"""How the page opens a trace file of 1M and 10M events, and how it pans and zooms it afterwards.

    .venv/bin/python bench/bigtrace.py [--events 1000000 10000000] [--cache /tmp/loaderscope-bigtrace]

For each size: a simulated run of that many events (8 workers, pin thread on) is written once as a
trace file and cached (10M events take minutes to simulate and ~1.3 GB on disk); then Debian's
chromium (headless, software rendering) opens it through the page's real file input, and we report

- the open time (the page's own ``perf.load.ms``: file read, decoded, applied, drawn), and the
  95th percentile and longest gap between animation frames meanwhile (is the page responsive?);
- pan and zoom frames per second (the same wheel-and-drag script as tests/browser/test_frame_time.py),
  what each part of a frame took on average (``frame_apply_ms``, ``frame_pipeline_ms``,
  ``frame_timeline_ms``, ``frame_panels_ms``: main.js ``frame()``'s split) and the time of a seek
  to a random point;
- the page's JS heap after a forced garbage collection (CDP ``Runtime.getHeapUsage``), and that
  heap divided by the number of events.

Each figure is printed as one JSON line. Not part of the test suite (tests/browser/test_big_traces.py
runs the 1M case as a perf-marked test).

``--parse-only`` times only the parsing workers in chromium (the page's thread takes the rows and
drops them). ``--cpu`` measures instead, in node and in CPU time (so less at the mercy of a loaded machine than the
open time), the two halves of an open on the first ``--cpu-mb`` MB of each trace: what a parsing
worker spends per event (trace-worker.js's reading into EventTable batches) and what the page's
thread spends applying those batches to a Track; with ``--against``, that checkout's code too, the
two alternating round by round.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import orjson  # noqa: E402

from loaderscope.model.state import LoaderState  # noqa: E402
from loaderscope.model.stats import summary  # noqa: E402
from loaderscope.scenarios.catalog import get  # noqa: E402
from loaderscope.sim.costs import CostModel, TaskCosts  # noqa: E402
from loaderscope.sim.engine import Simulator  # noqa: E402
from loaderscope.sim.run import sim_config  # noqa: E402
from loaderscope.traces.header import meta_of  # noqa: E402
from loaderscope.traces.jsonl import TraceWriter  # noqa: E402
from loaderscope.traces.parquet import PART_GLOB, ROW_GROUP_EVENTS, ParquetTraceWriter  # noqa: E402

CACHE = Path("/tmp/loaderscope-bigtrace")
EVENTS_PER_SAMPLE = 7.2  # dispatch, fetch start/end, pin start/end, arrive, yield, a few parked
DATASET = 100_000  # the scenario's largest dataset: longer runs are more epochs
STEP_S = 5.0  # simulated seconds per slice written: bounds the generator's memory


def trace_path(events: int, cache: Path = CACHE) -> Path:
    """A cached simulated trace of at least ``events`` events, written on first use."""
    path = cache / f"bigtrace-{events}.trace.jsonl"
    if not path.exists():
        cache.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(".partial")
        write_simulated(partial, events)
        partial.rename(path)
    return path


def parquet_path(events: int, cache: Path = CACHE) -> Path:
    """The cached trace of ``events`` events as a Parquet trace (the same events), converted on first use."""
    path = cache / f"bigtrace-{events}.trace.parquet"
    if not path.exists():
        partial = path.with_suffix(".partial")
        shutil.rmtree(partial, ignore_errors=True)
        with trace_path(events, cache).open("rb") as lines:
            head = orjson.loads(next(lines))
            with ParquetTraceWriter(partial, head["run"], **meta_of(head)) as writer:
                chunk = []
                for line in lines:
                    chunk.append(orjson.loads(line))
                    if len(chunk) == ROW_GROUP_EVENTS:
                        writer.write(chunk)
                        chunk = []
                writer.write(chunk)
        partial.rename(path)
    return path


def files_of(path: Path) -> list[Path]:
    """What a user picks to open ``path``: the file, or a Parquet trace's part files."""
    return sorted(path.glob(PART_GLOB)) if path.is_dir() else [path]


def write_simulated(path: Path, events: int) -> int:
    """Simulate a run (uniform scenario, 8 workers, pinned) of ``events`` events into ``path``, slice by slice.

    ``sim.simulate`` keeps every event in a list (~1 KB each in Python); this drives the same
    ``Simulator`` a few simulated seconds at a time and writes each slice out, so 10M events fit.
    """
    sc = get("uniform")
    epochs = int(events / EVENTS_PER_SAMPLE / DATASET) + 1  # the run stops at max_events, within the last
    params = sc.params.model_validate({"num_workers": 8, "batch_size": 1, "dataset_size": DATASET, "epochs": epochs,
                                       "sample_ms": 1.0, "step_ms": 0.05, "pin_memory": True})
    workload = sc.build(params)
    costs = CostModel(pin_ms_per_mb=20_000, sample_bytes=4096)
    cfg = sim_config(workload, run_id="bigtrace", scenario="uniform", params=params.model_dump(), costs=costs,
                     order=workload.sampler_order())
    task_costs = TaskCosts(costs, workload.sample_cost, workload.step_cost, random.Random(0), pin_memory=True)
    sim = Simulator(cfg, task_costs, max_events=events)
    state = LoaderState()  # for run_end's summary, as simulate() puts it there
    written = 0
    with TraceWriter(path, "bigtrace", scenario="uniform", mode="sim") as writer:
        while not sim.done:
            chunk = sim.advance(sim.now + STEP_S)
            for e in chunk:
                state.apply(e)
            if chunk and chunk[-1]["kind"] == "run_end":
                chunk[-1]["stats"] = summary(state)
            writer.write(chunk)
            written += len(chunk)
    return written


def heap(cdp: Any) -> dict[str, float]:
    """The page's memory after a full garbage collection, in MB: the JS heap and the typed arrays' buffers."""
    cdp.send("HeapProfiler.collectGarbage")
    usage = cdp.send("Runtime.getHeapUsage")
    return {"heap_mb": usage["usedSize"] / 1e6, "buffers_mb": usage.get("backingStorageSize", 0) / 1e6}


# Records the time between animation frames while the file loads: how responsive the page stays.
GAPS = """() => { const g = window.bigtraceGaps = { ms: [], stop: false }; let last = performance.now();
  const tick = (now) => { g.ms.push(now - last); last = now; if (!g.stop) requestAnimationFrame(tick); };
  requestAnimationFrame(tick); }"""


def open_trace(browser: Any, url: str, path: Path, profile: Path | None = None) -> dict[str, Any]:
    """Open ``path`` in a fresh page through its file input; the open time, pan/zoom figures and heap."""
    from tests.browser.pages import INTERACT, VIEWPORT

    context = browser.new_context(viewport=VIEWPORT)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    cdp = context.new_cdp_session(page)
    page.goto(url)
    page.wait_for_function("() => window.loaderscope", timeout=30_000)
    before = heap(cdp)
    if profile:
        cdp.send("Profiler.enable")
        cdp.send("Profiler.setSamplingInterval", {"interval": 500})
        cdp.send("Profiler.start")
    page.evaluate(GAPS)
    page.set_input_files("#file-input", [str(f) for f in files_of(path)])
    page.wait_for_function("() => window.loaderscope.perf.load", timeout=600_000, polling=100)
    gaps = page.evaluate("() => { const g = window.bigtraceGaps; g.stop = true; return g.ms.sort((a, b) => a - b); }")
    if profile:
        profile.write_text(json.dumps(cdp.send("Profiler.stop")["profile"]))
    load = page.evaluate("window.loaderscope.perf.load")
    page.evaluate("() => new Promise((done) => requestAnimationFrame(() => requestAnimationFrame(done)))")
    after = heap(cdp)
    result = page.evaluate(INTERACT)
    # where the pan and zoom frames went: main.js frame()'s parts, in ms per frame
    split = page.evaluate("() => { const p = window.loaderscope.perf;"
                          " return Object.fromEntries(Object.entries(p.split)"
                          ".map(([k, v]) => [k, v / Math.max(1, p.frames)])); }")
    context.close()
    if errors:
        raise RuntimeError(f"the page failed: {errors}")
    events = load["events"]
    return {"events": events, "mb": load["bytes"] / 1e6, "open_s": load["ms"] / 1000,
            "events_per_s": events / (load["ms"] / 1000), "fps": result["fps"], "frame_p95_ms": result["p95"],
            "timeline_p95_ms": result["timeline_p95"], "seek_ms": result["seek_ms"],
            **{f"frame_{part}_ms": ms for part, ms in split.items()},
            "load_frame_p95_ms": gaps[int(len(gaps) * 0.95)] if gaps else None,
            "load_frame_max_ms": max(gaps, default=None),
            "heap_mb": after["heap_mb"], "buffers_mb": after["buffers_mb"], "empty_heap_mb": before["heap_mb"],
            "bytes_per_event": (after["heap_mb"] + after["buffers_mb"] - before["heap_mb"] - before["buffers_mb"])
            * 1e6 / events}


# node: CPU microseconds per event of parsing (as trace-worker.js reads) and of applying (as the page
# does) the first MB of a trace, with each checkout's frontend/js, alternating. Prints one JSON line
# per checkout and half: the median over the rounds and the range.
CPU_SCRIPT = r"""
const [path, mb, rounds, ...roots] = process.argv.slice(1);
const fs = await import('node:fs');
const buf = Buffer.alloc(Number(mb) << 20);
const got = fs.readSync(fs.openSync(path, 'r'), buf, 0, buf.length);
const bytes = buf.subarray(0, buf.subarray(0, got).lastIndexOf(10) + 1);
const pieces = []; // as a worker's stream gives them
for (let p = 0; p < bytes.length; p += 65536) pieces.push(new Uint8Array(bytes.subarray(p, p + 65536)));
const cpu = (f) => {
  const c0 = process.cpuUsage(); const n = f(); const c = process.cpuUsage(c0); return (c.user + c.system) / n;
};
const code = await Promise.all(roots.map(async (root) => ({
  root, ...(await import(`${root}/frontend/js/views/trace-file.js`)),
  ...(await import(`${root}/frontend/js/model/event-table.js`)),
  ...(await import(`${root}/frontend/js/model/track.js`)),
  ...(await import(`${root}/frontend/js/model/table-lines.js`)) })));
function parse({ TraceReader, EventTable, pushLine }) {
  const batches = [];
  let rows = new EventTable(1 << 16);
  const reader = new TraceReader({ source: 'bench', onHeader: () => {}, onEvent: (e) => rows.push(e),
    accept: (e) => rows.pushValid(e), acceptLine: (text, start, end) => pushLine(rows, text, start, end) });
  for (const piece of pieces) {
    reader.push(piece);
    if (rows.length >= 1 << 16) { batches.push(rows); rows = new EventTable(1 << 16); }
  }
  reader.end();
  batches.push(rows);
  return batches;
}
function apply({ Track }, batches) {
  const tr = new Track({ rank: 0, label: 'bench', source: 'file' });
  for (const rows of batches) {
    if (tr.ingestRows) tr.ingestRows(rows);
    else for (let i = 0; i < rows.length; i++) tr.ingest(rows.handOver(i));
  }
  return tr.player.length;
}
const out = code.map(() => ({ parse: [], apply: [] }));
for (let r = 0; r < Number(rounds); r++) {
  code.forEach((c, k) => {
    let batches;
    out[k].parse.push(cpu(() => { batches = parse(c); return batches.reduce((s, b) => s + b.length, 0); }));
    out[k].apply.push(cpu(() => apply(c, batches)));
  });
}
const fmt = (a) => {
  a.sort((x, y) => x - y);
  return `${a[a.length >> 1].toFixed(3)} [${a[0].toFixed(3)}-${a.at(-1).toFixed(3)}]`;
};
code.forEach((c, k) => console.log(JSON.stringify({ checkout: c.root, mb: Number(mb), rounds: Number(rounds),
  parse_cpu_us_per_event: fmt(out[k].parse), apply_cpu_us_per_event: fmt(out[k].apply) })));
"""


def cpu_per_event(path: Path, mb: int, rounds: int, roots: list[Path]) -> None:
    """Run CPU_SCRIPT in node over the first ``mb`` MB of ``path`` for each checkout in ``roots``."""
    import subprocess

    subprocess.run(["node", "--input-type=module", "-e", CPU_SCRIPT, str(path), str(mb), str(rounds),
                    *(str(r.resolve()) for r in roots)], check=True)


# Reads the file on a probe input through the page's parsing workers with nothing applied on the
# page's thread: how long parsing alone takes in chromium.
PARSE_ONLY = """async (parsers) => {
  const { readTraceFileInWorkers } = await import('/js/views/trace-file.js');
  const { readParquetTraceInWorkers } = await import('/js/views/parquet-trace.js');
  const files = [...document.querySelector('#probe-input').files];
  const t0 = performance.now();
  let events = 0;
  const o = { workers: parsers, onHeader: () => {}, onRows: (rows) => { events += rows.length; },
    onEvent: () => { events += 1; } }; // a checkout without onRows rebuilds each event
  await (files[0].name.endsWith('.parquet') ? readParquetTraceInWorkers(files, 'parquet', o)
    : readTraceFileInWorkers(files[0], o));
  return { events, parse_only_s: (performance.now() - t0) / 1000 };
}"""


def parse_only(browser: Any, url: str, path: Path, parsers: int) -> dict[str, Any]:
    """Time the workers' parsing of ``path`` in a fresh page, the page's thread doing nothing with the rows."""
    page = browser.new_page()
    page.goto(url)
    page.wait_for_function("() => window.loaderscope", timeout=30_000)
    page.evaluate("() => { const i = Object.assign(document.createElement('input'), { type: 'file', id: 'probe-input',"
                  " multiple: true }); document.body.append(i); }")
    page.set_input_files("#probe-input", [str(f) for f in files_of(path)])
    result = page.evaluate(PARSE_ONLY, parsers or 1)
    page.close()
    return result


def summarise(results: list[dict[str, Any]]) -> None:
    """One line per size and page: the median of each figure with its range over the repeats."""
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for r in results:
        groups.setdefault((r["events"], r["format"], r["page"], r["parsers"]), []).append(r)
    for (events, fmt, page, parsers), rs in groups.items():
        line: dict[str, Any] = {"events": events, "format": fmt, "page": page, "parsers": parsers, "runs": len(rs)}
        for key in ("open_s", "parse_only_s", "fps", "load_frame_p95_ms", "seek_ms", "heap_mb", "buffers_mb",
                    "bytes_per_event"):
            values = sorted(r[key] for r in rs if r.get(key) is not None)
            if values:
                line[key] = f"{statistics.median(values):.2f} [{values[0]:.2f}-{values[-1]:.2f}]"
        print("median " + json.dumps(line), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, nargs="+", default=[1_000_000, 10_000_000])
    ap.add_argument("--cache", type=Path, default=CACHE, help="where the generated traces are kept")
    ap.add_argument("--repeat", type=int, default=1, help="opens of each size by each page, alternating")
    ap.add_argument("--profile", type=Path, help="write a CPU profile (.cpuprofile) of each open here")
    ap.add_argument("--against", type=Path,
                    help="another checkout (its backend/ and frontend/): its page opens each trace too, alternately")
    ap.add_argument("--parsers", type=int, nargs="+", default=[0],
                    help="parsing workers (the page's ?parsers=N, 0: its default); several are measured alternately")
    ap.add_argument("--cpu", action="store_true",
                    help="measure parsing and applying CPU per event in node instead of opening in chromium")
    ap.add_argument("--cpu-mb", type=int, default=40, help="with --cpu: how much of each trace (MB)")
    ap.add_argument("--format", nargs="+", choices=["jsonl", "parquet"], default=["jsonl"],
                    help="the trace's format: JSON lines, or the same events as a Parquet trace (a directory of parts "
                         "the page is given as its files); several are measured alternately")
    ap.add_argument("--parse-only", action="store_true",
                    help="time only the workers' parsing in chromium (--parsers of them, 1 for 0), nothing applied")
    args = ap.parse_args()
    if args.cpu:
        for n in args.events:
            cpu_per_event(trace_path(n, args.cache), args.cpu_mb, max(args.repeat, 5),
                          [ROOT, *([args.against] if args.against else [])])
        return
    from playwright.sync_api import sync_playwright

    from tests.browser.pages import ARGS, CHROMIUM
    from tests.live import launch

    paths = {}
    for n in args.events:
        for fmt in args.format:
            t0 = time.perf_counter()
            paths[n, fmt] = (parquet_path if fmt == "parquet" else trace_path)(n, args.cache)
            print(json.dumps({"trace": str(paths[n, fmt]), "events": n, "ready_s": round(time.perf_counter() - t0, 1)}))
    servers = {"this": launch(args.cache / "server")}
    variants = [("this", parsers) for parsers in args.parsers]
    if args.against:
        servers["against"] = launch(args.cache / "server-against", env={"PYTHONPATH": str(args.against / "backend")})
        variants.append(("against", 0))
    results = []
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
            for k in range(args.repeat):
                for (n, fmt), path in paths.items():
                    for page, parsers in variants:
                        prof = args.profile / f"open-{n}-{fmt}-{page}{parsers}-{k}.cpuprofile" if args.profile else None
                        if prof:
                            prof.parent.mkdir(parents=True, exist_ok=True)
                        url = f"{servers[page].page_url}&parsers={parsers}"
                        # measure() is called just below, within the iteration
                        measure = (lambda: parse_only(browser, url, path, parsers)) if args.parse_only else (  # noqa: B023
                            lambda: open_trace(browser, url, path, prof))  # noqa: B023
                        r = {"page": page, "format": fmt, "parsers": parsers, **measure()}
                        results.append(r)
                        print(json.dumps({key: round(v, 2) if isinstance(v, float) else v for key, v in r.items()}),
                              flush=True)
            browser.close()
    finally:
        for server in servers.values():
            server.stop()
    summarise(results)


if __name__ == "__main__":
    main()
