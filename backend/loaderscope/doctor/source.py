"""The text of the lines a target's frames stand on, read as the target's own user would read it.

A frame's file name comes from the target's memory: its user chose it (``compile(src, "/etc/shadow",
"exec")`` names any file). doctor often runs with sudo, so opening that name as doctor would quote
what only root may read, and a FIFO or ``/dev/zero`` named there would block it or fill its memory.
So the lines are read:

- by a child of doctor (``os.fork``, no exec: the target's user need not be able to run doctor's
  interpreter) that takes the target's uid, gid and groups (``/proc/PID/status``) before it opens
  anything. A doctor that is neither root nor the target's user quotes nothing;
- through ``/proc/PID/root`` (``/proc/PID/cwd`` for a relative name): the files as the target sees
  them, a container's included; the kernel checks each directory and the file against those ids;
- from a regular file only: opened ``O_PATH`` first (no device's or FIFO's open runs), checked with
  ``fstat``, then opened for reading through ``/proc/self/fd``; at most ``MAX_FILE_BYTES`` of it,
  each line cut at ``MAX_LINE_CHARS``;
- within ``DEADLINE`` seconds for all of them: the child is killed then, and what it has not sent
  by then is not quoted.

Only ever called while doctor runs no other thread (after sampling), so the fork copies no lock a
thread held.
"""

from __future__ import annotations

import os
import select
import signal
import stat
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import orjson

from loaderscope.doctor.model import Recording, held_withs, is_user

MAX_FILE_BYTES = 128 << 10  # torch's dataloader.py (81 KB) whole: its lines tell where the training thread is
MAX_LINE_CHARS = 300
MAX_REPLY_BYTES = 4 << 20
DEADLINE = 5.0  # seconds for every file of one target

# children of doctor that Ctrl-C must end (this module's readers; sample.py adds py-spy's)
live: set[int] = set()


@dataclass(frozen=True)
class Ids:
    """The ids a process opens files with (the fs ids of /proc/PID/status) and its groups."""

    uid: int
    gid: int
    groups: tuple[int, ...]


def ids_of(pid: int) -> Ids | None:
    """The ids ``pid`` opens files with; None once it is gone, or when it runs set-id (its ids differ)."""
    try:
        with open(f"/proc/{pid}/status", encoding="utf-8", errors="replace") as f:
            fields = dict(line.split(":", 1) for line in f if ":" in line)
        uids = [int(v) for v in fields["Uid"].split()]
        gids = [int(v) for v in fields["Gid"].split()]
        groups = tuple(int(v) for v in fields.get("Groups", "").split())
    except (OSError, KeyError, ValueError):
        return None
    if len(set(uids)) != 1 or len(set(gids)) != 1:
        return None  # a set-id process: which of its ids would open a file is not one answer
    return Ids(uids[0], gids[0], groups)


def quote(pid: int, rec: Recording) -> Recording:
    """``rec`` with each frame's ``code`` (its line's text, "" when not read) and ``holding`` (the
    ``with`` blocks around that line in its function, for a user's file) filled in."""
    frames = [f for s in rec["samples"] for proc in s["procs"].values()
              for t in proc.get("threads") or [] for f in t.get("frames") or []]
    wanted: dict[str, set[int]] = {}
    for f in frames:
        name, line = f.get("filename") or "", f.get("line") or 0
        if name and not name.startswith("<") and isinstance(line, int) and line > 0:
            wanted.setdefault(name, set()).add(line)
    got = read_lines(pid, wanted)
    for f in frames:
        found = got.get(f.get("filename") or "", {}).get(f.get("line") or 0)
        f["code"], f["holding"] = (found[0], found[1]) if found else ("", [])
    return rec


Lines = dict[str, dict[int, tuple[str, list[dict[str, Any]]]]]


