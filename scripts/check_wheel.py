"""The install a user gets: build the wheel, install it with no extras into a clean venv, use it.

Why this exists: the tests run against an editable install with the ``test`` extra, so
they cannot see what ``pip install loaderscope`` gives a user. numpy was once only a test extra and
``loaderscope run out_of_order`` crashed in a clean venv; a wheel can also miss the page's files or
ship the frontend's tests. This check builds the wheel, reads its file list, installs it next to
``torch==2.13.0`` (pinned: an unpinned torch pulls GBs of CUDA) in a venv without system site
packages (with the uv beside the running Python when there is one, as in the project's venv: the
same wheel and declared dependencies as pip, in seconds rather than ~45 s; else with pip), runs a
scenario in the terminal, and drives ``loaderscope serve`` over HTTP: the page, a real run started
through the API until it is done, then Ctrl-C and no process left behind.

It runs the installed product, so it uses the standard library only. Run it with any Python >= 3.10
(scripts/test.sh uses the project's .venv): ``python scripts/check_wheel.py``. Everything it makes
lives in one temporary directory, removed at the end.
"""

from __future__ import annotations

import argparse
import http.cookiejar
import json
import os
import queue
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

ROOT = Path(__file__).resolve().parents[1]
TORCH = "torch==2.13.0"  # as scripts/bootstrap.sh pins it; a CPU build lies on local disk
MARKER = "LOADERSCOPE_WHEEL_CHECK"  # set on every process we start, inherited by all their children
URL_LINE = re.compile(r"loaderscope dashboard: (http://\S+)")
# static imports only: the page needs them to start (a dynamic import may be dev-only, e.g. ../dev/synth.js)
JS_IMPORT = re.compile(r"""^\s*(?:import|export)\b(?:[^;()'"]*?\bfrom)?\s*["'](\.{1,2}/[^"']+)["']""", re.M)
PAGE_REF = re.compile(r"""(?:src|href)=["']([^"':]+)["']""")
ACTIVE = frozenset({"starting", "running", "paused"})
T = TypeVar("T")


class CheckFailed(Exception):
    """What went wrong, in words; printed instead of a traceback."""


# --- helpers ---------------------------------------------------------------------------------------


@contextmanager
def step(name: str) -> Iterator[None]:
    started = time.monotonic()
    print(f"wheel check: {name} ...", flush=True)
    yield
    print(f"wheel check: {name}: ok ({time.monotonic() - started:.1f} s)", flush=True)


def run(argv: list[str], *, env: dict[str, str], cwd: Path, timeout: float) -> str:
    """Run a command to its end; its output, or CheckFailed with the output when it fails."""
    try:
        done = subprocess.run(argv, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired as exc:
        raise CheckFailed(f"{' '.join(argv)}: still running after {timeout:.0f} s\n{exc.output or ''}") from None
    if done.returncode != 0:
        raise CheckFailed(f"{' '.join(argv)}: exit code {done.returncode}\n{done.stdout}")
    return done.stdout


def wait_for(what: str, probe: Callable[[], T | None], timeout: float, interval: float = 0.2) -> T:
    """Poll ``probe`` until it returns something other than None; CheckFailed at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value is not None:
            return value
        if time.monotonic() > deadline:
            raise CheckFailed(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


def clean_env(tmp: Path) -> dict[str, str]:
    """The environment of a user's shell: nothing pointing at this checkout or at a dashboard."""
    # PYTHONDONTWRITEBYTECODE too: with pip's --no-compile, Python then writes the .pyc of what it
    # imports once, instead of every process compiling torch's modules again (~2 s each).
    drop = ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONSTARTUP", "PYTHONDONTWRITEBYTECODE")
    env = {k: v for k, v in os.environ.items() if k not in drop and not k.startswith("LOADERSCOPE_")}
    (tmp / "tmp").mkdir(exist_ok=True)
    env.update({"TMPDIR": str(tmp / "tmp"), MARKER: str(os.getpid()), "COLUMNS": "120"})
    return env


def marked_processes() -> list[str]:
    """Processes that carry this check's marker (Linux /proc): 'pid: command line'."""
    needle = f"{MARKER}={os.getpid()}".encode()
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            if needle in (entry / "environ").read_bytes().split(b"\0"):
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                found.append(f"{entry.name}: {cmdline.strip()}")
        except OSError:
            continue  # gone meanwhile, or not ours to read
    return found


def kill_marked() -> None:
    """After a failure: SIGKILL what is left of the processes this check started (they carry its marker)."""
    for line in marked_processes() if Path("/proc").is_dir() else []:
        try:
            os.kill(int(line.split(":")[0]), signal.SIGKILL)
        except ProcessLookupError:
            pass


def no_leftovers(after: str) -> None:
    if not Path("/proc").is_dir():
        return
    try:
        wait_for("every process to exit", lambda: True if not marked_processes() else None, timeout=15)
    except CheckFailed:
        raise CheckFailed(f"processes left over after {after}:\n  " + "\n  ".join(marked_processes())) from None


# --- the steps -------------------------------------------------------------------------------------


def build_wheel(tmp: Path, source: Path) -> Path:
    dist = tmp / "dist"
    run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(dist), str(source)],
        env=dict(os.environ), cwd=source, timeout=300)
    wheels = sorted(dist.glob("loaderscope-*.whl"))
    if len(wheels) != 1:
        raise CheckFailed(f"expected one loaderscope wheel in {dist}, found {[w.name for w in wheels]}")
    return wheels[0]


