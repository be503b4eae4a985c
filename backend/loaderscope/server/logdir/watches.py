"""The inotify watches of a local logdir: a watch per directory that holds a trace (and each one above
it), at most ``limit`` of them; what has none is seen by polling and scanning (``follow.py``).

inotify watches are the user's, not the process's: every program the user runs shares
``fs.inotify.max_user_watches``. A recursive watch (what ``watchfiles`` takes) let another user who
can write the logdir spend them all with empty directories (200,000 ``mkdir``s: the user's editor and
build tools got ENOSPC). So a directory takes a watch only for a trace in it or below it, and never
more than ``limit`` are taken (``ServerConfig.logdir_watches``, and at most a quarter of the user's
allowance). The kernel's interface is used directly (``inotify_init1``, ``inotify_add_watch``,
``inotify_rm_watch``, through ctypes) because a recursive watcher cannot be told which directories
to skip.
"""

from __future__ import annotations

import ctypes
import errno
import os
import struct
from dataclasses import dataclass

# <sys/inotify.h>
IN_MODIFY, IN_ATTRIB, IN_CLOSE_WRITE = 0x2, 0x4, 0x8
IN_MOVED_FROM, IN_MOVED_TO, IN_CREATE, IN_DELETE = 0x40, 0x80, 0x100, 0x200
IN_DELETE_SELF, IN_MOVE_SELF, IN_IGNORED = 0x400, 0x800, 0x8000
IN_ONLYDIR, IN_DONT_FOLLOW, IN_ISDIR = 0x01000000, 0x02000000, 0x40000000
# a trace written, its heartbeat (utime: IN_ATTRIB), a file or directory come or gone; a watched directory
# itself is never followed through a link (IN_DONT_FOLLOW) and must be one (IN_ONLYDIR)
MASK = (IN_MODIFY | IN_ATTRIB | IN_CLOSE_WRITE | IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE | IN_DELETE
        | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR | IN_DONT_FOLLOW)
HEADER = struct.Struct("iIII")  # struct inotify_event: wd, mask, cookie, len; then len bytes of name
READ_BYTES = 64 << 10  # events read at once (the kernel queues 16,384 before IN_Q_OVERFLOW)
USER_SHARE = 4  # at most this fraction (1/4) of the user's inotify watches for one logdir


@dataclass(frozen=True)
class Change:
    """Something happened to ``path`` (a name in a watched directory)."""

    path: str
    directory: bool  # the name is a directory (IN_ISDIR)


class Watches:
    """One inotify instance and the directories it watches (event loop thread only).

    Raises:
        OSError: no inotify instance can be made (``fs.inotify.max_user_instances``), or no libc.
    """

    def __init__(self, limit: int) -> None:
        self.limit = max(0, min(limit, user_allowance() // USER_SHARE))
        self.fd = _libc().inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if self.fd < 0:
            number = ctypes.get_errno()
            raise OSError(number, f"inotify_init1: {os.strerror(number)}")
        self.paths: dict[int, str] = {}  # watch descriptor -> directory
        self.watched: dict[str, int] = {}  # directory -> watch descriptor
        self.unwatched: list[str] = []  # directories wanted beyond the limit (or refused by the kernel)
        self.exhausted = False  # the kernel said ENOSPC: the user's watches are all taken (by anything)
        self.forgot = False  # a watched directory went away or moved since the last ``want``

    def want(self, directories: list[str]) -> None:
        """Watch these directories (first ones first, up to the limit) and no others."""
        keep = set(directories)
        for path in [path for path in self.watched if path not in keep]:
            self._remove(path)
        self.unwatched = []
        for path in directories:
            if path in self.watched:
                continue
            if len(self.watched) >= self.limit or self.exhausted or not self._add(path):
                self.unwatched.append(path)

    def read(self) -> list[Change]:
        """The changes queued so far (those the kernel dropped past its queue, IN_Q_OVERFLOW, are left to
        the next full scan)."""
        changes: list[Change] = []
        while True:
            try:
                data = os.read(self.fd, READ_BYTES)
            except BlockingIOError:
                return changes
            offset = 0
            while offset + HEADER.size <= len(data):
                wd, mask, _, length = HEADER.unpack_from(data, offset)
                name = data[offset + HEADER.size:offset + HEADER.size + length].rstrip(b"\0")
                offset += HEADER.size + length
                directory = self.paths.get(wd)
                if directory is None:
                    continue
                if mask & (IN_IGNORED | IN_MOVE_SELF | IN_DELETE_SELF):
                    self._forget(wd, directory)  # gone or moved: its path no longer names what it watches
                elif name:
                    changes.append(Change(os.path.join(directory, os.fsdecode(name)), bool(mask & IN_ISDIR)))

    def close(self) -> None:
        os.close(self.fd)

    def _add(self, path: str) -> bool:
        wd = _libc().inotify_add_watch(self.fd, os.fsencode(path), MASK)
        if wd < 0:
            self.exhausted |= ctypes.get_errno() == errno.ENOSPC
            return False  # gone, not a directory, a link, unreadable, or no watch left: polled
        self.paths[wd], self.watched[path] = path, wd
        return True

    def _remove(self, path: str) -> None:
        wd = self.watched.pop(path)
        self.paths.pop(wd, None)
        _libc().inotify_rm_watch(self.fd, wd)

    def _forget(self, wd: int, path: str) -> None:
        self.forgot = True
        self.paths.pop(wd, None)
        if self.watched.get(path) == wd:
            del self.watched[path]
            _libc().inotify_rm_watch(self.fd, wd)  # EINVAL once the kernel dropped it itself: harmless


def user_allowance() -> int:
    """The user's inotify watches (``fs.inotify.max_user_watches``; the old default where unknown)."""
    try:
        with open("/proc/sys/fs/inotify/max_user_watches", encoding="ascii") as f:
            return int(f.read())
    except (OSError, ValueError):
        return 8192


_LIBC: ctypes.CDLL | None = None


def _libc() -> ctypes.CDLL:
    global _LIBC
    if _LIBC is None:
        _LIBC = ctypes.CDLL(None, use_errno=True)
        for name, arguments in (("inotify_init1", [ctypes.c_int]),
                                ("inotify_add_watch", [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]),
                                ("inotify_rm_watch", [ctypes.c_int, ctypes.c_int])):
            function = getattr(_LIBC, name)
            function.argtypes, function.restype = arguments, ctypes.c_int
    return _LIBC


def watched_directories(root: str, traces: list[str]) -> list[str]:
    """What to watch for ``traces`` (paths under ``root``, newest last): the root, then each directory
    that holds a trace and every directory between it and the root, the shallowest first, newer
    traces' before older ones' at the same depth. A directory with no trace in or below it has none."""
    found: dict[str, int] = {root: 0}
    for order, trace in enumerate(reversed(traces)):
        directory = os.path.dirname(trace)
        while directory.startswith(root + os.sep) and directory not in found:
            found[directory] = order
            directory = os.path.dirname(directory)
    return sorted(found, key=lambda path: (path.count(os.sep), found[path]))