def read_lines(pid: int, wanted: dict[str, set[int]]) -> Lines:
    """For each file name (as the target named it) the text of the wanted lines, read as ``pid``'s user."""
    ids = ids_of(pid)
    if not wanted or ids is None:
        return {}
    if os.geteuid() == ids.uid:
        become = None  # already that user
    elif os.geteuid() == 0:
        become = ids
    else:
        return {}  # another user, and not allowed to become them: quote nothing
    return _in_child(pid, wanted, become)


def _in_child(pid: int, wanted: dict[str, set[int]], become: Ids | None) -> Lines:
    """Reads in a forked child and gathers the lines it writes until it ends or ``DEADLINE`` passes."""
    r, w = os.pipe()
    child = os.fork()
    if child == 0:  # the reader: it writes one JSON line per file, and never returns
        code = 1
        try:
            signal.signal(signal.SIGINT, signal.SIG_DFL)  # not doctor's Ctrl-C handler: just end
            os.close(r)
            if become is not None:
                os.setgroups(list(become.groups))
                os.setresgid(become.gid, become.gid, become.gid)
                os.setresuid(become.uid, become.uid, become.uid)
            for chunk in _read_all(pid, wanted):
                os.write(w, chunk)
            code = 0
        finally:
            os._exit(code)
    live.add(child)
    os.close(w)
    try:
        reply = _gather(r)
    finally:
        os.close(r)
        _end(child)
    out: Lines = {}
    for raw in reply.split(b"\n")[:-1]:  # the last piece is cut off (or empty)
        name, lines = orjson.loads(raw)
        out[name] = {int(n): (text, holding) for n, (text, holding) in lines.items()}
    return out


def _gather(fd: int) -> bytes:
    until = time.monotonic() + DEADLINE
    reply = bytearray()
    while len(reply) < MAX_REPLY_BYTES and (left := until - time.monotonic()) > 0:
        ready, _, _ = select.select([fd], [], [], left)
        if not ready:
            break
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            break
        reply += chunk
    return bytes(reply)


def _end(child: int) -> None:
    """Kill the reader (a no-op once it has exited: it is not reaped yet, so the PID is still it) and
    reap it if it is gone; one stuck in the kernel (a hung network file system) is left to init."""
    try:
        os.kill(child, signal.SIGKILL)
        os.waitpid(child, os.WNOHANG)
    except (ProcessLookupError, ChildProcessError):
        pass
    live.discard(child)


def _read_all(pid: int, wanted: dict[str, set[int]]) -> Iterable[bytes]:
    """One JSON line per file that could be read: ``[name, {line: [text, holding]}]``; the user's files first."""
    for name, lines in sorted(wanted.items(), key=lambda item: not is_user(item[0])):
        text = _read_regular(f"/proc/{pid}/root{name}" if name.startswith("/") else f"/proc/{pid}/cwd/{name}")
        if text is None:
            continue
        all_lines = text.splitlines()
        present = [n for n in sorted(lines) if n <= len(all_lines)]
        holding = held_withs(text, present) if is_user(name) else {}
        found = {n: (all_lines[n - 1].strip()[:MAX_LINE_CHARS], holding.get(n, [])) for n in present}
        yield orjson.dumps([name, found], option=orjson.OPT_NON_STR_KEYS) + b"\n"


def _read_regular(path: str) -> str | None:
    """The first ``MAX_FILE_BYTES`` of ``path`` if it is a regular file that these ids may read."""
    try:
        handle = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(handle).st_mode):
            return None  # a FIFO, a device, a socket, a directory: never opened for reading
        fd = os.open(f"/proc/self/fd/{handle}", os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError:
        return None
    finally:
        os.close(handle)
    try:
        data = bytearray()
        while len(data) < MAX_FILE_BYTES and (chunk := os.read(fd, MAX_FILE_BYTES - len(data))):
            data += chunk
    except OSError:
        return None
    finally:
        os.close(fd)
    if len(data) >= MAX_FILE_BYTES:
        data = data[:data.rfind(b"\n") + 1]  # only whole lines: a cut one is not the line
    return data.decode("utf-8", errors="replace")
