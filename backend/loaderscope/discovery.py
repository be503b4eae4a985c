"""Which dashboard ``watch()`` streams to, and the one it starts in the background when there is none.

``find_dashboard(url)`` decides, in this order:

1. ``url`` (``http://127.0.0.1:8000/?token=...``) or ``$LOADERSCOPE_URL`` (+ ``$LOADERSCOPE_TOKEN``);
2. ``http://127.0.0.1:8000`` when it proves that it holds ``$LOADERSCOPE_TOKEN``;
3. the dashboard named in a per-user state file, if it proves that it holds the token written there
   (``loaderscope serve`` publishes itself there, and so does a dashboard started by 4.);
4. a new dashboard started in the background, detached from the script, and published in the state
   file so that the next script reuses it instead of starting another.

A port is never trusted by itself: once our dashboard is gone, another user may listen where the
state file, ``$LOADERSCOPE_URL`` or the default names. Every check is the challenge of
``proof.py``, which never sends the token, and the uplink repeats it on each connection before the
token or any event goes out. The state file is trusted only if it and its directory belong to the
current user and nobody else can read or write them (0600 in 0700): it holds the token, which lets
its bearer start processes through the dashboard. The script says once, on stderr, where it streams
(the URL without the token) and how that dashboard was found.
"""

from __future__ import annotations

import contextlib
import http.client
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import orjson

try:  # POSIX only; elsewhere nothing is published and each script starts its own dashboard
    import fcntl
except ImportError:  # pragma: no cover (Windows)
    fcntl = None  # type: ignore[assignment]

from loaderscope import proof
from loaderscope.proof import is_loopback, new_token

DEFAULT_URL = "http://127.0.0.1:8000"
URL_ENV, TOKEN_ENV = "LOADERSCOPE_URL", "LOADERSCOPE_TOKEN"
STATE_FILE, LOCK_FILE = "dashboard.json", "dashboard.lock"
MAX_STATE_BYTES = 64 << 10
LOG_HEAD = 64 << 10  # bytes of a starting dashboard's log read for its URL (printed within the first lines)
CHECK_TIMEOUT = 1.0  # seconds per HTTP check: a local dashboard answers in milliseconds
# a command the user typed (loaderscope compare) may wait longer for a dashboard busy with a run (a
# demo's real DataLoader on a loaded machine once took more than CHECK_TIMEOUT to answer)
COMMAND_TIMEOUT = 10.0
START_TIMEOUT = 30.0  # seconds a new dashboard has to come up (it imports FastAPI, uvicorn, ...)
URL_LINE = re.compile(r"loaderscope dashboard: (http://[^/\s]+)/")
SERVER_PID = re.compile(r"Started server process \[(\d+)\]")  # uvicorn's line in a dashboard's log
LEGACY_DIR_PREFIX = "loaderscope-dashboard-"  # where earlier versions kept a log without a private directory

# The middle process of a double fork: it starts the dashboard in a new session and exits at once,
# so the dashboard is reparented to init (which reaps it) and the training script holds no child
# process, no Popen object (no ResourceWarning at exit) and no zombie if the dashboard dies first.
# os._exit skips Popen.__del__ and any buffered-IO finalizers of this short-lived process.
_LAUNCHER = (
    "import os, subprocess, sys\n"
    "log = open(int(sys.argv[1]), 'ab', closefd=False)\n"
    "p = subprocess.Popen(sys.argv[2:], stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,"
    " start_new_session=True)\n"
    "sys.stdout.write(str(p.pid)); sys.stdout.flush()\n"
    "os._exit(0)\n"
)


@dataclass(frozen=True)
class Published:
    """A dashboard as the state file names it."""

    url: str  # http://host:port, no path
    token: str
    pid: int | None = None  # its process, when known (for the user, and to clean up its log)
    log: str | None = None  # its output, when watch() started it


_ours: Published | None = None  # the dashboard this process started, if any
_said: set[str] = set()  # messages printed once per process


# --- the entry points -----------------------------------------------------------------------------


