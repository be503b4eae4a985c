"""A loader's name, read from the code that made it: what a user recognises in the run picker.

Read once per loader, when it is built (``record``) or watched (``watch()``), from the call stack, by
following the loader outwards from the call that built it (or called ``watch()``) while each frame
returns it (``return DataLoader(...)``; ``loader = DataLoader(...)`` … ``return loader``). The first
of these names it:

1. the name the user's code gives it where it keeps it, read from that statement's syntax tree
   (``probe/statements.py``): ``train_dl = build_loader(...)``, ``self.test_loader = make(ds) if ds
   else None``, ``{"train": ..., "val": ...}`` (the key), ``pair = [..., ...]`` (``pair[0]``),
   ``train, val = ...``, ``loaders[split] = ...``, ``fit(train_dataloaders=...)``;
2. a function of the user's code whose name mentions a loader and that returns the loader itself
   (a ``Trainer`` subclass's ``get_train_dataloader``, Lightning's ``train_dataloader``): the outermost;
3. a local variable of the user's code that held it (a factory's ``loader``, returned to code that
   keeps it unnamed; for ``watch()``, a local of the calling frame that holds the object);
4. the function of a library that built it for the user (the Hugging Face ``Trainer``'s
   ``get_train_dataloader``): the outermost library frame, below the user's code, whose function's
   name mentions a loader;
5. ``file:line`` of the innermost frame of the user's code: where it was built.

Frames of torch and of loaderscope are never a name; the standard library and site-packages are
libraries; every other file is the user's code. Variables inside libraries (``dataloader``,
``base_dataloader``) say nothing a user would recognise: a library frame only passes the loader on,
read from its bytecode (``return f(...)``, or ``dataloader = f(...)`` … ``return dataloader``), and
once a library keeps it, what the user's code stores further out (``result = trainer.train()``) is not
the loader. Code whose source cannot be read (``python -c``) is read from its bytecode the same way,
its stores naming the loader.

``claim`` keeps names apart in a process. A name belongs to the place in the code that gave it first
(the call being made where the name was found; for names 2 to 4, where the loader is kept); another
place that gives the same name gets ``name@file.py:line``. The same place building again (each epoch,
each evaluation, a loop) keeps its name: those runs follow one another.
"""

from __future__ import annotations

import dis
import os
import sys
import sysconfig
import threading
from collections.abc import Iterator, Sequence
from types import CodeType, FrameType
from typing import Any, NamedTuple

import torch

from loaderscope.probe import statements
from loaderscope.probe.statements import Step

STORES = frozenset({"STORE_NAME", "STORE_FAST", "STORE_GLOBAL", "STORE_DEREF", "STORE_ATTR"})
# torch's package directory, and ours (this file is loaderscope/probe/names.py)
OURS = (os.path.dirname(torch.__file__ or "") + os.sep, os.path.dirname(os.path.dirname(__file__)) + os.sep)
LIBRARIES = tuple({os.path.realpath(sysconfig.get_paths()[key]) + os.sep for key in ("stdlib", "platstdlib",
                                                                                      "purelib", "platlib")})
LOADS = frozenset({"LOAD_FAST", "LOAD_NAME", "LOAD_GLOBAL", "LOAD_DEREF"})
MAX_FRAMES = 64  # a loader built deeper than this inside a library is named by what lies within

Where = tuple[str, int, int]  # file, line, column of a call being made

_after: dict[tuple[CodeType, int], After | None] = {}
_returned: dict[tuple[CodeType, str], bool] = {}
_sites: dict[tuple[CodeType, int], statements.Site | None] = {}
_libraries: dict[str, bool] = {}
_claims: dict[str, Where] = {}
_claims_lock = threading.Lock()


class Name(NamedTuple):
    text: str
    kind: str  # "variable", "function" or "place": how sure the name is, in that order
    where: Where  # the code that gave the name


