"""The import graph of backend/loaderscope has no cycle (docs/DESIGN.md §1, "Layers").

Every import counts, at module level, inside a function (a lazy import) or under ``TYPE_CHECKING``:
each is an arrow a reader follows. Upward arrows are `lint-imports`' job (.importlinter).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "backend" / "loaderscope"


def modules() -> dict[str, Path]:
    """Every module of the package by dotted name (a package by its own name, for its __init__)."""
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imported(name: str, path: Path, known: dict[str, Path]) -> Iterator[str]:
    """The package's modules that module ``name`` imports, wherever in the file the import is."""
    is_package = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from (_owner(alias.name, known) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = name if is_package else name.rpartition(".")[0]
                for _ in range(node.level - 1):
                    anchor = anchor.rpartition(".")[0]
                base = f"{anchor}.{base}" if base else anchor
            for alias in node.names:
                full = f"{base}.{alias.name}"
                yield _owner(full if full in known else base, known)


def _owner(name: str, known: dict[str, Path]) -> str:
    """The module that defines ``name`` (``a.b.C`` → ``a.b``); "" when it is not the package's."""
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name


def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: {m for m in imported(name, path, known) if m and m != name} for name, path in known.items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in sorted(edges.get(node, ())):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def test_the_package_has_no_import_cycle() -> None:
    edges = graph()
    assert len(edges) > 80 and "loaderscope.server.web.app" in edges  # the walk saw the whole package
    assert cycles(edges) == []


def test_no_module_of_the_package_imports_its_public_names() -> None:
    # loaderscope/__init__.py loads the probe on first use of watch/InstrumentedDataLoader: a module
    # that imported the package root would sit in a cycle with the probe
    importers = sorted(name for name, targets in graph().items() if "loaderscope" in targets)
    assert importers == []


@pytest.mark.parametrize(("edges", "expected"), [
    ({"a": {"b"}, "b": {"c"}, "c": set()}, []),
    ({"a": {"b"}, "b": {"a"}, "c": {"a"}}, [["a", "b"]]),
    ({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"d"}}, [["a", "b", "c"]]),
])
def test_cycles_are_found(edges: dict[str, set[str]], expected: list[list[str]]) -> None:
    assert cycles(edges) == expected


def test_lazy_and_type_checking_imports_are_arrows(tmp_path: Path) -> None:
    source = tmp_path / "m.py"
    source.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from loaderscope.model.state import X\n"
                      "def f():\n    from loaderscope import events\n    import loaderscope.traces.jsonl\n")
    known = modules()
    assert set(imported("loaderscope.m", source, known)) - {""} == {"loaderscope.model.state", "loaderscope.events",
                                                                  "loaderscope.traces.jsonl"}
