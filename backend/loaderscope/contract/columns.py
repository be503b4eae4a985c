"""Which column of the page's event table holds each field of each frequent kind, derived from the
kinds' Structs (``COLUMNS`` in ``contract.gen.js``; ``frontend/js/model/event-table.js`` stores and reads
rows by it).

The table keeps a frequent kind's row in typed arrays of a fixed width, so that ten million events
cost tens of megabytes: ``idx``, ``worker`` and ``epoch`` (int32, each its own field), three float64
columns ``a``, ``b``, ``c`` (a number or an integer field), ``bool`` (one boolean a row, in its flags)
and ``indices`` (a list of integers in the table's pool, its offset and count in ``b`` and ``c``).
A field gets the same column in every frequent kind that has it (the page reads a Parquet column
into one place whatever the row's kind). An optional field that finds no free column is left out of
the map: a row that carries it is kept whole, as the object it came as, so nothing is dropped or
written over another field. A kind whose required fields do not fit cannot be a frequent kind, and
is refused here, when the contract is generated.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from msgspec.structs import fields

from loaderscope.contract import events
from loaderscope.contract.fieldtypes import describe

OWN = ("idx", "worker", "epoch")  # int32 columns, each holding the field of its name
NUMBERS = ("a", "b", "c")  # float64 columns
INDICES_USES = ("b", "c")  # where an `indices` list's offset and count go


class ColumnError(ValueError):
    """A frequent kind the event table cannot hold: the message names the kind, the field and the fix."""


@dataclass(frozen=True)
class Field:
    """A frequent kind's field as the table sees it: its type (``describe``'s) and whether required."""

    type: str
    required: bool


def frequent() -> dict[str, dict[str, str]]:
    """The contract's frequent kinds' ``{field: column}`` (``COLUMNS`` in ``contract.gen.js``)."""
    return column_map({kind: {f.name: Field(describe(f.type)["type"], f.required)
                              for f in fields(events.STRUCTS[kind]) if f.name not in events.COMMON_FIELDS}
                       for kind in events.FREQUENT})


def column_map(kinds: Mapping[str, Mapping[str, Field]]) -> dict[str, dict[str, str]]:
    """Each frequent kind's ``{field: column}``, from its own fields (in ``kinds``' order, which is
    the order columns are handed out in). A field left out is kept whole with its row.

    Raises:
        ColumnError: a kind without a required integer ``idx``, a field typed two ways by two kinds,
            or a required field that has no column left.
    """
    for kind, own in kinds.items():
        idx = own.get("idx")
        if idx is None or not idx.required or idx.type != "int":
            raise ColumnError(f"frequent kind {kind}: it needs a required integer 'idx' (the table's row key)")
    used: dict[str, set[str]] = {kind: set() for kind in kinds}
    out: dict[str, dict[str, str]] = {kind: {} for kind in kinds}
    for name in dict.fromkeys(name for own in kinds.values() for name in own):
        holders = [kind for kind, own in kinds.items() if name in own]
        column = _column(name, _one_type(name, [kinds[kind][name] for kind in holders], holders),
                         set().union(*(used[kind] for kind in holders)))
        if column is None:
            if required := [kind for kind in holders if kinds[kind][name].required]:
                raise ColumnError(
                    f"frequent kind {required[0]}: its required field '{name}' has no column left in the event "
                    f"table (frontend/js/model/event-table.js): make it optional (a row that carries it is then kept "
                    f"whole) or give the table a column for it")
            continue
        for kind in holders:
            out[kind][name] = column
            used[kind].update((column, *INDICES_USES) if column == "indices" else (column,))
    return out


def _one_type(name: str, fields: list[Field], kinds: list[str]) -> str:
    types = {f.type for f in fields}
    if len(types) > 1:
        raise ColumnError(f"frequent kinds {', '.join(kinds)}: '{name}' is typed {' and '.join(sorted(types))}; "
                          f"the event table stores a field one way in every kind: give it one type")
    return types.pop()


def _column(name: str, type_: str, taken: set[str]) -> str | None:
    """The column a field of this name and type goes to, given the columns its kinds already use."""
    if name in OWN:
        if type_ != "int":
            raise ColumnError(f"frequent kinds: '{name}' must be an integer (its int32 column), not {type_}")
        return name
    if type_ == "bool":
        candidates: tuple[str, ...] = ("bool",)
    elif type_ == "array":
        candidates = ("indices",) if not taken & {"indices", *INDICES_USES} else ()
    elif type_ in ("int", "number"):
        candidates = NUMBERS
    else:
        candidates = ()
    return next((column for column in candidates if column not in taken), None)
