"""What a statement of the user's code does with the value of one of its calls, read from its syntax tree.

``probe/names.py`` asks it of each frame of the user's code between a DataLoader being built and the
code that keeps it. The call a frame is making is found by its exact place in the source
(``co_positions``: line and column span of the instruction, Python 3.11+); the tree above it says
whether the statement names the value, returns it, or neither:

- stores it: ``train = ...``, ``self.train = ...``, ``loaders["train"] = ...``, ``(train := ...)``,
  ``with ... as train``, ``train, val = ..., ...``;
- keys it: ``{"train": ..., "val": ...}``, ``{split: ... for split in splits}``, or passes it by
  keyword: ``fit(train_dataloaders=...)``;
- returns it: ``return ...``, a lambda's body.

On the way up, a conditional expression (``make(ds) if ds else None``), ``and``/``or`` and ``await``
pass the value as it is; a tuple or list literal puts it at an index; the only positional argument of
a call (``accelerator.prepare(DataLoader(...))``, ``tqdm(...)``) stands for the call's result, and so
does argument ``i`` of ``n`` when the result is unpacked into ``n`` targets (accelerate's
``model, opt, loader = accelerator.prepare(model, opt, loader)``).
"""

from __future__ import annotations

import ast
import linecache
from collections.abc import Iterator, Mapping
from types import CodeType
from typing import Any, NamedTuple

Span = tuple[int, int, int, int]  # line, column, end line, end column: as co_positions and ast say


class Step(NamedTuple):
    """Where the loader sits in a value: element ``at`` of a tuple or list literal (``of`` None), or
    positional argument ``at`` of a call of ``of`` of them, whose result stands for the loader."""

    at: int
    of: int | None


class Use(NamedTuple):
    """What a statement does with a value: ``how`` is "store" (``node`` the target), "key" (``node`` the
    key), "return", or "" (none of these); ``steps``, innermost first, say where the loader sits in it."""

    how: str
    node: ast.expr | None
    steps: tuple[Step, ...]


class Found(NamedTuple):
    """A name the code gives the loader (None: none), and where the loader sits in what the frame
    returns (None: the frame keeps it, and ``text`` is its name)."""

    text: str | None
    returned: tuple[Step, ...] | None


class Site(NamedTuple):
    """A call being made: what its statement does with the value, and the function around it."""

    use: Use
    function: ast.AST | None
    parents: Mapping[ast.AST, ast.AST]


NOTHING = Use("", None, ())
PASSING = (ast.IfExp, ast.BoolOp, ast.Await)  # their value may be the loader itself
SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)


class Tree(NamedTuple):
    calls: dict[Span, ast.Call]
    parents: dict[ast.AST, ast.AST]


_trees: dict[str, tuple[list[str], Tree | None]] = {}
_returns: dict[tuple[ast.AST, str], Use | None] = {}


def site(code: CodeType, offset: int, module_globals: dict[str, Any]) -> Site | None:
    """The call at ``offset`` (``f_lasti``) of ``code``; None when it cannot be found in the source
    (none, or changed since it was compiled)."""
    tree = _tree(code.co_filename, module_globals)
    span = call_span(code, offset)
    call = tree.calls.get(span) if tree is not None and span is not None else None
    if tree is None or call is None:
        return None
    return Site(_use(call, tree.parents), _function(call, tree.parents), tree.parents)


def found(at: Site, steps: tuple[Step, ...], local_values: Mapping[str, Any]) -> Found | None:
    """The name the statement gives a loader that sits at ``steps`` in the call's value; None: it
    neither names nor returns it. A local the function returns (``loader = DataLoader(...)`` …
    ``return loader``) is returned on, its name kept for when nothing further out names the loader."""
    use, steps = at.use, steps + at.use.steps
    if use.how == "return":
        return Found(None, steps)
    if use.node is None:
        return None
    if use.how == "key":
        key, rest = _key(use.node, local_values), _inside(steps)
        return Found(key + _index(rest), None) if isinstance(key, str) and rest is not None else None
    target, rest = _unpack(use.node, steps)
    if target is None or rest is None:
        return None
    text = _target_text(target, local_values, rest)
    if isinstance(target, ast.Name) and at.function is not None:
        returned = _returned(at.function, target.id, at.parents)
        onward = found(Site(returned, None, at.parents), tuple(rest), local_values) if returned else None
        if onward is not None:
            return Found(onward.text or text, onward.returned)
    return Found(text, None) if text is not None else None


def _use(node: ast.AST, parents: Mapping[ast.AST, ast.AST]) -> Use:
    """Walk up from ``node`` to the statement: what it does with ``node``'s value."""
    steps: list[Step] = []
    while True:
        parent = parents.get(node)
        if isinstance(parent, PASSING) and not (isinstance(parent, ast.IfExp) and node is parent.test):
            node = parent
        elif isinstance(parent, (ast.Tuple, ast.List)) and isinstance(parent.ctx, ast.Load):
            steps.append(Step(_index_of(parent.elts, node), None))
            node = parent
        elif isinstance(parent, ast.Call) and node in parent.args and not any(s.of is None for s in steps):
            if any(isinstance(arg, ast.Starred) for arg in parent.args):
                return NOTHING
            steps.append(Step(_index_of(parent.args, node), len(parent.args)))
            node = parent
        else:
            return _end(node, parent, tuple(steps))


