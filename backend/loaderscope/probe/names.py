"""A loader's name, read from the code that made it: what a user recognises in the run picker.

Read once per loader, when it is built (``record``) or watched (``watch()``), from the call stack:

1. the variable the user's code stored it in (``train_loader = DataLoader(...)``,
   ``self.val_loader = watch(...)``): the store instruction right after the call in the frame, as
   long as every frame in between returned the loader as it was; or, for ``watch()``, a local of
   the calling frame that holds the object;
2. else the function of a library that built it for the user (the Hugging Face ``Trainer``'s
   ``get_train_dataloader``, ``get_eval_dataloader``): the outermost library frame, below the user's
   code, whose function's name mentions a loader;
3. else ``file:line`` of the innermost frame of the user's code.

Frames of torch and of loaderscope are never a name; the standard library and site-packages are
libraries; every other file is the user's code. Variables inside libraries (``dataloader``,
``base_dataloader``) say nothing a user would recognise, and once a library keeps the loader in one
of them, what the user's code stores further out (``result = trainer.train()``) is not the loader.
"""

from __future__ import annotations

import dis
import os
import sys
import sysconfig
from types import CodeType, FrameType
from typing import Any, NamedTuple

import torch

STORES = frozenset({"STORE_NAME", "STORE_FAST", "STORE_GLOBAL", "STORE_DEREF", "STORE_ATTR"})
# torch's package directory, and ours (this file is loaderscope/probe/names.py)
OURS = (os.path.dirname(torch.__file__ or "") + os.sep, os.path.dirname(os.path.dirname(__file__)) + os.sep)
LIBRARIES = tuple({os.path.realpath(sysconfig.get_paths()[key]) + os.sep for key in ("stdlib", "platstdlib",
                                                                                      "purelib", "platlib")})
LOADS = frozenset({"LOAD_FAST", "LOAD_NAME", "LOAD_GLOBAL", "LOAD_DEREF"})
MAX_FRAMES = 64  # a loader built deeper than this inside a library is named by what lies within

RETURN = "<return>"  # not an identifier: never a variable's name

_after: dict[tuple[CodeType, int], str | None] = {}
_libraries: dict[str, bool] = {}


class Name(NamedTuple):
    text: str
    kind: str  # "variable", "function" or "place": how sure the name is, in that order


def loader_name(frame: FrameType | None, loader: Any = None) -> Name | None:
    """The name of a loader being built or watched by the frames from ``frame`` outwards.

    ``loader``: the object handed to ``watch()``; a local of the user's frame that holds it names it
    when the call's result is not stored. A store names the loader only while the value stored is
    the loader: each frame between returned it as it was (``return DataLoader(...)``); a library that
    keeps it in a variable of its own, or passes it on, breaks that chain.
    """
    library_name: str | None = None
    first_user: FrameType | None = None
    passed_on = True  # the call each frame makes returns the loader itself
    for _ in range(MAX_FRAMES):
        if frame is None:
            break
        place = frame.f_code.co_filename
        if not place.startswith(OURS):
            after = after_call(frame)
            if _is_library(place):
                if "loader" in frame.f_code.co_name.lower():
                    library_name = frame.f_code.co_name
            else:
                first_user = first_user or frame
                if passed_on and after is not None and after.isidentifier():  # not a tool's own (`@py_assert1`)
                    return Name(after, "variable")
                held = _holding_local(frame, loader) if loader is not None else None
                if held is not None:
                    return Name(held, "variable")
            passed_on = passed_on and after == RETURN
        frame = frame.f_back
    if library_name is not None:
        return Name(library_name, "function")
    if first_user is not None:
        return Name(f"{os.path.basename(first_user.f_code.co_filename)}:{first_user.f_lineno}", "place")
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


def after_call(frame: FrameType) -> str | None:
    """What the frame does with the result of the call it is making: the variable or attribute it
    stores it in, ``RETURN`` when it returns it, else None."""
    key = (frame.f_code, frame.f_lasti)
    if key not in _after:
        _after[key] = _after_call(frame.f_code, frame.f_lasti)
    return _after[key]


def _after_call(code: CodeType, offset: int) -> str | None:
    """``offset`` is ``f_lasti``: the call being made, or in 3.11 the last of its inline cache entries,
    which ``dis`` does not list."""
    after = [i for i in dis.get_instructions(code) if i.offset > offset][:2]
    if after and after[0].opname in STORES:
        return str(after[0].argval)
    if after and after[0].opname in ("RETURN_VALUE", "RETURN_CONST"):
        return RETURN
    # `self.train_loader = ...`: the object is loaded after the value, then the attribute is stored
    if len(after) == 2 and after[0].opname in LOADS and after[1].opname == "STORE_ATTR":
        return str(after[1].argval)
    return None


def _holding_local(frame: FrameType, loader: Any) -> str | None:
    for name, value in frame.f_locals.items():
        if value is loader and not name.startswith("_"):
            return name
    return None


def _is_library(path: str) -> bool:
    if path not in _libraries:
        _libraries[path] = path.startswith("<frozen") or os.path.realpath(path).startswith(LIBRARIES)
    return _libraries[path]
