"""Whether a process is still alive, for the tests that check nothing is left running (a zombie is not)."""

from __future__ import annotations


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
