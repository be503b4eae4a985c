"""Validation errors a person can act on: which field, what was wrong, what is allowed.

pydantic says "Input should be less than or equal to 32"; a user filling a form needs
"params.num_workers: must be at most 32 (got 99); allowed: integer from 0 to 32".
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel

from loaderscope.problems import allowed, allowed_by, kind_name, short

_NO_SCOPE = ("body",)  # FastAPI's location prefix for JSON bodies says nothing to a user


def field_problems(
    errors: Sequence[Any], model: type[BaseModel] | None = None, prefix: str = ""
) -> list[dict[str, Any]]:
    """One entry per pydantic error: ``{"field", "message", "allowed"}``."""
    problems = []
    for err in errors:
        loc = [str(part) for part in err.get("loc", ()) if part not in _NO_SCOPE]
        name = loc[-1] if loc else ""
        field = prefix + ".".join(loc)
        takes = allowed(model, name) if model is not None and len(loc) == 1 else None
        problems.append({"field": field, "message": _message(err, model, name), "allowed": takes})
    return problems


def readable(problems: Sequence[dict[str, Any]]) -> str:
    """``field: message; allowed: ...`` for each problem, joined."""
    parts = []
    for p in problems:
        text = f"{p['field']}: {p['message']}" if p["field"] else p["message"]
        if p.get("allowed"):
            text += f"; allowed: {p['allowed']}"
        parts.append(text)
    return "; ".join(parts)


def _message(err: Any, model: type[BaseModel] | None, name: str) -> str:
    if err.get("type") == "extra_forbidden":
        known = ", ".join(model.model_fields) if model is not None else ""
        return f"unknown parameter {name!r}" + (f"; known parameters: {known}" if known else "")
    message = str(err.get("msg", "invalid value"))
    if "input" in err and err.get("type") != "missing":
        message += f" (got {short(err['input'])})"
    return message


_JSON_TYPES: dict[str, tuple[type, ...]] = {"integer": (int,), "number": (int, float), "boolean": (bool,),
                                            "string": (str,), "object": (dict,), "array": (list,)}


def type_problems(values: dict[str, Any], properties: dict[str, Any], prefix: str) -> list[dict[str, Any]]:
    """Values whose JSON type is not the one their field declares (``"4"`` or ``true`` for an integer).

    pydantic's lax mode would coerce them; over HTTP a client sends typed JSON, and a coerced value
    hides a client's bug. Fields not in ``properties`` are left to the model (it names them).
    """
    problems = []
    for name, value in values.items():
        kind = properties.get(name, {}).get("type")
        want = _JSON_TYPES.get(kind) if isinstance(kind, str) else None
        if want is None or value is None:
            continue
        if isinstance(value, want) and (kind == "boolean" or not isinstance(value, bool)):
            if not isinstance(value, float) or math.isfinite(value):  # Python's json reads NaN and Infinity
                continue
        problems.append({"field": prefix + name, "message": f"must be {kind_name(kind)} (got {short(value)}: "
                         f"{type(value).__name__})", "allowed": allowed_by(properties[name])})
    return problems
