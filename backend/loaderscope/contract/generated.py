"""The ``--write | --check`` command of a generated file: written once for ``python -m
loaderscope.contract`` and ``python -m loaderscope.model.wording``. ``--check`` exits 1 naming each file that
differs from what its source renders (CI runs it), ``--write`` rewrites them.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def main(argv: list[str], outputs: Mapping[Path, Callable[[], str]], source: str, command: str,
         root: Path = ROOT) -> int:
    """Write or check ``outputs`` (each file's path and its renderer); ``source`` and ``command`` name
    where the tables live and how to regenerate, for the message (paths shown from ``root``)."""
    if argv == ["--write"]:
        for path, render in outputs.items():
            path.write_text(render(), encoding="utf-8")
        return 0
    if argv == ["--check"]:
        stale = [path for path, render in outputs.items()
                 if not path.exists() or path.read_text(encoding="utf-8") != render()]
        if stale:
            names = ", ".join(str(path.relative_to(root)) for path in stale)
            print(f"{names} out of date with {source}: run {command}", file=sys.stderr)
            return 1
        return 0
    print(f"usage: {command.removesuffix(' --write')} --write | --check", file=sys.stderr)
    return 2
