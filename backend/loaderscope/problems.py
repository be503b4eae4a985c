"""``ParamError``: the one error a scenario's name, its parameters or a loader setting can raise, worded for a person.

Each problem names the field, what was given and what is allowed, in the same words on the
command line (``--set``) and in the dashboard's 422 answers, e.g.
``num_workers=99: Input should be less than or equal to 64; allowed: an integer from 0 to 64``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

_NOTHING = object()  # a field that was not given at all


@dataclass(frozen=True)
class Problem:
    """One thing wrong: ``field`` (a parameter, or "scenario"), the value given, why, what is allowed."""

    field: str
    given: Any
    message: str
    allowed: str | None = None

    def __str__(self) -> str:
        where = self.field if self.given is _NOTHING else f"{self.field}={short(self.given)}"
        return f"{where}: {self.message}" + (f"; allowed: {self.allowed}" if self.allowed else "")


class ParamError(ValueError):
    """A scenario name or parameters that cannot run; ``str()`` is the message to show (a line per problem)."""

    def __init__(self, problems: Sequence[Problem]) -> None:
        super().__init__("\n".join(map(str, problems)))
        self.problems = tuple(problems)

    @classmethod
    def of(cls, error: ValidationError, model: type[BaseModel], scenario: str) -> ParamError:
        """pydantic's errors against ``model`` in those words."""
        return cls([_problem(item, model, scenario) for item in error.errors()])


class UnknownScenario(ParamError):
    """No scenario of that name is registered."""

    def __init__(self, name: str, known: Sequence[str]) -> None:
        super().__init__([Problem("scenario", name, f"no scenario named {name!r}", ", ".join(sorted(known)))])


def _problem(item: Any, model: type[BaseModel], scenario: str) -> Problem:
    name = ".".join(str(part) for part in item["loc"])
    given = item.get("input", _NOTHING) if item["type"] != "missing" else _NOTHING
    if item["type"] == "extra_forbidden":
        return Problem(name, given, f"{scenario} has no parameter {name!r}", ", ".join(model.model_fields))
    return Problem(name, given, str(item["msg"]).removeprefix("Value error, "), allowed(model, name))


def allowed(model: type[BaseModel], name: str) -> str | None:
    """The range or choices a field takes, from the model's own JSON schema."""
    prop = model.model_json_schema().get("properties", {}).get(name)
    return None if prop is None else allowed_by(prop)


def allowed_by(prop: dict[str, Any]) -> str:
    """What one JSON-schema property allows, in words (``an integer from 0 to 64``)."""
    if "enum" in prop:
        return "one of " + ", ".join(repr(v) for v in prop["enum"])
    kind = kind_name(str(prop.get("type", "value")))
    if prop.get("type") == "boolean":
        return kind
    low = prop.get("minimum", prop.get("exclusiveMinimum"))
    high = prop.get("maximum", prop.get("exclusiveMaximum"))
    if low is not None and high is not None:
        return f"{kind} from {low} to {high}"
    if low is not None:
        return f"{kind} of at least {low}"
    return kind if high is None else f"{kind} of at most {high}"


def kind_name(json_type: str) -> str:
    return {"integer": "an integer", "number": "a number", "string": "a string",
            "boolean": "true or false"}.get(json_type, "a value")


def short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
