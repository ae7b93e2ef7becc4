"""The shape of a filter the model writes in its `search` tool call: OR of groups, each an AND of
conditions. These models generate the tool's JSON schema and check only that shape.

Whether a filter makes sense for a collection (known fields, operators that fit their types, dates)
and how it combines with the caller's filter is decided by the search tool alone: the agent sends
the caller's filter and the model's filter side by side and never validates or merges them itself.
"""

from __future__ import annotations

from typing import Literal

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
