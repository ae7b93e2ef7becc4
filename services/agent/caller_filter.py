"""The caller's filter (`RunRequest.filter`) in domain terms: what the caller may see, an OR of
groups, each an AND of conditions.

The agent never judges it: the search tool validates it on every call (known fields, operators
that fit their types, values, group bounds) and answers `caller_filter.groups[i]...` violations.
So this shape keeps everything the caller sent, including what the agent could not check: an
operator number it does not know (kept as the number), any JSON value (null, objects, nested
lists, a value left unset), empty groups and conditions. The API edge builds it
(`filter_wire.caller_filter`), the search tool's edge sends it back out unchanged
(`filter_wire.caller_filter_message`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal, TypeAlias

from services.agent.filters import Operator

CallerOperator = Operator | Literal["unspecified"]
"""An operator by name; "unspecified" is the caller leaving it out (the search tool refuses it)."""

JsonValue: TypeAlias = "bool | float | str | list[JsonValue] | dict[str, JsonValue] | None"
"""A JSON value as the wire's `google.protobuf.Value` holds it (every number a float)."""


class NoValue:
    """The type of `NO_VALUE`."""

    _instance: NoValue | None = None

    def __new__(cls) -> NoValue:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "NO_VALUE"


NO_VALUE: Final = NoValue()
"""A condition whose value the caller left unset (not the same as a JSON null on the wire)."""


@dataclass(frozen=True)
class CallerCondition:
    """One condition as the caller sent it: `field operator value`."""

    field: str
    operator: CallerOperator | int
    """The operator's name, or the number as sent when this agent knows no name for it."""
    value: JsonValue | NoValue = NO_VALUE


@dataclass(frozen=True)
class CallerFilter:
    """OR of AND-groups; no groups lets the caller see everything."""

    groups: tuple[tuple[CallerCondition, ...], ...] = ()
