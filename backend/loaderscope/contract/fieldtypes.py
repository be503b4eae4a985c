"""A contract field's type in the words the page and the docs use: ``describe`` turns a field's
annotation into ``type`` (int, number, string, bool, object, array or any), ``nullable`` and a number's
bounds. ``contract.gen.js``'s ``KINDS`` and ``NAMED``, the event table's columns and the reference
read it.
"""

from __future__ import annotations

from typing import Any

from msgspec import inspect

from loaderscope.contract import events


def describe(annotation: Any) -> dict[str, Any]:
    """A field's type as the page checks it: ``type`` (int, number, string, bool, object, array or
    any), ``nullable``, and the bounds of a number. ``annotation``: a field's, or msgspec's description of it."""
    info = annotation if isinstance(annotation, inspect.Type) else inspect.type_info(annotation)
    if isinstance(info, inspect.Metadata):  # a field's description around its type
        info = info.type
    options = info.types if isinstance(info, inspect.UnionType) else (info,)
    nullable = any(isinstance(t, inspect.NoneType) for t in options)
    kinds = [t for t in options if not isinstance(t, inspect.NoneType)]
    out: dict[str, Any] = {"type": _name(kinds), "nullable": nullable}
    numbers = [t for t in kinds if isinstance(t, (inspect.IntType, inspect.FloatType))]
    if numbers and out["type"] in ("int", "number"):
        low = min(t.ge if t.ge is not None else -events.MAX_NUMBER for t in numbers)
        high = max(_high(t) for t in numbers)
        out |= {"min": low, "max": high}
    return out


def _high(t: inspect.IntType | inspect.FloatType) -> float:
    if t.lt is not None:
        return t.lt - 1
    return t.le if t.le is not None else events.MAX_NUMBER


def _name(kinds: list[inspect.Type]) -> str:
    names = {type(t).__name__ for t in kinds}
    table = {frozenset({"IntType"}): "int", frozenset({"IntType", "FloatType"}): "number",
             frozenset({"FloatType"}): "number", frozenset({"StrType"}): "string", frozenset({"BoolType"}): "bool",
             frozenset({"DictType"}): "object", frozenset({"ListType"}): "array"}
    return table.get(frozenset(names), "any")
