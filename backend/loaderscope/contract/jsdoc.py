"""The page's event types, written from the contract as JSDoc (``frontend/js/model/types.gen.js``): the
common fields, each known kind's own fields, the fields the reducers add to notes, and the nested
shapes (``contract/shapes.py``). ``frontend/js/model/types.js`` builds the page's event unions on them, and
``tsc --checkJs`` checks the page against them, so a field's type is the one the validator checks.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from msgspec import inspect

from loaderscope.contract import events, shapes

# What a union of every JSON type but null reads as on the page: anything.
_ANY_JSON = frozenset({"number", "string", "boolean", "unknown[]", "Record<string, unknown>"})


def js_type(info: inspect.Type) -> str:
    """A field's type (msgspec's description of it) as a JSDoc type."""
    if isinstance(info, inspect.Metadata):
        js = (info.extra or {}).get("js")
        if js is None:
            return js_type(info.type)
        return f"{js}|null" if _nullable(info.type) else js
    options = info.types if isinstance(info, inspect.UnionType) else (info,)
    names = list(dict.fromkeys(_one(t) for t in options if not isinstance(t, inspect.NoneType)))
    if _ANY_JSON <= set(names) or "unknown" in names:
        return "unknown"  # null too
    return "|".join(names + ["null"] * _nullable(info))


def _nullable(info: inspect.Type) -> bool:
    options = info.types if isinstance(info, inspect.UnionType) else (info,)
    return any(isinstance(t, inspect.NoneType) for t in options)


def _one(info: inspect.Type) -> str:
    if isinstance(info, inspect.Metadata):
        return _one(info.type)
    if isinstance(info, (inspect.IntType, inspect.FloatType)):
        return "number"
    if isinstance(info, inspect.StrType):
        return "string"
    if isinstance(info, inspect.BoolType):
        return "boolean"
    if isinstance(info, inspect.ListType):
        item = js_type(info.item_type)
        return f"({item})[]" if "|" in item else f"{item}[]"
    if isinstance(info, inspect.DictType):
        return f"Record<string, {js_type(info.value_type)}>"
    if isinstance(info, inspect.StructType):
        return info.cls.__name__
    return "unknown"


def _description(info: inspect.Type) -> str:
    return (info.extra_json_schema or {}).get("description", "") if isinstance(info, inspect.Metadata) else ""


def _typedef(name: str, about: str, props: Iterable[tuple[str, inspect.Type, bool]]) -> str:
    """A JSDoc typedef of an object: each property with its type and description, ``[name]`` when optional."""
    lines = [f" * {line}" for line in _wrap(about)] + [f" * @typedef {{object}} {name}"]
    for prop, info, required in props:
        key = prop if required else f"[{prop}]"
        lines.append(f" * @property {{{js_type(info)}}} {key} {plain(_description(info))}".rstrip())
    return "/**\n" + "\n".join(lines) + "\n */\n"


def plain(text: str) -> str:
    """A docstring as one line of markdown (its ``code`` as `code`)."""
    return " ".join(text.replace("``", "`").split())


def _wrap(text: str, width: int = 100) -> list[str]:
    lines: list[str] = []
    for word in plain(text).split(" "):
        if lines and len(lines[-1]) + 1 + len(word) <= width:
            lines[-1] += " " + word
        else:
            lines.append(word)
    return lines


def _struct_props(cls: type[Any], skip: Iterable[str] = ()) -> list[tuple[str, inspect.Type, bool]]:
    info = inspect.type_info(cls)
    assert isinstance(info, inspect.StructType)
    return [(f.name, f.type, f.required) for f in info.fields if f.name not in skip]


def _fields_name(kind: str) -> str:
    return f"{events.STRUCTS[kind].__name__}Fields"


def _map(name: str, about: str, entries: Mapping[str, str]) -> str:
    body = ",\n".join(f" *   {key}: {value}" for key, value in entries.items())
    return f"/**\n * {about}\n * @typedef {{{{\n{body},\n * }}}} {name}\n */\n"


def render() -> str:
    """The typedefs of ``frontend/js/model/types.gen.js`` (generate.py adds its header)."""
    parts: list[str] = []
    for shape in shapes.SHAPES:
        name = shape.__name__
        known = f"{name}Fields" if name in shapes.OPEN else name
        parts.append(_typedef(known, shape.__doc__ or "", _struct_props(shape)))
        if name in shapes.OPEN:
            parts.append(f"/** {known}, and any other key (shown as it comes). @typedef {{{known} & "
                         f"{{[key: string]: unknown}}}} {name} */\n")
    parts.append(_typedef("CommonFields", events.Common.__doc__ or "", _struct_props(events.Common)))
    for kind, cls in events.STRUCTS.items():
        parts.append(_typedef(_fields_name(kind), f"`{kind}`: {cls.__doc__ or ''}",
                              _struct_props(cls, skip=events.COMMON_FIELDS)))
    parts.append(_map("KindFields", "Each known kind's own fields (beyond the common ones).",
                      {kind: _fields_name(kind) for kind in events.STRUCTS}))
    notes = {kind: "{" + ", ".join(f"{name}?: {js_type(inspect.type_info(t))}" for name, t in added.items()) + "}"
             for kind, added in events.NOTE_FIELDS.items()}
    parts.append(_map("NoteFields", "The fields the reducers add to a kind's events they keep as notes "
                      "(never sent by a producer).", notes))
    return "\n".join(parts) + "\nexport {};\n"