def _end(node: ast.AST, parent: ast.AST | None, steps: tuple[Step, ...]) -> Use:
    if isinstance(parent, (ast.Assign, ast.AnnAssign, ast.NamedExpr)) and node is parent.value:
        target = parent.targets[0] if isinstance(parent, ast.Assign) else parent.target
        return Use("store", target, steps)
    if isinstance(parent, ast.withitem) and node is parent.context_expr and parent.optional_vars is not None:
        return Use("store", parent.optional_vars, steps)
    if isinstance(parent, ast.Dict) and node in parent.values:
        key = parent.keys[_index_of(parent.values, node)]
        return Use("key", key, steps) if key is not None else NOTHING
    if isinstance(parent, ast.DictComp) and node is parent.value:
        return Use("key", parent.key, steps)
    if isinstance(parent, ast.keyword) and parent.arg is not None:
        return Use("key", ast.Constant(parent.arg), steps)  # the keyword's name, as a literal key
    if isinstance(parent, ast.Return) or (isinstance(parent, ast.Lambda) and node is parent.body):
        return Use("return", None, steps)
    return NOTHING


def _index_of(items: list[ast.expr], node: ast.AST) -> int:
    return next(index for index, item in enumerate(items) if item is node)


def _unpack(target: ast.expr, steps: tuple[Step, ...]) -> tuple[ast.expr | None, list[Step] | None]:
    """The target the loader lands in, and the steps left inside it (outermost steps are unpacked first)."""
    rest = list(steps)
    while isinstance(target, (ast.Tuple, ast.List)):
        if not rest or any(isinstance(element, ast.Starred) for element in target.elts):
            return None, None
        step = rest.pop()
        if step.at >= len(target.elts) or step.of not in (None, len(target.elts)):
            return None, None
        target = target.elts[step.at]
    return target, _inside(tuple(rest))


def _inside(steps: tuple[Step, ...] | list[Step]) -> list[Step] | None:
    """The literal steps into a value that holds the loader; None if it is one of several arguments of a
    call (which of them would its result be?)."""
    if any(step.of not in (None, 1) for step in steps):
        return None
    return [step for step in steps if step.of is None]


def _index(steps: list[Step]) -> str:
    return "".join(f"[{step.at}]" for step in reversed(steps))


def _target_text(target: ast.expr, local_values: Mapping[str, Any], rest: list[Step]) -> str | None:
    if isinstance(target, ast.Name):
        return target.id + _index(rest)
    if isinstance(target, ast.Attribute):
        return target.attr + _index(rest)
    if isinstance(target, ast.Subscript):
        key = _key(target.slice, local_values)
        if isinstance(key, str):
            return key + _index(rest)
        base = _target_text(target.value, local_values, [])
        return f"{base}[{key}]{_index(rest)}" if base is not None and key is not None else None
    return None


def _key(node: ast.expr, local_values: Mapping[str, Any]) -> str | int | None:
    """A literal key, or the value of the local a key is read from (``loaders[split] = ...``)."""
    value = node.value if isinstance(node, ast.Constant) else \
        local_values.get(node.id) if isinstance(node, ast.Name) else None
    return value if isinstance(value, (str, int)) and not isinstance(value, bool) else None


def _returned(function: ast.AST, local: str, parents: Mapping[ast.AST, ast.AST]) -> Use | None:
    """How the first ``return`` of ``function`` that reads ``local`` returns it, if one does."""
    key = (function, local)
    if key not in _returns:
        uses = (_use(node, parents) for node in _own_nodes(function)
                if isinstance(node, ast.Name) and node.id == local and isinstance(node.ctx, ast.Load))
        _returns[key] = next((use for use in uses if use.how in ("return", "key")), None)
    return _returns[key]


def _own_nodes(function: ast.AST) -> Iterator[ast.AST]:
    """The nodes of ``function``'s own body in source order, not those of functions or classes inside it."""
    body = function.body if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)) else []
    stack: list[ast.AST] = list(reversed(body))
    while stack:
        node = stack.pop()
        yield node
        if not isinstance(node, SCOPES):
            stack.extend(reversed(list(ast.iter_child_nodes(node))))


def _function(node: ast.AST, parents: Mapping[ast.AST, ast.AST]) -> ast.AST | None:
    parent = parents.get(node)
    while parent is not None and not isinstance(parent, SCOPES):
        parent = parents.get(parent)
    return parent if isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef)) else None


def call_span(code: CodeType, offset: int) -> Span | None:
    """Where in the source the instruction at ``offset`` (``f_lasti``) of ``code`` is."""
    for index, position in enumerate(code.co_positions()):
        if index == offset // 2:
            line, end_line, column, end_column = position
            if line is None or end_line is None or column is None or end_column is None:
                return None
            return line, column, end_line, end_column
    return None


def _tree(filename: str, module_globals: dict[str, Any]) -> Tree | None:
    """The calls of a source file by their span, and every node's parent; read once while linecache
    holds the same lines (a notebook's cells are there too, by their own names)."""
    lines = linecache.getlines(filename, module_globals)
    cached = _trees.get(filename)
    if cached is not None and cached[0] is lines:
        return cached[1]
    tree: Tree | None
    try:
        module = ast.parse("".join(lines), filename)
    except (SyntaxError, ValueError):  # not this file's source (gone, or changed since): no names from it
        tree = None
    else:
        parents = {child: node for node in ast.walk(module) for child in ast.iter_child_nodes(node)}
        calls = {(n.lineno, n.col_offset, n.end_lineno or n.lineno, n.end_col_offset or 0): n
                 for n in ast.walk(module) if isinstance(n, ast.Call)}
        tree = Tree(calls, parents)
    _trees[filename] = (lines, tree)
    return tree
