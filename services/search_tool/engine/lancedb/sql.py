"""Compiles a validated `FilterExpression` into a LanceDB (DataFusion SQL) predicate.

Identifiers come only from the collection's known columns and are always back-quoted; every value
is rendered as a literal by this module alone (strings with doubled quotes, LIKE patterns with `%`,
`_` and `\\` escaped under an explicit `ESCAPE`), so no value can change the shape of the query.
`not_equals` and `not_in` also match chunks that lack the field (a missing value is not equal to
anything); every other operator needs the field to be present.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime

from services.search_tool.filters import (
    METADATA_PREFIX,
    Condition,
    FieldType,
    FilterExpression,
    Operator,
    Scalar,
)

METADATA_COLUMN_PREFIX = "meta__"
BREADCRUMBS = "breadcrumbs"
BREADCRUMB_TERMS_COLUMN = "breadcrumb_terms"
BREADCRUMB_PATH_COLUMN = "breadcrumb_path"

_COMPARISON = {
    Operator.EQUALS: "=",
    Operator.GREATER_THAN: ">",
    Operator.GREATER_THAN_OR_EQUAL: ">=",
    Operator.LESS_THAN: "<",
    Operator.LESS_THAN_OR_EQUAL: "<=",
}


def column_of(field: str) -> str:
    """The table column holding a filterable field (`metadata.k` → `meta__k`)."""
    if field.startswith(METADATA_PREFIX):
        return METADATA_COLUMN_PREFIX + field[len(METADATA_PREFIX) :]
    return field


def compile_filter(expression: FilterExpression) -> str | None:
    """A SQL predicate, or None when the expression matches everything."""
    if expression.is_empty:
        return None
    groups = [
        "(" + " AND ".join(_condition(c) for c in group.conditions) + ")"
        for group in expression.groups
    ]
    return groups[0] if len(groups) == 1 else "(" + " OR ".join(groups) + ")"


def quote_identifier(name: str) -> str:
    """A back-quoted column name."""
    if "`" in name:
        raise ValueError(f"column name {name!r} cannot be quoted")
    return f"`{name}`"


def literal(value: Scalar) -> str:
    """A SQL literal for a validated value."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError("non-finite numbers cannot be compared")
        return repr(value)
    if isinstance(value, datetime):
        utc = value.astimezone(UTC)  # %Y would not pad years before 1000 (Arrow needs 4 digits)
        stamp = f"{utc.year:04d}-{utc:%m-%dT%H:%M:%S.%f}Z"
        return f"arrow_cast('{stamp}', 'Timestamp(Microsecond, Some(\"UTC\"))')"
    return "'" + value.replace("'", "''") + "'"


def like_pattern(substring: str) -> str:
    """`%substring%` with LIKE wildcards escaped by a backslash."""
    escaped = substring.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return "%" + escaped + "%"


def _condition(condition: Condition) -> str:
    if condition.field == BREADCRUMBS:
        return _breadcrumb_condition(condition)
    column = quote_identifier(column_of(condition.field))
    operator, value = condition.operator, condition.value
    values = value if isinstance(value, tuple) else (value,)
    if condition.field_type is FieldType.INTEGER and any(isinstance(v, float) for v in values):
        column = f"CAST({column} AS DOUBLE)"
    if operator is Operator.IN:
        return f"{column} IN ({_list(value)})"
    if operator is Operator.NOT_IN:
        return f"({column} IS NULL OR {column} NOT IN ({_list(value)}))"
    if operator is Operator.CONTAINS:
        return f"lower({column}) LIKE lower({literal(like_pattern(_text(value)))}) ESCAPE '\\'"
    if operator is Operator.NOT_EQUALS:
        return f"({column} IS NULL OR {column} <> {literal(_single(value))})"
    if condition.field_type is FieldType.STRING and operator is not Operator.EQUALS:
        raise ValueError(f"{operator} does not apply to text")
    return f"{column} {_COMPARISON[operator]} {literal(_single(value))}"


def _breadcrumb_condition(condition: Condition) -> str:
    terms = quote_identifier(BREADCRUMB_TERMS_COLUMN)
    operator, value = condition.operator, condition.value
    if operator is Operator.CONTAINS:
        path = quote_identifier(BREADCRUMB_PATH_COLUMN)
        return f"lower({path}) LIKE lower({literal(like_pattern(_text(value)))}) ESCAPE '\\'"
    if operator is Operator.EQUALS:
        return f"array_has({terms}, {literal(_single(value))})"
    if operator is Operator.NOT_EQUALS:
        return f"NOT array_has({terms}, {literal(_single(value))})"
    if operator is Operator.IN:
        return f"array_has_any({terms}, make_array({_list(value)}))"
    if operator is Operator.NOT_IN:
        return f"NOT array_has_any({terms}, make_array({_list(value)}))"
    raise ValueError(f"{operator} does not apply to breadcrumbs")


def _single(value: Scalar | tuple[Scalar, ...]) -> Scalar:
    if isinstance(value, tuple):
        raise ValueError("this operator takes one value, not a list")
    return value


def _text(value: Scalar | tuple[Scalar, ...]) -> str:
    if not isinstance(value, str):
        raise ValueError("contains takes a string")
    return value


def _list(value: Scalar | tuple[Scalar, ...]) -> str:
    if not isinstance(value, tuple):
        raise ValueError("in / not_in take a list")
    return ", ".join(literal(v) for v in value)
