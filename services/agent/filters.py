"""Filters as the agent sees them: OR of groups, each an AND of conditions; merged so the model
can only narrow what the caller allowed."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from services.common.errors import FieldViolation, InvalidArgument

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

LIST_OPERATORS = frozenset({"in", "not_in"})
ORDERING_OPERATORS = frozenset(
    {"greater_than", "greater_than_or_equal", "less_than", "less_than_or_equal"}
)
CHUNK_FIELDS = frozenset(
    {
        "id",
        "document_id",
        "chunk_index",
        "title",
        "text",
        "source",
        "entity_type",
        "created_at",
        "updated_at",
        "url",
    }
)


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


class FilterTooComplex(ValueError):
    """The AND of two filters expands to more OR groups than allowed."""


def merge_filters(
    caller: Sequence[FilterGroup], model: Sequence[FilterGroup], *, max_groups: int
) -> list[FilterGroup]:
    """(caller) AND (model) as one OR of groups: every caller group combined with every model group.

    An empty side matches everything, so the other side is the result. The model can only narrow.
    """
    if not caller:
        return list(model)
    if not model:
        return list(caller)
    if len(caller) * len(model) > max_groups:
        raise FilterTooComplex(
            f"your {len(model)} filter groups combined with the caller's {len(caller)} groups "
            f"expand to {len(caller) * len(model)} groups (at most {max_groups} are allowed); "
            "use fewer filter groups, e.g. one group with an `in` condition"
        )
    return [FilterGroup(conditions=[*c.conditions, *m.conditions]) for c in caller for m in model]


def check_caller_filter(groups: Sequence[FilterGroup], known_fields: set[str]) -> None:
    """Reject a caller filter whose shape is wrong, naming each bad field."""
    violations: list[FieldViolation] = []
    for g, group in enumerate(groups):
        if not group.conditions:
            violations.append(
                FieldViolation(f"filter.groups[{g}].conditions", "a group needs a condition")
            )
        for c, condition in enumerate(group.conditions):
            path = f"filter.groups[{g}].conditions[{c}]"
            violations.extend(_condition_violations(path, condition, known_fields))
    if violations:
        raise InvalidArgument(
            "; ".join(f"{v.field}: {v.description}" for v in violations), violations=violations
        )


def _condition_violations(
    path: str, condition: FilterCondition, known_fields: set[str]
) -> list[FieldViolation]:
    found: list[FieldViolation] = []
    name = condition.field
    if name not in known_fields and not name.startswith("metadata."):
        found.append(FieldViolation(f"{path}.field", f"unknown field {name!r}"))
    is_list = isinstance(condition.value, list)
    if condition.operator in LIST_OPERATORS and not is_list:
        found.append(FieldViolation(f"{path}.value", f"{condition.operator} needs a list"))
    if condition.operator not in LIST_OPERATORS and is_list:
        found.append(FieldViolation(f"{path}.value", f"{condition.operator} needs a single value"))
    return found
