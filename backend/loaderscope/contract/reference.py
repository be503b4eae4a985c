"""The events' reference, written from the contract (``docs/reference/events.md``): every kind with its
meaning, its reducers' rule and its fields (type, required, who sends it, meaning); for the frequent
kinds the page's column of each field and the compact row; the shapes events nest; the fields the
reducers add to notes. docs/DESIGN.md §3 keeps the reasons and points here for the tables.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from msgspec import inspect

from loaderscope.contract import columns, events, rules, shapes
from loaderscope.contract.fieldtypes import describe
from loaderscope.contract.jsdoc import js_type, plain

_NOUN = {"int": "int", "number": "number", "string": "string", "bool": "bool", "object": "object",
         "array": "list", "any": "any"}


def type_words(info: inspect.Type, describe: Mapping[str, Any]) -> str:
    """A field's type in the reference: the page's shape where it has one, its bounds where narrower
    than JSON's exact integers, ``| null`` where null is allowed."""
    js = (info.extra or {}).get("js") if isinstance(info, inspect.Metadata) else None
    if js is None and describe["type"] == "any" and js_type(info) != "unknown":  # a shape's union of containers
        js = js_type(info).removesuffix("|null")
    words = f"`{js}`".replace("|", "\\|") if js else _NOUN[describe["type"]]
    low, high = describe.get("min"), describe.get("max")
    if low is not None and high is not None and (low, high) != (-events.MAX_NUMBER, events.MAX_NUMBER):
        words += f" {low}…{high}" if high != events.MAX_NUMBER else f" ≥ {low}"
    return words + (" \\| null" if describe["nullable"] else "")


def _cell(text: str) -> str:
    return plain(text).replace("|", "\\|")


def _table(header: Iterable[str], rows: Iterable[Iterable[str]]) -> list[str]:
    head = list(header)
    return [f"| {' | '.join(head)} |", f"|{'---|' * len(head)}", *(f"| {' | '.join(row)} |" for row in rows)]


def _fields(cls: type[Any], skip: Iterable[str] = (), column: Mapping[str, str] | None = None) -> list[str]:
    info = inspect.type_info(cls)
    assert isinstance(info, inspect.StructType)
    header = ["field", "type", "required", "meaning"] + (["page column"] if column is not None else [])
    rows = []
    for f in info.fields:
        if f.name in skip:
            continue
        about = (f.type.extra_json_schema or {}).get("description", "") if isinstance(f.type, inspect.Metadata) else ""
        row = [f"`{f.name}`", type_words(f.type, describe(f.type)), "yes" if f.required else "", _cell(about)]
        if column is not None:
            row.append(f"`{column[f.name]}`" if f.name in column else "none: the row is kept whole")
        rows.append(row)
    return _table(header, rows)


def _rule(kind: str) -> str:
    rule = rules.RULES.get(events.Kind(kind))
    if rule is None:
        return "Reducers: no rule; shown as a note, as an unknown kind is."
    effects = ["needs a live task of the epoch" if rule.needs_task else "",
               f"worker → `{rule.worker.value}`" if rule.worker else "",
               (f"task {' or '.join(w.value for w in rule.moves[0]) or 'anywhere'} → `{rule.moves[1].value}`"
                if rule.moves else ""),
               f"enters `{rule.enters}`" if rule.enters else "", f"leaves `{rule.leaves}`" if rule.leaves else "",
               ", ".join(f"`{name}` += {by if isinstance(by, int) else f'`{by}`'}" for name, by in rule.counts.items()),
               "fails the epoch" if rule.fails else "", "kept in notes" if rule.keeps else ""]
    done = "; ".join(e for e in effects if e)
    return f"Reducers (`RULES`): {rule.says}" + (f" ({done})." if done else ".")


def _frequent_row(kind: str) -> str:
    if kind not in events.ROW_FIELDS:
        return ""
    return f"Compact row: `[\"{kind}\", t, {', '.join(events.ROW_FIELDS[kind])}]`."


def render() -> str:
    """``docs/reference/events.md`` (generate.py adds its header)."""
    page_columns = columns.frequent()
    out = ["# Events (schema version 1)", "",
           "Every kind and field the probe, the simulator, the doctor and the server send, as "
           "`backend/loaderscope/contract/events.py` declares them; why they are so is in docs/DESIGN.md §3. "
           "Required fields are in every event of the kind, and are never null; the others are optional and "
           "may be null where the type says so. Producers: P the probe, S the simulator, D the doctor; "
           "a field with none named is sent by each that knows it.", "",
           "## Common fields", "", *_fields(events.Common), "",
           "## Kinds", "",
           f"The frequent kinds ({', '.join(f'`{k}`' for k in events.FREQUENT)}) are kept in the page's typed "
           f"columns (`frontend/js/model/event-table.js`): each field in the column `contract/columns.py` gives it; an "
           f"event carrying a field without a column is kept whole, as it came.", ""]
    for kind, cls in events.STRUCTS.items():
        extra = [line for line in (_frequent_row(kind),) if line]
        out += [f"### `{kind}`", "", _cell(cls.__doc__ or ""), "", _rule(kind), *extra, "",
                *_fields(cls, skip=events.COMMON_FIELDS, column=page_columns.get(kind)), ""]
    out += ["## Added by the reducers", "",
            "Fields the reducers (`state.py`, `reducer.js`) add to the events they keep as notes; "
            "no producer sends them.",
            "", *_table(["kind", "field", "meaning"],
                        [[f"`{kind}`", f"`{name}`", _cell(_about(t))]
                         for kind, added in events.NOTE_FIELDS.items() for name, t in added.items()]), "",
            "## Compact rows", "",
            "What the probe sends for the per-batch kinds (docs/DESIGN.md §4): `[kind, t, values…]` in this order.", "",
            *_table(["row", "expands to"],
                    [[f"`[\"{kind}\", t, {', '.join(names)}]`", f"`{kind}`"]
                     for kind, names in events.ROW_FIELDS.items()]
                    + [[f"`[\"{events.BATCH_ROW}\", t, {', '.join(events.BATCH_ROW_FIELDS)}]`",
                        f"{events.BATCH_EVENTS} events of one in-process batch"]]), "",
            "## Nested values", "",
            "The shapes fields name in their type (`contract/shapes.py`): the validator takes these fields "
            "loosely, the page's types and this reference by these shapes.", ""]
    for shape in shapes.SHAPES:
        opened = " Other keys are shown as they come." if shape.__name__ in shapes.OPEN else ""
        out += [f"### `{shape.__name__}`", "", _cell(shape.__doc__ or "") + opened, "", *_fields(shape), ""]
    return "\n".join(out)


def _about(annotation: Any) -> str:
    info = inspect.type_info(annotation)
    return (info.extra_json_schema or {}).get("description", "") if isinstance(info, inspect.Metadata) else ""