def check_contents(wheel: Path, source: Path) -> None:
    """The page and every file it loads are inside; the frontend's tests and dev tools are not."""
    names = set(zipfile.ZipFile(wheel).namelist())
    front = "loaderscope/frontend/"
    stray = sorted(n for n in names if n.startswith((front + "tests/", front + "dev/")))
    if stray:
        raise CheckFailed(f"{wheel.name} ships files users do not need: {stray[:5]} ({len(stray)} in all)")
    wanted = {front + "index.html"}
    wanted |= {front + p.relative_to(source / "frontend").as_posix()
               for folder in ("js", "css") for p in (source / "frontend" / folder).rglob("*") if p.is_file()}
    missing = sorted(wanted - names)
    if missing:
        raise CheckFailed(f"{wheel.name} lacks the page's files: {missing}")
    if "loaderscope/cli/main.py" not in names:
        raise CheckFailed(f"{wheel.name} lacks the package itself (loaderscope/cli/main.py)")


def installer(python: Path) -> list[str] | None:
    """uv installing into the venv of ``python``, where uv lies beside the Python running this check (the
    project's venv has it), with the wheel directories pip is told to look in, as scripts/uv.sh hands
    them over (uv reads no pip configuration; this machine's CPU torch lies there); None without uv.
    The same wheel and declared dependencies as pip installs: ~3 s against pip's ~35 s of CPU."""
    uv = Path(sys.executable).parent / "uv"
    if not uv.is_file():
        return None
    links = os.environ.get("PIP_FIND_LINKS") or subprocess.run(
        [sys.executable, "-m", "pip", "config", "get", "global.find-links"], capture_output=True, text=True).stdout
    return [str(uv), "pip", "install", "-q", "--python", str(python),
            *(f"--find-links={link}" for link in links.split())]


