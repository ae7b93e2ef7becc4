"""The two filters a search carries, side by side. The model's, as it writes it in its `search`
tool call (`FilterGroup`: OR of groups, each an AND of conditions; these models generate the
tool's JSON schema and check only that shape). The caller's (`RunRequest.filter`), as the caller
sent it (`CallerFilter`): lossless, since the agent never judges it — an operator number the agent
knows no name for stays the number, any JSON value (null, objects, nested lists, a value left
unset), empty groups and conditions stay as sent. The API's edge builds it
(`filter_wire.caller_filter`), the search tool's edge sends it back out unchanged
(`filter_wire.caller_filter_message`).

Whether a filter makes sense for a collection (known fields, operators that fit their types, dates)
and how it combines with the caller's filter is decided by the search tool alone: the agent sends
the caller's filter and the model's filter side by side and never validates or merges them itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal, TypeAlias

from pydantic import BaseModel, ConfigDict, Field

Operator = Literal[
    "equals",
    "not_equals",
    "contains",
    "greater_than",
    "greater_than_or_equal",
    "less_than",
    "less_than_or_equal",
    "in",
    "not_in",
]
Scalar = str | int | float | bool
FilterValue = Scalar | list[str | int | float]


class FilterCondition(BaseModel):
    """One condition: `field operator value`."""

    model_config = ConfigDict(frozen=True)

    field: str = Field(
        min_length=1,
        description="A chunk field (source, entity_type, created_at, ...) or metadata.<key>.",
    )
    operator: Operator = Field(description="The comparison to apply.")
    value: FilterValue = Field(
        description="A string, number or boolean; a list for in / not_in; dates as ISO-8601."
    )


class FilterGroup(BaseModel):
    """Conditions that must all hold (AND)."""

    model_config = ConfigDict(frozen=True)

    conditions: list[FilterCondition] = Field(min_length=1, description="All of these must hold.")


# --- the caller's filter -------------------------------------------------------------------------

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