def loader_name(frame: FrameType | None, loader: Any = None, *, built: bool = False) -> Name | None:
    """The name of a loader being built or watched by the frames from ``frame`` outwards.

    ``loader``: with ``built``, the loader just built (``record``): a frame that holds it is inside its
    construction (a wrapper of its ``__init__``, as Lightning's ``_wrap_init_method``), passed over;
    else the object handed to ``watch()``: a local of the user's frame that holds it names it when
    nothing else does.
    """
    inside: tuple[Step, ...] | None = ()  # where the loader sits in the value of the call being made
    returned_by: str | None = None  # a user function that returns the loader itself
    held: str | None = None  # a local of the user's code that held it
    built_by: str | None = None  # a library function that built it
    first_user: FrameType | None = None
    kept_by: FrameType | None = None  # the frame that keeps the loader, neither naming nor returning it
    last = frame
    frames = _frames(frame)  # taken once, from the frame given: the loop then walks outwards
    for frame in frames:
        last = frame
        if built and first_user is None and any(value is loader for value in frame.f_locals.values()):
            continue
        library = _is_library(frame.f_code.co_filename)
        if library and first_user is None and "loader" in frame.f_code.co_name.lower():
            built_by = frame.f_code.co_name
        if not library and first_user is None:
            first_user = frame
            held = _holding_local(frame, loader) if loader is not None and not built else None
        if inside is None:
            if first_user is not None:
                break
            continue
        found = _bytecode_found(frame, inside, library) if library else _found(frame, inside)
        if found is None:
            inside, kept_by = None, frame
        elif found.returned is None and found.text:
            return Name(found.text, "variable", _where(frame))
        else:
            held = held or found.text
            if found.returned == () and not library and "loader" in frame.f_code.co_name.lower():
                returned_by = frame.f_code.co_name
            inside = found.returned
    anchor = kept_by or first_user or last
    if anchor is None or first_user is None and built_by is None:
        return None
    # one site for the names below: where the loader is kept (each evaluation's `get_eval_dataloader`
    # is one loader built again; two user lines asking a library for a loader are two)
    where = _where(anchor)
    if returned_by:
        return Name(returned_by, "function", where)
    if held:
        return Name(held, "variable", where)
    if built_by:
        return Name(built_by, "function", where)
    here = _where(first_user or anchor)
    return Name(f"{os.path.basename(here[0])}:{here[1]}", "place", here)


def claim(name: Name) -> str:
    """``name``'s text, told apart from the same text given by other code to another loader of this
    process: ``name@file.py:line``, or with the column too where one line gives it twice."""
    file, line, column = name.where
    here = f"{os.path.basename(file)}:{line}"
    choices = [name.text, f"{name.text}:{column + 1}"] if name.kind == "place" else \
        [name.text, f"{name.text}@{here}", f"{name.text}@{here}:{column + 1}"]
    with _claims_lock:
        for text in choices:
            if _claims.setdefault(text, name.where) == name.where:
                return text
    return choices[-1]


def rebuilding(frame: FrameType | None, waiting: Sequence[Any]) -> Any:
    """The loader of ``waiting`` that the library code building a loader at ``frame`` holds in a local
    (accelerate's ``prepare_data_loader(dataloader)`` rebuilds the ``dataloader`` it was given); None
    when the user's own code builds it, or no frame below the user's code holds one."""
    frames = _frames(frame)
    for frame in frames:
        if not _is_library(frame.f_code.co_filename):
            return None
        for value in frame.f_locals.values():
            for candidate in waiting:
                if value is candidate:
                    return candidate
    return None


def caller_frame(depth: int) -> FrameType | None:
    """The frame ``depth`` levels above the caller of this function."""
    try:
        return sys._getframe(depth + 1)
    except ValueError:
        return None


def place(frame: FrameType | None) -> str:
    """``package/file.py:line`` of the innermost frame from ``frame`` outwards that is not torch's or ours."""
    while frame is not None and frame.f_code.co_filename.startswith(OURS):
        frame = frame.f_back
    if frame is None:
        return "?"
    parts = frame.f_code.co_filename.split(os.sep)
    return f"{'/'.join(parts[-2:])}:{frame.f_lineno}"