def find_dashboard(url: str | None = None) -> tuple[str, str | None]:
    """(base URL, token) of the dashboard to stream to; starts one in the background if need be.

    Raises:
        RuntimeError: no dashboard was given, none runs and a new one did not start.
    """
    base, token = dashboard_address(url)
    if base:
        how = "given to watch(url=...)" if url else f"from ${URL_ENV}"
        _say(f"loaderscope: streaming to the dashboard at {base}/ ({how}; events go there once it proves "
             "that it holds the token)")
        return base, token
    if token and accepts(DEFAULT_URL, token):
        _say(f"loaderscope: streaming to the dashboard at {DEFAULT_URL}/ (the default address, where it proved "
             f"that it holds ${TOKEN_ENV})")
        return DEFAULT_URL, token
    directory = private_dir()
    found = _alive(_ours) or _alive(read_state(directory))
    if found is None:
        with _locked(directory):
            # Another script may have started one while we waited for the lock.
            found = _alive(read_state(directory)) or _start_published(directory)
    if found != _ours and directory is not None:  # ours was announced when it started
        _say(f"loaderscope: streaming to the dashboard at {found.url}/ (published in {directory / STATE_FILE}, "
             "where it proved that it holds the token written there)")
    return found.url, found.token


def publish(url: str, token: str) -> bool:
    """Name a running dashboard in the state file, so that ``watch()`` without a URL streams to it.

    For ``loaderscope serve`` once it listens; only loopback addresses are published. The latest
    published dashboard wins. Returns whether the state file was written; never raises.
    """
    try:
        host = urlsplit(url).hostname or ""
        directory = private_dir()
        if not is_loopback(host) or directory is None:
            return False
        write_state(directory, Published(url.rstrip("/"), token, os.getpid()))
        return True
    except (OSError, ValueError):
        return False


def unpublish(url: str) -> None:
    """Forget ``url`` in the state file if it still names it (a dashboard shutting down); never raises."""
    try:
        directory = private_dir()
        known = read_state(directory)
        if directory is not None and known is not None and known.url == url.rstrip("/"):
            (directory / STATE_FILE).unlink(missing_ok=True)
    except (OSError, ValueError):
        pass


def dashboard_address(url: str | None) -> tuple[str, str | None]:
    """(base URL, token) from ``url``, ``$LOADERSCOPE_URL`` and ``$LOADERSCOPE_TOKEN``; base is "" if none."""
    url = url or os.environ.get(URL_ENV)
    if not url:
        return "", os.environ.get(TOKEN_ENV)
    parts = urlsplit(url)
    token = parse_qs(parts.query).get("token", [os.environ.get(TOKEN_ENV)])[0]
    return f"{parts.scheme or 'http'}://{parts.netloc}", token


# --- checks over HTTP -----------------------------------------------------------------------------


def accepts(url: str, token: str, timeout: float = CHECK_TIMEOUT) -> bool:
    """Whether the dashboard at ``url`` proves that it holds ``token`` (``proof.py``), which is not sent.

    Over https, the certificate proves who answers: the token goes in a cheap authenticated GET.
    """
    parts = urlsplit(url)
    if parts.scheme == "https":
        return _status(url, "/api/runs", token, timeout) == 200
    try:
        proof.proven_socket(url, token, timeout, loopback=is_loopback(parts.hostname or "")).close()
        return True
    except (OSError, ValueError, proof.Unproven):
        return False


def answers(url: str) -> bool:
    """Whether a dashboard answers ``GET /api/health`` at ``url`` (no token needed)."""
    return _status(url, "/api/health") == 200


def _status(url: str, path: str, token: str | None = None, timeout: float = CHECK_TIMEOUT) -> int | None:
    parts = urlsplit(url)
    kind = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    conn = None
    try:
        conn = kind(parts.hostname or "127.0.0.1", parts.port, timeout=timeout)
        conn.request("GET", path, headers=headers)
        response = conn.getresponse()
        response.read()
        return response.status
    except (OSError, ValueError, http.client.HTTPException):
        return None
    finally:
        if conn is not None:
            conn.close()  # an unclosed socket would be a ResourceWarning


def _alive(known: Published | None) -> Published | None:
    return known if known is not None and accepts(known.url, known.token) else None


# --- the state file -------------------------------------------------------------------------------


