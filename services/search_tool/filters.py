"""Filters (DESIGN §4): an OR of groups, each an AND of conditions, validated against a collection.

`validate_filter` turns what a caller sent (`RawFilter`, built by the servicer from protobuf) into
a `FilterExpression` whose every value has the type of its field, or raises `InvalidArgument`
naming the bad part as `filter.groups[i].conditions[j].<field|operator|value>`. Engines compile
only validated expressions, so they never see an unknown field or a value of the wrong type.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import TypeAlias

from services.common.errors import FieldViolation, InvalidArgument, shown
from services.search_tool.limits import DEFAULT_LIMITS, RequestLimits


class FieldType(StrEnum):
    """The type of a filterable field; decides which operators and values apply."""

    STRING = "string"
    INTEGER = "integer"
    DOUBLE = "double"
    BOOL = "bool"
    TIMESTAMP = "timestamp"


class Operator(StrEnum):
    """Comparison applied by one condition."""

    EQUALS = "equals"
    NOT_EQUALS = "not_equals"
    CONTAINS = "contains"
    GREATER_THAN = "greater_than"
    GREATER_THAN_OR_EQUAL = "greater_than_or_equal"
    LESS_THAN = "less_than"
    LESS_THAN_OR_EQUAL = "less_than_or_equal"
    IN = "in"
    NOT_IN = "not_in"


ORDERING = frozenset(
    {
        Operator.GREATER_THAN,
        Operator.GREATER_THAN_OR_EQUAL,
        Operator.LESS_THAN,
        Operator.LESS_THAN_OR_EQUAL,
    }
)
LIST_OPERATORS = frozenset({Operator.IN, Operator.NOT_IN})

METADATA_PREFIX = "metadata."

CHUNK_FIELDS: Mapping[str, FieldType] = {
    "id": FieldType.STRING,
    "document_id": FieldType.STRING,
    "chunk_index": FieldType.INTEGER,
    "title": FieldType.STRING,
    "text": FieldType.STRING,
    "source": FieldType.STRING,
    "entity_type": FieldType.STRING,
    "created_at": FieldType.TIMESTAMP,
    "updated_at": FieldType.TIMESTAMP,
    "url": FieldType.STRING,
    "breadcrumbs": FieldType.STRING,
}
"""The fields every chunk has. `breadcrumbs` matches any breadcrumb's id or name (equals / in) or
the `name > name > ...` path (contains)."""

Scalar: TypeAlias = str | int | float | bool | datetime
"""A validated condition value: the Python type of its field."""

RawValue: TypeAlias = "str | int | float | bool | Sequence[RawValue] | None"
"""A value as a caller sent it (a JSON-like scalar or list; dates as ISO-8601 strings)."""


@dataclass(frozen=True)
class Condition:
    """`field operator value`, already validated."""

    field: str
    """A chunk field or `metadata.<key>`."""
    field_type: FieldType
    """The field's type in the collection."""
    operator: Operator
    """The comparison."""
    value: Scalar | tuple[Scalar, ...]
    """A scalar of the field's type, or a non-empty tuple of them for IN / NOT_IN."""


@dataclass(frozen=True)
class FilterGroup:
    """Conditions that must all hold (AND)."""

    conditions: tuple[Condition, ...]
    """At least one condition."""


@dataclass(frozen=True)
class FilterExpression:
    """OR of groups; no groups matches everything."""

    groups: tuple[FilterGroup, ...] = ()
    """The alternatives."""

    @property
    def is_empty(self) -> bool:
        return not self.groups


def combine_filters(
    caller: FilterExpression, model: FilterExpression, *, max_groups: int
) -> FilterExpression:
    """`(caller) AND (model)`: the model can narrow the caller's filter, never widen it.

    Distributes AND over OR: every caller group is joined with every model group. Raises
    `InvalidArgument` naming `filter` when the product has more than `max_groups` groups.
    """
    if caller.is_empty:
        return _bounded(model, max_groups, "filter")
    if model.is_empty:
        return _bounded(caller, max_groups, "caller_filter")
    count = len(caller.groups) * len(model.groups)
    if count > max_groups:
        raise InvalidArgument.for_field(
            "filter",
            f"{len(model.groups)} groups combined with the caller filter's {len(caller.groups)} "
            f"expand to {count} groups (at most {max_groups}); use fewer groups, e.g. one group "
            "with an `in` condition",
        )
    return FilterExpression(
        tuple(FilterGroup(c.conditions + m.conditions) for c in caller.groups for m in model.groups)
    )