def _frames(frame: FrameType | None) -> Iterator[FrameType]:
    """The frames from ``frame`` outwards that are neither torch's nor ours."""
    for _ in range(MAX_FRAMES):
        if frame is None:
            return
        if not frame.f_code.co_filename.startswith(OURS):
            yield frame
        frame = frame.f_back


def _found(frame: FrameType, inside: tuple[Step, ...]) -> statements.Found | None:
    """What the user's frame does with the loader: from the statement's syntax tree, else its bytecode."""
    key = (frame.f_code, frame.f_lasti)
    if key not in _sites:
        _sites[key] = statements.site(frame.f_code, frame.f_lasti, frame.f_globals)
    site = _sites[key]
    if site is not None:
        return statements.found(site, inside, frame.f_locals)
    return _bytecode_found(frame, inside, library=False)


def _bytecode_found(frame: FrameType, inside: tuple[Step, ...], library: bool) -> statements.Found | None:
    """What the frame does with the loader, read from its bytecode: returns it (``return f(...)``, or a
    local it returns: ``dataloader = f(...)`` … ``return dataloader``), or, in the user's code, stores it.
    A library's variables name nothing."""
    after = _after_call(frame.f_code, frame.f_lasti)
    if after is not None and (after.how == "return" or after.how == "local" and _returns(frame.f_code, after.name)):
        return statements.Found(None if library else after.name or None, inside)
    # not a tool's own variable (pytest's `@py_assert1`), nor a value inside one
    if after is None or library or inside or not after.name.isidentifier():
        return None
    return statements.Found(after.name, None)


class After(NamedTuple):
    how: str  # "return", "local" (a local variable), "store" (any other variable or attribute)
    name: str


def _after_call(code: CodeType, offset: int) -> After | None:
    """What the code does with the result of the call at ``offset`` (``f_lasti``: the call being made, or
    in 3.11 the last of its inline cache entries, which ``dis`` does not list)."""
    key = (code, offset)
    if key not in _after:
        after = [i for i in dis.get_instructions(code) if i.offset > offset][:2]
        _after[key] = None
        if after and after[0].opname in ("RETURN_VALUE", "RETURN_CONST"):
            _after[key] = After("return", "")
        elif after and after[0].opname in STORES:
            how = "local" if after[0].opname in ("STORE_FAST", "STORE_NAME") else "store"
            _after[key] = After(how, str(after[0].argval))
        # `self.train_loader = ...`: the object is loaded after the value, then the attribute is stored
        elif len(after) == 2 and after[0].opname in LOADS and after[1].opname == "STORE_ATTR":
            _after[key] = After("store", str(after[1].argval))
    return _after[key]


def _returns(code: CodeType, local: str) -> bool:
    """Whether ``code`` returns the local ``local`` as its whole value somewhere (``return dataloader``)."""
    key = (code, local)
    if key not in _returned:
        instructions = list(dis.get_instructions(code))
        _returned[key] = any(load.opname.startswith(("LOAD_FAST", "LOAD_NAME")) and load.argval == local
                             and then.opname == "RETURN_VALUE"
                             for load, then in zip(instructions, instructions[1:], strict=False))
    return _returned[key]


def _where(frame: FrameType) -> Where:
    span = statements.call_span(frame.f_code, frame.f_lasti)
    return (frame.f_code.co_filename, span[0], span[1]) if span else (frame.f_code.co_filename, frame.f_lineno, 0)


def _holding_local(frame: FrameType, loader: Any) -> str | None:
    for name, value in frame.f_locals.items():
        if value is loader and not name.startswith("_"):
            return name
    return None


def _is_library(path: str) -> bool:
    if path not in _libraries:
        _libraries[path] = path.startswith("<frozen") or os.path.realpath(path).startswith(LIBRARIES)
    return _libraries[path]
