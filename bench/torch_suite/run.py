#!/usr/bin/env python
"""Run PyTorch's own DataLoader test suite twice: vanilla, then through loaderscope's probe.

    .venv/bin/python bench/torch_suite/run.py              # the whole file, both passes
    .venv/bin/python bench/torch_suite/run.py -k TestDataLoader --timeout 120

Each pass is a pytest subprocess over the unmodified ``test_dataloader.py`` in this folder. In the
instrumented pass ``LOADERSCOPE_TORCH_SUITE=instrumented`` makes ``patch/sitecustomize.py`` (on
``PYTHONPATH``) and ``conftest.py`` replace ``torch.utils.data.DataLoader`` and
``torch.utils.data.dataloader.DataLoader`` with an ``InstrumentedDataLoader`` subclass whose ``sink``
defaults to a no-op, in every Python process of the run (spawned children and ``python -c``
subprocesses included). Per-test outcomes come from ``--junitxml``; the report is a table of
passed/failed/skipped/errors per pass and the list that must be empty: tests that pass vanilla but
not instrumented, each with its failure reason. Exit status: 0 when that list is empty, 1 when not,
2 when a pass produced no results.

Not part of CI (it takes minutes); results and logs go to ``results/`` here (git-ignored).
"""

from __future__ import annotations

import argparse
import collections
import os
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

HERE = Path(__file__).resolve().parent
SUITE = HERE / "test_dataloader.py"
SOURCE = ("pytorch/pytorch", "test/test_dataloader.py", "74436f9025609987bbc69c617564f98635b67807")
MODES = ("vanilla", "instrumented")
SEVERITY = {"passed": 0, "skipped": 1, "failed": 2, "error": 3}


