"""A preloaded process that forks run processes, so a run starts in a fraction of a second.

A fresh ``python -m loaderscope.server.processes.runproc`` spends about two seconds importing torch before
its DataLoader does anything. The launcher imports everything once, then forks a run process per
request (as torch's DataLoader forks its workers). Each child calls ``setsid()`` and so leads its
own process group, exactly like a run started with ``start_new_session=True``: stops, kills and
orphan checks work the same. The launcher reaps its children and reports their exit codes.

Protocol, JSON lines: the server sends ``{"id", "argv", "log"}`` on the launcher's stdin; the
launcher answers ``{"id", "pid"}`` (or ``{"id", "error"}``) and, later, ``{"exit": pid, "code"}``
with ``code`` as ``Popen.returncode`` has it (negative: killed by that signal). The launcher exits
when its stdin closes (the server is gone).
"""

from __future__ import annotations

import asyncio
import itertools
import os
import select
import subprocess
import sys
import threading
import traceback
from pathlib import Path
from typing import Any

import orjson

from loaderscope.server.processes.process import SECRET_ENV

REAP_EVERY = 0.05  # seconds between checks for exited children


# --- the server's side ----------------------------------------------------------------------------


class LaunchedProcess:
    """A run process forked by the launcher: what RunManager needs of a ``Popen``."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self._exited = threading.Event()

    def wait(self, timeout: float | None = None) -> int | None:
        self._exited.wait(timeout)
        return self.returncode

    def poll(self) -> int | None:
        return self.returncode

    def _exit(self, code: int) -> None:
        self.returncode = code
        self._exited.set()


class Launcher:
    """Starts the launcher process and talks to it; ``spawn`` is awaited on the server's loop."""

    def __init__(self, env: dict[str, str]) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "loaderscope.server.processes.launcher"], env=env, stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=None, start_new_session=True, close_fds=True,
        )
        self._ids = itertools.count()
        self._replies: dict[int, tuple[asyncio.AbstractEventLoop, asyncio.Future[dict[str, Any]]]] = {}
        self._children: dict[int, LaunchedProcess] = {}
        self._exits: dict[int, int] = {}  # exits reported before their spawn reply was handled
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()
        threading.Thread(target=self._read, name="loaderscope-launcher", daemon=True).start()

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    async def spawn(self, argv: list[str], log_path: Path | None, secret: str) -> LaunchedProcess:
        """Fork a run process running ``runproc.main(argv)``.

        Raises:
            OSError: the launcher is gone or could not fork.
        """
        loop = asyncio.get_running_loop()
        request_id = next(self._ids)
        future: asyncio.Future[dict[str, Any]] = loop.create_future()
        with self._lock:
            self._replies[request_id] = (loop, future)
        self._send({"id": request_id, "argv": argv, "log": str(log_path) if log_path else None, "secret": secret})
        reply = await future
        if "pid" not in reply:
            raise OSError(reply.get("error", "the launcher could not start the run"))
        return self._child(reply["pid"])

    def close(self) -> None:
        """End the launcher (its children lead their own groups: they are not affected)."""
        if self.process.stdin is not None:
            self.process.stdin.close()  # the launcher exits at end of input...
        try:
            self.process.wait(0.5)
        except subprocess.TimeoutExpired:
            self.process.kill()  # ...unless it is still importing torch
            self.process.wait()

    def _send(self, message: dict[str, Any]) -> None:
        assert self.process.stdin is not None
        try:
            with self._write_lock:
                self.process.stdin.write(orjson.dumps(message) + b"\n")
                self.process.stdin.flush()
        except (BrokenPipeError, ValueError) as exc:
            raise OSError(f"the run launcher is gone ({exc})") from None

    def _child(self, pid: int) -> LaunchedProcess:
        with self._lock:
            child = self._children[pid] = LaunchedProcess(pid)
            code = self._exits.pop(pid, None)
        if code is not None:
            child._exit(code)
        return child

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            try:
                message = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue
            if "exit" in message:
                self._on_exit(message["exit"], message["code"])
            elif "id" in message:
                self._on_reply(message)
        self._launcher_gone()

    def _on_reply(self, message: dict[str, Any]) -> None:
        with self._lock:
            loop, future = self._replies.pop(message["id"], (None, None))
        if loop is not None and future is not None:
            loop.call_soon_threadsafe(_resolve, future, message)

    def _on_exit(self, pid: int, code: int) -> None:
        with self._lock:
            child = self._children.pop(pid, None)
            if child is None:
                self._exits[pid] = code
        if child is not None:
            child._exit(code)

    def _launcher_gone(self) -> None:
        """No more exit reports will come: children are waited for by other means from now on."""
        with self._lock:
            replies, self._replies = self._replies, {}
            children, self._children = self._children, {}
        for loop, future in replies.values():
            loop.call_soon_threadsafe(_resolve, future, {"error": "the run launcher exited"})
        for child in children.values():
            threading.Thread(target=_wait_unparented, args=(child,), daemon=True).start()


