"""``python -m loaderscope.contract --write | --check``: write the generated files, or fail when one
differs from what the contract generates."""

from __future__ import annotations

import sys

from loaderscope.contract.generate import COMMAND, OUTPUTS, ROOT


def main(argv: list[str]) -> int:
    if argv == ["--write"]:
        for path, render in OUTPUTS.items():
            path.write_text(render(), encoding="utf-8")
        return 0
    if argv == ["--check"]:
        stale = [path for path, render in OUTPUTS.items()
                 if not path.exists() or path.read_text(encoding="utf-8") != render()]
        if stale:
            names = ", ".join(str(path.relative_to(ROOT)) for path in stale)
            print(f"{names} out of date with backend/loaderscope/contract/: run {COMMAND}", file=sys.stderr)
            return 1
        return 0
    print("usage: python -m loaderscope.contract --write | --check", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