def state_dir() -> Path:
    """``$XDG_RUNTIME_DIR/loaderscope`` (per user, gone at logout), else ``~/.cache/loaderscope``."""
    runtime = os.environ.get("XDG_RUNTIME_DIR", "")
    if os.path.isabs(runtime) and os.path.isdir(runtime):
        return Path(runtime) / "loaderscope"
    cache = os.environ.get("XDG_CACHE_HOME", "")
    return (Path(cache) if os.path.isabs(cache) else Path.home() / ".cache") / "loaderscope"


def private_dir() -> Path | None:
    """The state directory, made 0700 if need be; None where it is not this user's alone."""
    if fcntl is None or not hasattr(os, "getuid"):
        return None
    path = state_dir()
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = os.lstat(path)
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
            return None  # a symlink or someone else's directory: trust nothing in it
        if info.st_mode & 0o077:
            os.chmod(path, 0o700)  # ours but made with a looser mode: others must not list or replace files
        return path
    except OSError:
        return None


def read_state(directory: Path | None) -> Published | None:
    """The published dashboard, if the file is ours, private (0600) and well formed."""
    if directory is None:
        return None
    try:
        fd = os.open(directory / STATE_FILE, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return None
    with os.fdopen(fd, "rb") as file:
        info = os.fstat(file.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
            return None
        data = file.read(MAX_STATE_BYTES)
    return _parsed(data)


def _parsed(data: bytes) -> Published | None:
    try:
        raw: Any = orjson.loads(data)
        url, token, pid, log = raw["url"], raw["token"], raw.get("pid"), raw.get("log")
    except (orjson.JSONDecodeError, KeyError, TypeError, AttributeError):
        return None
    if not (isinstance(url, str) and url.startswith("http") and isinstance(token, str) and token):
        return None
    return Published(url, token, pid if isinstance(pid, int) else None, log if isinstance(log, str) else None)


def write_state(directory: Path, published: Published) -> None:
    """Atomically: a reader sees the old file or the new one, never half of one. mkstemp makes it 0600."""
    fd, temporary = tempfile.mkstemp(dir=directory, prefix=".dashboard-", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(orjson.dumps(asdict(published)))
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, directory / STATE_FILE)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


@contextlib.contextmanager
def _locked(directory: Path | None) -> Iterator[None]:
    """Serialise starting a dashboard among this user's scripts; the kernel drops the lock if we die."""
    if directory is None or fcntl is None:
        yield
        return
    try:
        fd = os.open(directory / LOCK_FILE, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o600)
    except OSError:  # a read-only or full disk: a second dashboard at worst, never a failed watch()
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the flock


# --- starting one ---------------------------------------------------------------------------------


def _start_published(directory: Path | None) -> Published:
    """A new background dashboard, written to the state file for the next script (called under the lock)."""
    global _ours
    stale = read_state(directory)
    _warn_if_unknown_dashboard()
    remove_legacy_dirs()
    started = start_dashboard(directory)
    if directory is not None:
        with contextlib.suppress(OSError):
            write_state(directory, started)
        _remove_stale_log(directory, stale)
    _ours = started
    stop = f"; stop it with `kill {started.pid}`" if started.pid else ""
    # The token stays out of the script's output (logs are shared more than terminals): the log has the URL.
    _say(f"loaderscope: started a dashboard at {started.url}/ and streaming to it (no dashboard was found; its URL "
         f"with the token is in its log: {started.log}); it keeps running after this script and later scripts "
         f"stream to it too{stop}")
    return started


def _warn_if_unknown_dashboard() -> None:
    if answers(DEFAULT_URL):
        _say(f"loaderscope: a dashboard answers at {DEFAULT_URL} but its token is not known here, so it would "
             "refuse the events; starting another one. To use that one, pass the URL it printed (with ?token=...) "
             f"to watch(url=...) or set ${URL_ENV}")


def start_dashboard(directory: Path | None) -> Published:
    """``loaderscope serve --port 0`` in the background, detached; returns once it accepts its token.

    Raises:
        RuntimeError: it exited or did not come up within START_TIMEOUT.
    """
    token = new_token()
    # Its output goes to a file: a pipe nobody reads would fill up and freeze the dashboard. Without a
    # private directory the file is unlinked at once, so no exit path leaves anything in /tmp; it
    # lives on as the dashboard's stdout.
    if directory is not None:
        fd, log = tempfile.mkstemp(dir=directory, prefix="dashboard-", suffix=".log")
    else:
        with tempfile.TemporaryFile() as unlinked:
            fd, log = os.dup(unlinked.fileno()), None
    try:
        pid = _spawn_detached([sys.executable, "-m", "loaderscope.cli", "serve", "--port", "0", "--no-browser"],
                              _dashboard_env(token), fd, directory or Path("/"))
        url = _wait_started(pid, fd, log, token)
    finally:
        os.close(fd)
    return Published(url, token, pid, log or f"/proc/{pid}/fd/1")


def _dashboard_env(token: str) -> dict[str, str]:
    """Our environment, the token, and our loaderscope on the path (the script may have put it there itself)."""
    package_root = str(Path(__file__).resolve().parent.parent)  # the directory that holds loaderscope/
    path = os.pathsep.join(p for p in (package_root, os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, TOKEN_ENV: token, "PYTHONPATH": path, "PYTHONUNBUFFERED": "1"}


def _spawn_detached(argv: list[str], env: dict[str, str], log: int, cwd: Path) -> int:
    """Start ``argv`` through the launcher (a double fork), output to the file open as ``log``; its pid.
    ``cwd``: a directory that stays."""
    try:
        done = subprocess.run(
            [sys.executable, "-I", "-c", _LAUNCHER, str(log), *argv], env=env, cwd=cwd, pass_fds=(log,),
            stdin=subprocess.DEVNULL, capture_output=True, timeout=START_TIMEOUT, check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise RuntimeError(f"loaderscope: could not start a dashboard: {exc}") from None
    if done.returncode != 0 or not done.stdout.strip().isdigit():
        raise RuntimeError(f"loaderscope: could not start a dashboard: {done.stderr.decode(errors='replace')}")
    return int(done.stdout)


def _wait_started(pid: int, fd: int, log: str | None, token: str) -> str:
    """Its URL, once it printed it and proves the token, so the state file never names a half-started one."""
    deadline = time.monotonic() + START_TIMEOUT
    url = ""
    while time.monotonic() < deadline and _running(pid):
        if not url:
            match = URL_LINE.search(_read_log(fd))
            url = match.group(1) if match else ""
        if url and accepts(url, token):
            return url
        time.sleep(0.05)
    tail = _read_log(fd)[-2000:]
    where = f" (log: {log})" if log else ""
    raise RuntimeError(f"loaderscope: could not start a dashboard{where}; start one with `loaderscope serve` "
                       f"and pass its URL to watch(url=...)\n{tail}")


def _read_log(fd: int) -> str:
    return os.pread(fd, LOG_HEAD, 0).decode(errors="replace")


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # a process exists under that id (not ours: the id was reused)
    return True


def _remove_stale_log(directory: Path, stale: Published | None) -> None:
    """A dead dashboard's log in our directory is of no use any more."""
    if stale is None or stale.log is None or (stale.pid is not None and _running(stale.pid)):
        return
    log = Path(stale.log)
    if log.parent == directory and log.name.startswith("dashboard-"):
        log.unlink(missing_ok=True)


def remove_legacy_dirs() -> None:
    """``/tmp/loaderscope-dashboard-*`` of ours that earlier versions left, once their dashboard is gone
    (its log names its pid: uvicorn's "Started server process [PID]")."""
    for directory in Path(tempfile.gettempdir()).glob(f"{LEGACY_DIR_PREFIX}*"):
        try:
            info = os.lstat(directory)
            if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
                continue  # a link, or another user's: not ours to judge
            pids = {int(pid) for log in directory.glob("dashboard-*.log")
                    for pid in SERVER_PID.findall(log.read_text(errors="replace"))}
        except OSError:
            continue
        if not any(_running(pid) for pid in pids) and time.time() - info.st_mtime > START_TIMEOUT:
            shutil.rmtree(directory, ignore_errors=True)


def _say(message: str) -> None:
    if message not in _said:
        _said.add(message)
        print(message, file=sys.stderr, flush=True)
