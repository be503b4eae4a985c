"""The files a job table reads: a job's traces listed under its directory, each opened and checked on its
descriptor (a regular file, or a Parquet trace's directory of regular parts, under the directory it was
listed in) within the budget, before DuckDB reads that descriptor (``jobquery.py`` says why).
"""

from __future__ import annotations

import errno
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from loaderscope.traces.jobbudget import JobBudget, JobQueryError, size_text

TRACE_SUFFIXES = (".trace.jsonl", ".parquet")  # a Parquet file of another writer, or a part of ours
PARQUET_TRACE = ".trace.parquet"  # traces/parquet.py: a loaderscope Parquet trace, a directory of parts
PART_NAME = re.compile(r"part-[0-9]+\.parquet")  # parquet.PART_GLOB: the parts of a ``NAME.trace.parquet/`` directory
GLOB_CHARACTERS = re.compile(r"[*?\[\]{}]")  # what DuckDB's and fsspec's globs expand


class Unreadable(JobQueryError):
    """One trace cannot be read (its permissions, a file gone since it was listed, a Parquet trace without
    parts): the table goes on without it and names it. What could make the table read another file
    than the one listed (a link, a FIFO, a path outside the directory) is a JobQueryError: refused."""

    def __init__(self, message: str, problem: str = "unreadable") -> None:
        super().__init__(message)
        self.problem = problem  # as jobtable.damage names it: ``unreadable``, or ``empty``


def trace_files(root: str, fs: Any = None) -> list[str]:
    """Every trace under ``root`` (recursively), sorted; ``fs``: an fsspec filesystem for a URL."""
    if fs is None:
        base = Path(root)
        if not base.is_dir():
            raise JobQueryError(f"{root}: not a directory; give the job's directory of traces "
                                "(e.g. LOGDIR/<job>, or the --logdir of `loaderscope run --ranks`)")
        found = [str(p) for p in base.rglob("*") if _a_trace(p.name, p.parent.name, p.is_dir())]
    else:
        found = [_with_protocol(fs, path) for path, info in fs.find(root, withdirs=True, detail=True).items()
                 if _a_trace(PurePosixPath(path).name, PurePosixPath(path).parent.name,
                             info.get("type") == "directory")]
    if not found:
        raise JobQueryError(f"{root}: no traces (*.trace.jsonl or *.parquet) under it; record a job into it with "
                            "`loaderscope record --logdir DIR -- torchrun ...` or `loaderscope run SCENARIO "
                            "--mode sim --ranks N --logdir DIR`")
    return sorted(found)


@dataclass(frozen=True)
class Read:
    """One file DuckDB reads: where it reads it (``/proc/self/fd/N``, or an fsspec path), which run it is,
    and its name (the trace, or a Parquet trace's part) for what is said of it."""

    at: str
    run: int
    parquet: bool
    name: str