def run_pass(mode: str, args: argparse.Namespace, out: Path) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    xml, log, constructed = out / f"{mode}.xml", out / f"{mode}.log", out / "constructed.txt"
    for stale in (xml, log, constructed):
        stale.unlink(missing_ok=True)
    env = dict(os.environ)
    env["LOADERSCOPE_TORCH_SUITE"] = mode
    env["LOADERSCOPE_TORCH_SUITE_LOG"] = str(out)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(HERE / "patch"), env.get("PYTHONPATH")) if p)
    cmd = [sys.executable, "-m", "pytest", SUITE.name, "-c", "pytest.ini", "-p", "no:cacheprovider",
           "-q", "-rA", f"--timeout={args.timeout}", "--timeout-method=signal",
           f"--junitxml={xml}", "-o", "junit_family=xunit2"]
    if args.k:
        cmd += ["-k", args.k]
    cmd += args.pytest_args
    print(f"[{mode}] {' '.join(cmd)}", flush=True)
    start = time.monotonic()
    with open(log, "w") as sink:
        proc = subprocess.Popen(cmd, cwd=HERE, env=env, stdout=sink, stderr=subprocess.STDOUT,
                                start_new_session=True)  # its own group: a hang is killed whole
        try:
            rc = proc.wait(timeout=args.pass_timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            rc = proc.wait()
            print(f"[{mode}] killed after {args.pass_timeout} s", flush=True)
    wall = time.monotonic() - start
    tail = log.read_text(errors="replace").strip().splitlines()[-1:] or ["(no output)"]
    print(f"[{mode}] exit {rc} in {wall:.0f} s: {tail[0]}", flush=True)
    pids = constructed.read_text().split() if constructed.exists() else []
    return {"rc": rc, "wall": wall, "tests": parse_junit(xml), "log": log,
            "loaders": len(pids), "pids": collections.Counter(pids)}


def parse_junit(xml: Path) -> dict[str, tuple[str, str]]:
    """test id -> (outcome, reason); a test reported twice (call, then teardown) keeps the worst."""
    if not xml.exists():
        return {}
    tests: dict[str, tuple[str, str]] = {}
    for case in ET.parse(xml).getroot().iter("testcase"):
        test_id = f"{case.get('classname')}::{case.get('name')}"
        outcome, reason = "passed", ""
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                outcome = {"failure": "failed"}.get(child.tag, child.tag)
                reason = child.get("message") or (child.text or "").strip()
                if child.tag != "skipped" and child.text:
                    reason = f"{reason}\n{child.text.strip()}"
                break
        previous = tests.get(test_id)
        if previous is None or SEVERITY[outcome] > SEVERITY[previous[0]]:
            tests[test_id] = (outcome, reason)
    return tests


def short(reason: str, lines: int = 12) -> str:
    kept = [line for line in reason.strip().splitlines() if line.strip()]
    if len(kept) > lines:  # the message, then the end of the traceback (where the error is)
        kept = kept[:2] + ["..."] + kept[-(lines - 3):]
    return "\n".join("      " + line[:200] for line in kept)


def report(results: dict[str, dict]) -> int:
    print()
    print(f"PyTorch DataLoader suite: {SOURCE[0]} {SOURCE[1]} @ {SOURCE[2][:12]}")
    header = f"{'':16}" + "".join(f"{mode:>14}" for mode in results)
    print(header)
    print("-" * len(header))
    for outcome in ("passed", "failed", "skipped", "error"):
        counts = [sum(1 for o, _ in r["tests"].values() if o == outcome) for r in results.values()]
        print(f"{outcome:16}" + "".join(f"{c:>14}" for c in counts))
    print(f"{'total':16}" + "".join(f"{len(r['tests']):>14}" for r in results.values()))
    print(f"{'wall time (s)':16}" + "".join(f"{r['wall']:>14.0f}" for r in results.values()))
    print(f"{'probed loaders':16}" + "".join(f"{r['loaders']:>14}" for r in results.values()))
    print(f"{'  in processes':16}" + "".join(f"{len(r['pids']):>14}" for r in results.values()))
    print()

    if any(not r["tests"] for r in results.values()):
        for mode, r in results.items():
            if not r["tests"]:
                print(f"{mode}: no per-test results (exit {r['rc']}); see {r['log']}")
        return 2
    if len(results) < 2:
        return 0

    vanilla, probed = results["vanilla"]["tests"], results["instrumented"]["tests"]
    regressions = sorted(t for t, (o, _) in vanilla.items()
                         if o == "passed" and probed.get(t, ("missing",))[0] != "passed")
    print(f"Passes vanilla but not instrumented (must be empty): {len(regressions)}")
    for test in regressions:
        outcome, reason = probed.get(test, ("missing", "not run in the instrumented pass"))
        print(f"  {test}: {outcome}")
        print(short(reason))
    others = sorted(t for t, (o, _) in vanilla.items() if o in ("failed", "error"))
    if others:
        print(f"\nFails vanilla too (torch/environment, not the probe): {len(others)}")
        for test in others:
            print(f"  {test}: {vanilla[test][0]} vanilla, {probed.get(test, ('missing',))[0]} instrumented")
            print(short(vanilla[test][1], lines=4))
    better = sorted(t for t, (o, _) in probed.items() if o == "passed" and vanilla.get(t, ("",))[0] != "passed")
    if better:
        print(f"\nPasses instrumented but not vanilla: {len(better)}")
        for test in better:
            print(f"  {test}: {vanilla.get(test, ('missing',))[0]} vanilla")
    reasons = collections.Counter(r.splitlines()[0][:120] if r else "?" for o, r in vanilla.values() if o == "skipped")
    if reasons:
        print("\nSkipped (vanilla), by reason:")
        for reason, n in reasons.most_common():
            print(f"  {n:4}  {reason}")
    return 1 if regressions else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-k", help="pytest -k expression (a subset of the suite)")
    parser.add_argument("--timeout", type=int, default=180, help="per-test limit in seconds (pytest-timeout)")
    parser.add_argument("--pass-timeout", type=int, default=1800, help="limit for a whole pass in seconds")
    parser.add_argument("--only", choices=MODES, help="run one pass only")
    parser.add_argument("--out", type=Path, default=HERE / "results", help="junit XML and logs go here")
    parser.add_argument("pytest_args", nargs="*", help="more pytest arguments (after --)")
    args = parser.parse_args()
    if not SUITE.exists():
        print(f"{SUITE} is missing. Fetch {SOURCE[1]} of {SOURCE[0]} at {SOURCE[2]} (or the version\n"
              "matching your torch), add the header comment described in README.md, and run again.")
        return 2
    start = time.monotonic()
    results = {mode: run_pass(mode, args, args.out / mode) for mode in MODES if args.only in (None, mode)}
    status = report(results)
    print(f"\ntotal wall time: {time.monotonic() - start:.0f} s; logs and junit XML in {args.out}")
    return status


if __name__ == "__main__":
    sys.exit(main())