def _resolve(future: asyncio.Future[dict[str, Any]], message: dict[str, Any]) -> None:
    if not future.done():
        future.set_result(message)


def _wait_unparented(child: LaunchedProcess) -> None:
    """Wait for a process that is not our child (its launcher died): poll /proc until it is gone."""
    import time

    while Path(f"/proc/{child.pid}").exists() and not _is_zombie(child.pid):
        time.sleep(0.2)
    child._exit(-9)  # its real exit code went to the launcher; say it did not end normally


def _is_zombie(pid: int) -> bool:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return raw[raw.rfind(")") + 2:].startswith("Z")


# --- the launcher process ---------------------------------------------------------------------------


def preload() -> None:
    """Everything a run imports, imported once: torch, the probe, the scenarios, the simulator."""
    import torch  # noqa: F401
    import websockets.sync.client  # noqa: F401

    import loaderscope.probe.loader
    import loaderscope.runner
    import loaderscope.scenarios.builders
    import loaderscope.server.processes.runproc
    import loaderscope.sim  # noqa: F401


def serve_requests() -> None:
    """Fork on request until stdin closes; report children's exits as they happen."""
    replies = os.dup(1)
    os.dup2(2, 1)  # a stray print must not corrupt the protocol
    pending = b""
    while True:
        ready, _, _ = select.select([0], [], [], REAP_EVERY)
        _reap(replies)
        if not ready:
            continue
        chunk = os.read(0, 65536)
        if not chunk:
            return
        pending += chunk
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            _answer(orjson.loads(line), replies)


def _answer(request: dict[str, Any], replies: int) -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        pid = os.fork()
    except OSError as exc:
        _write(replies, {"id": request["id"], "error": f"fork failed: {exc}"})
        return
    if pid == 0:
        os.close(replies)
        _run_child(request["argv"], request.get("log"), request.get("secret"))
    _write(replies, {"id": request["id"], "pid": pid})


def _run_child(argv: list[str], log: str | None, secret: str | None) -> None:
    """In the forked child: become a session leader with the run's log as stdout, run, exit."""
    code = 1
    try:
        os.setsid()
        if secret is not None:  # the environment, like the token: never argv, which others read in /proc
            os.environ[SECRET_ENV] = secret
        out = os.open(log or os.devnull, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        os.dup2(out, 1)
        os.dup2(out, 2)
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
        from loaderscope.server.processes import runproc

        code = runproc.main(argv)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:  # a child must never return into the launcher's loop
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _reap(replies: int) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        _write(replies, {"exit": pid, "code": os.waitstatus_to_exitcode(status)})


def _write(fd: int, message: dict[str, Any]) -> None:
    os.write(fd, orjson.dumps(message) + b"\n")


def main() -> None:
    preload()
    serve_requests()


if __name__ == "__main__":
    main()