def make_venv(tmp: Path, wheel: Path, env: dict[str, str]) -> Path:
    """A venv that sees no other site-packages, with torch pinned and the wheel without extras."""
    venv = tmp / "venv"
    python = venv / "bin" / "python"
    uv = installer(python)
    started = time.monotonic()
    run([sys.executable, "-m", "venv", *(["--without-pip"] if uv else []), str(venv)], env=env, cwd=tmp, timeout=120)
    made = time.monotonic()
    # pip's --no-compile: torch's thousands of .pyc files cost ~15 s here; Python writes those it imports.
    command = uv or [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-compile"]
    run([*command, TORCH, str(wheel)], env=env, cwd=tmp, timeout=600)
    print(f"  venv {made - started:.1f} s, {'uv' if uv else 'pip'} install {time.monotonic() - made:.1f} s", flush=True)
    where = run([str(python), "-c", "import loaderscope; print(loaderscope.__file__)"], env=env, cwd=tmp,
                timeout=60).strip()
    if not Path(where).is_relative_to(venv):
        raise CheckFailed(f"the clean venv imports loaderscope from {where}, not from its own site-packages")
    return venv


def check_run(venv: Path, tmp: Path, env: dict[str, str]) -> None:
    trace = tmp / "out_of_order.trace.jsonl"
    out = run([str(venv / "bin" / "loaderscope"), "run", "out_of_order", "--out", str(trace)],
              env=env, cwd=tmp, timeout=180)
    for expected in ("batches/s", "arrival order:", "Diagnosis", "trace:"):
        if expected not in out:
            raise CheckFailed(f"`loaderscope run out_of_order` printed no {expected!r}:\n{out}")
    if not trace.is_file() or trace.stat().st_size == 0:
        raise CheckFailed(f"`loaderscope run out_of_order` wrote no trace at {trace}:\n{out}")
    print("  " + next(line for line in out.splitlines() if "batches/s" in line).strip(), flush=True)


class Server:
    """``loaderscope serve`` as a user starts it; its output is kept for the failure report."""

    def __init__(self, venv: Path, tmp: Path, env: dict[str, str]) -> None:
        self.process = subprocess.Popen(
            [str(venv / "bin" / "loaderscope"), "serve", "--port", "0", "--no-browser"], env=env, cwd=tmp,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self.output: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.output.append(line)
            self.lines.put(line)

    def url(self, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            try:
                found = URL_LINE.search(self.lines.get(timeout=left))
            except queue.Empty:
                break
            if found:
                return found.group(1)
        state = "exited" if self.process.poll() is not None else "still running"
        raise CheckFailed(f"`loaderscope serve` printed no dashboard URL within {timeout:.0f} s ({state})")

    def stop(self, timeout: float) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            raise CheckFailed(f"`loaderscope serve` still running {timeout:.0f} s after Ctrl-C (SIGINT)") from None

    def kill(self) -> None:
        """After a failure: end the server's process group (main() ends the rest)."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()


def fetch(opener: urllib.request.OpenerDirector, url: str, *, token: str | None = None,
          body: dict[str, Any] | None = None) -> tuple[int, bytes]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        headers["Content-Type"] = "application/json"
    request = urllib.request.Request(url, data=data, headers=headers)
    try:
        with opener.open(request, timeout=30) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        raise CheckFailed(f"{request.get_method()} {url}: HTTP {exc.code}: {exc.read()[:500]!r}") from None
    except urllib.error.URLError as exc:
        raise CheckFailed(f"{request.get_method()} {url}: {exc.reason}") from None


def check_page(opener: urllib.request.OpenerDirector, jar: http.cookiejar.CookieJar, url: str) -> None:
    """The printed URL trades its token for a cookie, then the page and every module it imports load."""
    status, page = fetch(opener, url)
    if status != 200 or b'type="module"' not in page:
        raise CheckFailed(f"GET {url} did not answer the page (HTTP {status}): {page[:300]!r}")
    if not list(jar):
        raise CheckFailed(f"GET {url} set no cookie: the page could not call the API")
    base = urllib.parse.urljoin(url, "/")
    pending = [urllib.parse.urljoin(base, ref) for ref in PAGE_REF.findall(page.decode())]
    seen: set[str] = set()
    while pending:
        target = pending.pop()
        if target in seen:
            continue
        seen.add(target)
        _, text = fetch(opener, target)
        if target.endswith(".js"):
            pending += [urllib.parse.urljoin(target, ref) for ref in JS_IMPORT.findall(text.decode())]
    print(f"  the page and {len(seen)} files it loads", flush=True)


def check_serve(server: Server) -> None:
    started = time.monotonic()
    url = server.url(timeout=60)
    print(f"  dashboard URL printed after {time.monotonic() - started:.1f} s", flush=True)
    token = urllib.parse.parse_qs(urllib.parse.urlsplit(url).query)["token"][0]
    base = urllib.parse.urljoin(url, "/")
    jar = http.cookiejar.CookieJar()
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
    check_page(opener, jar, url)
    fetch(opener, base + "api/runs")  # the page's own way in: the cookie alone
    plain = urllib.request.build_opener()
    posting = time.monotonic()
    _, created = fetch(plain, base + "api/runs", token=token,
                       body={"scenario": "out_of_order", "mode": "real", "params": {}})
    run_id = json.loads(created)["id"]
    posted = time.monotonic()
    print(f"  POST /api/runs answered in {posted - posting:.1f} s (run {run_id})", flush=True)

    def finished() -> dict[str, Any] | None:
        detail = json.loads(fetch(plain, f"{base}api/runs/{run_id}", token=token)[1])
        return None if detail["status"] in ACTIVE else detail

    detail = wait_for(f"run {run_id} to end", finished, timeout=120)
    if detail["status"] != "done" or not detail["batches"]:
        raise CheckFailed(f"run {run_id} ended {detail['status']!r} after {detail['batches']} batches: "
                          f"error={detail.get('error')!r}\n{detail.get('log_tail') or ''}")
    print(f"  run {run_id}: done, {detail['batches']} batches, {time.monotonic() - posted:.1f} s after that",
          flush=True)


# --- main ------------------------------------------------------------------------------------------


def check(tmp: Path, source: Path) -> None:
    env = clean_env(tmp)
    with step(f"build the wheel from {source}"):
        wheel = build_wheel(tmp, source)
    with step(f"contents of {wheel.name}"):
        check_contents(wheel, source)
    with step(f"clean venv with {TORCH} and the wheel, no extras"):
        venv = make_venv(tmp, wheel, env)
    with step("loaderscope run out_of_order"):
        check_run(venv, tmp, env)
        no_leftovers("loaderscope run")
    with step("loaderscope serve: page, POST /api/runs, run done, Ctrl-C"):
        server = Server(venv, tmp, env)
        try:
            check_serve(server)
            stopping = time.monotonic()
            code = server.stop(timeout=20)
            if code != 0:
                raise CheckFailed(f"`loaderscope serve` exited with {code} after Ctrl-C")
            no_leftovers("the dashboard stopped")
            print(f"  stopped by Ctrl-C, nothing left, {time.monotonic() - stopping:.1f} s", flush=True)
        except CheckFailed as exc:
            server.kill()
            raise CheckFailed(f"{exc}\n--- loaderscope serve printed ---\n{''.join(server.output)}") from None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, default=ROOT,
                        help="the project tree to build the wheel from (default: this checkout)")
    source = parser.parse_args().source.resolve()
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="loaderscope-wheel-check-") as name:
        try:
            check(Path(name), source)
        except CheckFailed as exc:
            kill_marked()
            print(f"wheel check FAILED: {exc}", file=sys.stderr, flush=True)
            return 1
    print(f"wheel check: passed in {time.monotonic() - started:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