class Opener:
    """Opens a job's traces and checks each on its descriptor, within the budget: the descriptors stay
    open (DuckDB reads them) until ``close``."""

    def __init__(self, fs: Any, within: str | None, budget: JobBudget) -> None:
        self.fs = fs
        self.within = None if within is None or fs is not None else os.path.realpath(within)
        self.budget = budget
        self.total = 0
        self.descriptors: list[int] = []

    def open(self, path: str, run: int) -> list[Read]:
        """What DuckDB reads of the trace ``path``: the file, or a Parquet trace's parts in order.

        Raises:
            JobQueryError: the trace cannot be read, is not a regular file (or a directory of them),
                lies outside the directory, or is over a budget; the message names it and the fix.
        """
        return self._local(path, run) if self.fs is None else self._remote(path, run)

    def close(self) -> None:
        for fd in self.descriptors:
            os.close(fd)
        self.descriptors = []

    def _local(self, path: str, run: int) -> list[Read]:
        # O_NONBLOCK: opening a FIFO would wait for a writer; links are followed, and where the
        # descriptor landed is checked after (the kernel's own path of it, which no swap changes)
        fd = self._descriptor(path, lambda: os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC))
        info = os.fstat(fd)
        real = _opened_path(fd)
        if self.within is not None and not _within(real, self.within):
            raise JobQueryError(f"{path}: it resolves to {real}, outside {self.within}: refused, never read; "
                                "remove the link, or copy the trace into the job's directory")
        if stat.S_ISDIR(info.st_mode) and path.endswith(".parquet"):
            return self._parts(path, fd, run)
        _regular(info.st_mode, path)
        self._count(path, info.st_size)
        return [Read(f"/proc/self/fd/{fd}", run, path.endswith(".parquet"), path)]

    def _parts(self, path: str, directory: int, run: int) -> list[Read]:
        """A loaderscope Parquet trace's parts, each opened by its name in the directory's descriptor and
        never through a link (a part is a file its writer renamed into place, traces/parquet.py)."""
        names = sorted(name for name in os.listdir(directory) if PART_NAME.fullmatch(name))
        if not names:
            raise Unreadable(f"{path}: a directory without trace parts (part-N.parquet); a Parquet trace whose "
                             "writer was killed before its first part has no events yet", "empty")
        reads, size = [], 0
        for name in names:
            part = f"{path}/{name}"
            flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC
            # _descriptor calls the opener at once, within this iteration
            fd = self._descriptor(part, lambda: os.open(name, flags, dir_fd=directory))  # noqa: B023
            info = os.fstat(fd)
            _regular(info.st_mode, part)
            size += info.st_size
            reads.append(Read(f"/proc/self/fd/{fd}", run, True, part))
        self._count(path, size)
        return reads

    def _descriptor(self, path: str, opening: Any) -> int:
        try:
            fd: int = opening()
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise JobQueryError(f"{path}: cannot be read (a symbolic link, where only a regular file is read); "
                                    "move it out of the job's directory") from None
            raise Unreadable(f"{path}: cannot be read ({exc.strerror or exc}); fix its permissions or move it out "
                             "of the job's directory") from None
        self.descriptors.append(fd)
        return fd

    def _remote(self, path: str, run: int) -> list[Read]:
        if GLOB_CHARACTERS.search(path.split("://", 1)[-1]):
            raise JobQueryError(f"{path}: a name with a glob character (* ? [ ] {{ }}), which DuckDB's readers "
                                "would expand to other files: refused, never read; rename it")
        try:
            info = self.fs.info(path)
            if info.get("type") == "directory" and path.endswith(".parquet"):
                parts = sorted((i for i in self.fs.ls(path, detail=True)
                                if PART_NAME.fullmatch(PurePosixPath(i["name"]).name)), key=lambda i: i["name"])
                if not parts:
                    raise Unreadable(f"{path}: a directory without trace parts (part-N.parquet)", "empty")
                self._count(path, sum(int(i.get("size") or 0) for i in parts))
                return [Read(_with_protocol(self.fs, i["name"]), run, True, i["name"]) for i in parts]
            with self.fs.open(path, "rb") as f:
                f.read(1)
        except JobQueryError:
            raise
        except Exception as exc:  # each fsspec backend raises its own errors: one message
            raise Unreadable(f"{path}: cannot be read ({exc}); fix its permissions or move it out of the "
                             "job's directory") from None
        self._count(path, int(info.get("size") or 0))
        return [Read(path, run, path.endswith(".parquet"), path)]

    def _count(self, path: str, size: int) -> None:
        if size > self.budget.trace_bytes:
            raise JobQueryError(f"{path}: " + self.budget.refusal("trace_bytes", f"{size_text(size)} of trace", size))
        self.total += size
        if self.total > self.budget.job_bytes:
            raise JobQueryError(f"{path}: " + self.budget.refusal(
                "job_bytes", f"with it the job's traces hold {size_text(self.total)} or more", self.total))


def _regular(mode: int, path: str) -> None:
    if not stat.S_ISREG(mode):
        kind = ("a FIFO" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode)
                else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "a directory"
                if stat.S_ISDIR(mode) else "not a file")
        raise JobQueryError(f"{path}: {kind}, not a regular file: refused, never read; remove it from the job's "
                            "directory")


def _opened_path(fd: int) -> str:
    """Where an open descriptor's file is, as the kernel keeps it (nothing renamed or linked since changes it)."""
    return os.readlink(f"/proc/self/fd/{fd}").removesuffix(" (deleted)")


def _within(path: str, directory: str) -> bool:
    return path == directory or path.startswith(directory.rstrip(os.sep) + os.sep)


def _a_trace(name: str, parent: str, directory: bool) -> bool:
    """Whether a listing's entry is a run's trace: a JSON lines or Parquet file, or a loaderscope Parquet
    trace's directory ``NAME.trace.parquet/`` (its parts are read with it, not as runs of their own; the
    files of another writer's ``x.parquet/`` directory are runs each, as they were). Anything else of
    such a name (a dangling link, a FIFO) is listed too: it is said by name when it is opened."""
    if name.startswith(".") or not name.endswith(TRACE_SUFFIXES):
        return False
    if directory:
        return name.endswith(PARQUET_TRACE)
    return not (PART_NAME.fullmatch(name) and parent.endswith(PARQUET_TRACE))


def _with_protocol(fs: Any, path: str) -> str:
    protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
    return path if "://" in path else f"{protocol}://{path}"
