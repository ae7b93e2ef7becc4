"""Compiles a validated `FilterExpression` into a parameterised PostgreSQL predicate.

Identifiers come only from the fixed chunk columns; every value, metadata keys included, is a
bound parameter, never text spliced into the statement. The semantics are the embedded engine's
(`engine/lancedb/sql.py`, checked by the shared filter table): `not_equals` and `not_in` also match
chunks that lack the field; every other operator needs it present; `contains` is a
case-insensitive substring match (`ILIKE`, served by the pg_trgm indexes on title and text).
Metadata lives in a jsonb column: a key is read as text and cast to its recorded type.
"""

from __future__ import annotations

from psycopg import sql

from services.search_tool.filters import (
    METADATA_PREFIX,
    Condition,
    FieldType,
    FilterExpression,
    Operator,
    Scalar,
)

BREADCRUMBS = "breadcrumbs"

_COMPARISON = {
    Operator.EQUALS: "=",
    Operator.GREATER_THAN: ">",
    Operator.GREATER_THAN_OR_EQUAL: ">=",
    Operator.LESS_THAN: "<",
    Operator.LESS_THAN_OR_EQUAL: "<=",
}
_CASTS = {
    FieldType.INTEGER: "bigint",
    FieldType.DOUBLE: "double precision",
    FieldType.BOOL: "boolean",
    FieldType.TIMESTAMP: "timestamptz",
}
_COLUMNS = frozenset(
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

Predicate = tuple[sql.Composable, list[object]]
"""SQL text (with `%s` placeholders) and its parameters, in order."""


def compile_filter(expression: FilterExpression | None, *, alias: str = "") -> Predicate:
    """A predicate for `expression` (`TRUE` when it matches everything)."""
    if expression is None or expression.is_empty:
        return sql.SQL("TRUE"), []
    params: list[object] = []
    groups: list[sql.Composable] = []
    for group in expression.groups:
        parts = [_condition(c, params, alias) for c in group.conditions]
        groups.append(sql.SQL("(") + sql.SQL(" AND ").join(parts) + sql.SQL(")"))
    return sql.SQL("(") + sql.SQL(" OR ").join(groups) + sql.SQL(")"), params


def like_pattern(substring: str) -> str:
    """`%substring%` with LIKE wildcards escaped by a backslash."""
    escaped = substring.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return "%" + escaped + "%"


def _column(name: str, alias: str) -> sql.Composable:
    if alias:
        return sql.Identifier(alias, name)
    return sql.Identifier(name)


def _target(condition: Condition, alias: str) -> tuple[sql.Composable, list[object]]:
    """The field's SQL expression and the parameters it needs (a metadata key), to repeat with
    it each time the expression appears."""
    values = condition.value if isinstance(condition.value, tuple) else (condition.value,)
    as_double = condition.field_type is FieldType.INTEGER and any(
        isinstance(v, float) for v in values
    )
    if condition.field.startswith(METADATA_PREFIX):
        key: list[object] = [condition.field[len(METADATA_PREFIX) :]]
        text = sql.SQL("({} ->> %s)").format(_column("metadata", alias))
        cast = "double precision" if as_double else _CASTS.get(condition.field_type)
        if cast is None:
            return text, key
        return sql.SQL("({})::{}").format(text, sql.SQL(cast)), key
    if condition.field not in _COLUMNS:
        raise ValueError(f"unknown field {condition.field!r}")
    column = _column(condition.field, alias)
    if as_double:
        return sql.SQL("({})::double precision").format(column), []
    return column, []


def _condition(condition: Condition, params: list[object], alias: str) -> sql.Composable:
    if condition.field == BREADCRUMBS:
        return _breadcrumb_condition(condition, params, alias)
    target, target_params = _target(condition, alias)
    operator, value = condition.operator, _as_double(condition)
    if operator is Operator.IN:
        params.extend([*target_params, list(_list(value))])
        return sql.SQL("{} = ANY(%s)").format(target)
    if operator is Operator.NOT_IN:
        params.extend([*target_params, *target_params, list(_list(value))])
        return sql.SQL("({0} IS NULL OR NOT ({0} = ANY(%s)))").format(target)
    if operator is Operator.CONTAINS:
        params.extend([*target_params, like_pattern(_text(value))])
        return sql.SQL("{} ILIKE %s ESCAPE '\\'").format(target)
    if operator is Operator.NOT_EQUALS:
        params.extend([*target_params, *target_params, _single(value)])
        return sql.SQL("({0} IS NULL OR {0} <> %s)").format(target)
    if condition.field_type is FieldType.STRING and operator is not Operator.EQUALS:
        raise ValueError(f"{operator} does not apply to text")
    params.extend([*target_params, _single(value)])
    return sql.SQL("{} {} %s").format(target, sql.SQL(_COMPARISON[operator]))


def _breadcrumb_condition(condition: Condition, params: list[object], alias: str) -> sql.Composable:
    terms = _column("breadcrumb_terms", alias)
    operator, value = condition.operator, condition.value
    if operator is Operator.CONTAINS:
        params.append(like_pattern(_text(value)))
        return sql.SQL("{} ILIKE %s ESCAPE '\\'").format(_column("breadcrumb_path", alias))
    if operator in (Operator.EQUALS, Operator.NOT_EQUALS):
        params.append([_single(value)])
        found = sql.SQL("{} && %s::text[]").format(terms)
        return found if operator is Operator.EQUALS else sql.SQL("NOT ({})").format(found)
    if operator in (Operator.IN, Operator.NOT_IN):
        params.append([str(v) for v in _list(value)])
        found = sql.SQL("{} && %s::text[]").format(terms)
        return found if operator is Operator.IN else sql.SQL("NOT ({})").format(found)
    raise ValueError(f"{operator} does not apply to breadcrumbs")


def _as_double(condition: Condition) -> Scalar | tuple[Scalar, ...]:
    """The value, every number a float when an integer field is compared with a fraction (the
    field is then read as a double, as the embedded engine does)."""
    value = condition.value
    values = value if isinstance(value, tuple) else (value,)
    if condition.field_type is not FieldType.INTEGER or not any(
        isinstance(v, float) for v in values
    ):
        return value
    doubles = tuple(float(v) for v in values if isinstance(v, int | float))
    return doubles if isinstance(value, tuple) else doubles[0]


def _single(value: Scalar | tuple[Scalar, ...]) -> Scalar:
    if isinstance(value, tuple):
        raise ValueError("this operator takes one value, not a list")
    return value


def _text(value: Scalar | tuple[Scalar, ...]) -> str:
    if not isinstance(value, str):
        raise ValueError("contains takes a string")
    return value


def _list(value: Scalar | tuple[Scalar, ...]) -> tuple[Scalar, ...]:
    if not isinstance(value, tuple):
        raise ValueError("in / not_in take a list")
    return value