def _bounded(expression: FilterExpression, max_groups: int, path: str) -> FilterExpression:
    if len(expression.groups) > max_groups:
        raise InvalidArgument.for_field(
            f"{path}.groups", f"{len(expression.groups)} groups (at most {max_groups})"
        )
    return expression


@dataclass(frozen=True)
class RawCondition:
    """One condition as received, before validation."""

    field: str
    """Field name as sent."""
    operator: Operator | None
    """None when the caller left it unspecified."""
    value: RawValue
    """Value as sent."""


@dataclass(frozen=True)
class RawFilter:
    """A filter as received: groups of raw conditions."""

    groups: tuple[tuple[RawCondition, ...], ...] = ()
    """OR of AND-groups."""


def validate_filter(
    raw: RawFilter,
    fields: Mapping[str, FieldType],
    *,
    path: str = "filter",
    limits: RequestLimits = DEFAULT_LIMITS,
) -> FilterExpression:
    """Validate `raw` against a collection's `fields`, reporting every bad part at once."""
    if len(raw.groups) > limits.filter_groups:
        raise InvalidArgument.for_field(
            f"{path}.groups", f"{len(raw.groups)} groups; the limit is {limits.filter_groups}"
        )
    violations: list[FieldViolation] = []
    groups: list[FilterGroup] = []
    for g, raw_group in enumerate(raw.groups):
        group_path = f"{path}.groups[{g}]"
        if not raw_group:
            violations.append(
                FieldViolation(f"{group_path}.conditions", "a group needs at least one condition")
            )
            continue
        if len(raw_group) > limits.filter_conditions:
            violations.append(
                FieldViolation(
                    f"{group_path}.conditions",
                    f"{len(raw_group)} conditions; the limit is {limits.filter_conditions}",
                )
            )
            continue
        conditions: list[Condition] = []
        for c, raw_condition in enumerate(raw_group):
            condition_path = f"{group_path}.conditions[{c}]"
            try:
                conditions.append(
                    _validate_condition(raw_condition, fields, condition_path, limits)
                )
            except _Violation as error:
                violations.append(error.violation)
        groups.append(FilterGroup(tuple(conditions)))
    if violations:
        raise InvalidArgument.for_violations(violations)
    return FilterExpression(tuple(groups))


def effective_filter(
    caller: RawFilter,
    model: RawFilter,
    fields: Mapping[str, FieldType],
    *,
    limits: RequestLimits = DEFAULT_LIMITS,
) -> FilterExpression:
    """Validate the caller's and the model's filter against `fields` and combine them as
    `(caller) AND (model)`: the one place a search's filter is decided, for every client.

    Violations name `caller_filter.…` or `filter.…`; both sides are checked before raising, so a
    caller sees every bad part of its request at once.
    """
    validated_caller, validated_model = validate_filters(caller, model, fields, limits=limits)
    return combine_filters(validated_caller, validated_model, max_groups=limits.filter_groups)


def validate_filters(
    caller: RawFilter,
    model: RawFilter,
    fields: Mapping[str, FieldType],
    *,
    limits: RequestLimits = DEFAULT_LIMITS,
) -> tuple[FilterExpression, FilterExpression]:
    """Both sides of a request validated, every violation of both reported at once."""
    violations: list[FieldViolation] = []
    sides: list[FilterExpression] = []
    for raw, path in ((caller, "caller_filter"), (model, "filter")):
        try:
            sides.append(validate_filter(raw, fields, path=path, limits=limits))
        except InvalidArgument as error:
            violations.extend(error.violations)
    if violations:
        raise InvalidArgument.for_violations(violations)
    return sides[0], sides[1]


class _Violation(Exception):
    def __init__(self, field_path: str, description: str) -> None:
        super().__init__(description)
        self.violation = FieldViolation(field_path, description)


