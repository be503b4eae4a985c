"""A process's memory and the host's, read from /proc and /sys: no torch, no code in the process read.

The probe samples its run's processes with these (probe/memory.py); ``loaderscope doctor`` reads a
hung process and its workers the same way (doctor/sample.py). smaps_rollup needs no ptrace: reading
it needs the rights /proc/PID/smaps does (the process's own user, or root).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

# A cgroup "limit" this large is none: v1 writes 2**63 rounded down to a page for "unlimited".
NO_LIMIT = 2**60

Figures = dict[str, int | None]


def _kb_fields(path: str, wanted: bytes = b"") -> dict[bytes, int] | None:
    """The ``Name:  N kB`` lines of a /proc file whose name starts with ``wanted``, in kB; None when the
    file cannot be read (the process is gone)."""
    try:
        with open(path, "rb") as f:
            text = f.read()
    except OSError:
        return None
    kb: dict[bytes, int] = {}
    for line in text.split(b"\n"):
        if line.startswith(wanted):
            name, _, rest = line.partition(b":")
            value = rest.split()
            if len(value) == 2:  # smaps_rollup's first line names the address range: no "N kB"
                kb[name] = int(value[0])
    return kb


def smaps_rollup(pid: int) -> Figures | None:
    """One process's memory from ``/proc/PID/smaps_rollup``, in bytes; None when it has none to read
    (gone, or a zombie: its memory is already freed)."""
    kb = _kb_fields(f"/proc/{pid}/smaps_rollup")
    if kb is None or b"Rss" not in kb:
        return None
    private = kb.get(b"Private_Clean", 0) + kb.get(b"Private_Dirty", 0) + kb.get(b"Private_Hugetlb", 0)
    rss = kb[b"Rss"]
    return {"uss": private * 1024, "pss": kb.get(b"Pss", 0) * 1024, "rss": rss * 1024,
            "shared": max(0, rss - private) * 1024, "swap": kb.get(b"Swap", 0) * 1024}


def status(pid: int) -> Figures | None:
    """One process's RSS and swap from ``/proc/PID/status`` (``VmRSS``, ``VmSwap``): the kernel's counters,
    read without walking anything (24 µs of CPU on this project's box, where smaps_rollup takes 8 ms for a
    process that imported torch; statm, 17 µs, has no swap). None when it has none to read (gone, or a
    zombie: its status has no ``VmRSS``)."""
    kb = _kb_fields(f"/proc/{pid}/status", b"Vm")
    if kb is None or b"VmRSS" not in kb:
        return None
    return {"rss": kb[b"VmRSS"] * 1024, "swap": kb.get(b"VmSwap", 0) * 1024}


def meminfo() -> tuple[int, int]:
    """The host's ``MemAvailable`` and ``MemTotal``, in bytes."""
    found: dict[bytes, int] = {}
    with open("/proc/meminfo", "rb") as f:
        for line in f:
            name, _, rest = line.partition(b":")
            if name in (b"MemAvailable", b"MemTotal"):
                found[name] = int(rest.split()[0]) * 1024
                if len(found) == 2:
                    break
    return found[b"MemAvailable"], found[b"MemTotal"]


@dataclass(frozen=True)
class Cgroup:
    """The files of the memory cgroup level whose limit binds this process (the smallest on its path)."""

    limit: Path  # v2 memory.max, v1 memory.limit_in_bytes
    usage: Path  # v2 memory.current, v1 memory.usage_in_bytes
    stat: Path  # memory.stat: the inactive file pages the kernel reclaims before it kills
    inactive: bytes  # v2 "inactive_file", v1 "total_inactive_file"

    def read(self) -> tuple[int, int] | None:
        """(limit, working set) now, or None when the limit was lifted."""
        limit = _limit(self.limit.read_text())
        if limit is None:
            return None
        usage = int(self.usage.read_text())
        for line in self.stat.read_bytes().split(b"\n"):
            name, _, value = line.partition(b" ")
            if name == self.inactive:
                usage -= int(value)
                break
        return limit, max(0, usage)


def _limit(text: str) -> int | None:
    text = text.strip()
    if text == "max":
        return None
    value = int(text)
    return value if value < NO_LIMIT else None


def find_cgroup(proc: str = "/proc/self") -> Cgroup | None:
    """The memory cgroup level with the smallest limit on this process's path, v2 or v1, else None.

    ``/proc/self/cgroup`` names the process's cgroup within each hierarchy, ``/proc/self/mountinfo``
    where each hierarchy is mounted and from which of its directories (a container sees its own
    cgroup as the mount's root). A limit may be set on any level above (a pod's, over its
    container's), so every level up to the mount is read, once, here."""
    try:
        lines = Path(f"{proc}/cgroup").read_text().splitlines()
        mounts = Path(f"{proc}/mountinfo").read_text().splitlines()
    except OSError:
        return None
    found: list[tuple[int, Cgroup]] = []
    for line in lines:
        _, controllers, path = line.split(":", 2)
        v2 = controllers == ""
        if not v2 and "memory" not in controllers.split(","):
            continue
        for mount_root, mount_point in _mounts(mounts, v2):
            if not (path + "/").startswith(mount_root.rstrip("/") + "/"):
                continue
            here = Path(mount_point + path[len(mount_root.rstrip("/")):])
            found += _levels(here, Path(mount_point), v2)
    return min(found, key=lambda pair: pair[0])[1] if found else None


def _mounts(mounts: list[str], v2: bool) -> list[tuple[str, str]]:
    """(root, mount point) of each cgroup2 mount, or of each v1 mount holding the memory controller."""
    out = []
    for line in mounts:
        fields, _, after = line.partition(" - ")
        parts, tail = fields.split(), after.split()
        if len(parts) < 5 or len(tail) < 3:
            continue
        if (v2 and tail[0] == "cgroup2") or (not v2 and tail[0] == "cgroup" and "memory" in tail[2].split(",")):
            out.append((parts[3], parts[4]))
    return out


def _levels(here: Path, top: Path, v2: bool) -> list[tuple[int, Cgroup]]:
    names = ("memory.max", "memory.current", "inactive_file") if v2 else \
        ("memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file")
    levels = []
    while True:
        group = Cgroup(here / names[0], here / names[1], here / "memory.stat", names[2].encode())
        try:
            limit = _limit(group.limit.read_text())
        except (OSError, ValueError):
            limit = None
        if limit is not None and group.usage.exists():
            levels.append((limit, group))
        if here == top or top not in here.parents:
            return levels
        here = here.parent


def shm(path: str = "/dev/shm") -> tuple[int, int] | None:
    """(used, total) bytes of the tmpfs where torch's workers put tensors (None where there is none)."""
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return (st.f_blocks - st.f_bfree) * st.f_frsize, st.f_blocks * st.f_frsize