def _validate_condition(
    raw: RawCondition, fields: Mapping[str, FieldType], path: str, limits: RequestLimits
) -> Condition:
    field_type = _field_type(raw.field, fields, f"{path}.field")
    operator = raw.operator
    if operator is None:
        raise _Violation(f"{path}.operator", "operator must be specified")
    if operator in ORDERING and field_type in (FieldType.STRING, FieldType.BOOL):
        raise _Violation(
            f"{path}.operator",
            f"{operator.value} needs a number or timestamp field; {raw.field} is {field_type}",
        )
    if operator is Operator.CONTAINS and field_type is not FieldType.STRING:
        raise _Violation(
            f"{path}.operator", f"contains applies to text fields only; {raw.field} is {field_type}"
        )
    value_path = f"{path}.value"
    value: Scalar | tuple[Scalar, ...]
    if operator in LIST_OPERATORS:
        value = _list_value(raw.value, field_type, value_path, limits.filter_list_values)
    else:
        if isinstance(raw.value, list | tuple):
            raise _Violation(value_path, f"{operator.value} takes a single value, not a list")
        value = _scalar(raw.value, field_type, value_path)
        if operator is Operator.CONTAINS and value == "":
            raise _Violation(value_path, "contains needs a non-empty string")
    for item in value if isinstance(value, tuple) else (value,):
        if isinstance(item, str) and len(item) > limits.filter_string_chars:
            raise _Violation(
                value_path,
                f"a string of {len(item)} characters; the limit is {limits.filter_string_chars}",
            )
    return Condition(raw.field, field_type, operator, value)


def _field_type(name: str, fields: Mapping[str, FieldType], path: str) -> FieldType:
    if not name:
        raise _Violation(path, "field must not be empty")
    if name in fields:
        return fields[name]
    if name.startswith(METADATA_PREFIX):
        raise _Violation(path, f"unknown metadata key {shown(name[len(METADATA_PREFIX) :])}")
    known = ", ".join(sorted(n for n in fields if not n.startswith(METADATA_PREFIX)))
    raise _Violation(
        path, f"unknown field {shown(name)}; filterable fields: {known}, metadata.<key>"
    )


def _list_value(raw: RawValue, field_type: FieldType, path: str, most: int) -> tuple[Scalar, ...]:
    if not isinstance(raw, list | tuple):
        raise _Violation(path, "in / not_in need a list of values")
    if not raw:
        raise _Violation(path, "in / not_in need at least one value")
    if len(raw) > most:
        raise _Violation(path, f"{len(raw)} values; the limit is {most}")
    return tuple(_scalar(item, field_type, f"{path}[{i}]") for i, item in enumerate(raw))


def _scalar(raw: RawValue, field_type: FieldType, path: str) -> Scalar:
    if raw is None:
        raise _Violation(path, "value must be set")
    if field_type is FieldType.STRING:
        if not isinstance(raw, str):
            raise _Violation(path, "expected a string")
        return raw
    if field_type is FieldType.BOOL:
        if not isinstance(raw, bool):
            raise _Violation(path, "expected true or false")
        return raw
    if field_type is FieldType.TIMESTAMP:
        if not isinstance(raw, str):
            raise _Violation(path, "expected an ISO-8601 date or date-time string")
        try:
            return parse_timestamp(raw)
        except ValueError:
            raise _Violation(path, f"malformed ISO-8601 date {shown(raw)}") from None
        except OverflowError:
            raise _Violation(path, f"{shown(raw)} is outside years 0001 to 9999 in UTC") from None
    if isinstance(raw, bool) or not isinstance(raw, int | float):
        raise _Violation(path, f"expected a number ({field_type})")
    if not math.isfinite(raw):
        raise _Violation(path, "expected a finite number")
    if field_type is FieldType.INTEGER and float(raw).is_integer() and _INT64 <= raw < -_INT64:
        return int(raw)
    return float(raw)  # beyond int64 an integer field still compares, as a float


_INT64 = -(2**63)


def parse_timestamp(text: str) -> datetime:
    """An ISO-8601 date or date-time in UTC; naive values are taken as UTC. Raises ValueError."""
    parsed = datetime.fromisoformat(text.strip())
    if parsed.tzinfo is None:
        return parsed.replace(tzinfo=UTC)
    return parsed.astimezone(UTC)
