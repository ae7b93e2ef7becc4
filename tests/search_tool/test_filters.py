"""Filter validation, `(caller) AND (model)` combination and the SQL compiler's literal escaping."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from services.common.errors import InvalidArgument
from services.search_tool.engine.lancedb.sql import compile_filter, like_pattern, literal
from services.search_tool.filters import (
    CHUNK_FIELDS,
    Condition,
    FieldType,
    FilterExpression,
    FilterGroup,
    Operator,
    RawCondition,
    RawFilter,
    RawValue,
    combine_filters,
    validate_filter,
)

FIELDS = {**CHUNK_FIELDS, "metadata.year": FieldType.INTEGER, "metadata.ok": FieldType.BOOL}


def _validate(field: str, operator: Operator | None, value: RawValue) -> FilterExpression:
    return validate_filter(RawFilter(((RawCondition(field, operator, value),),)), FIELDS)


def _violation(field: str, operator: Operator | None, value: RawValue) -> tuple[str, str]:
    with pytest.raises(InvalidArgument) as caught:
        _validate(field, operator, value)
    violation = caught.value.violations[0]
    return violation.field, violation.description


def _only(expression: FilterExpression) -> Condition:
    return expression.groups[0].conditions[0]


def test_dates_become_utc_datetimes() -> None:
    condition = _only(_validate("created_at", Operator.GREATER_THAN, "2024-03-05T13:00:00+01:00"))
    assert condition.value == datetime(2024, 3, 5, 12, tzinfo=UTC)
    assert _only(_validate("created_at", Operator.LESS_THAN, "2024-03-05")).value == datetime(
        2024, 3, 5, tzinfo=UTC
    )


def test_integral_numbers_on_integer_fields_become_ints() -> None:
    assert _only(_validate("metadata.year", Operator.EQUALS, 2024.0)).value == 2024
    assert _only(_validate("metadata.year", Operator.IN, [2023.0, 2024.5])).value == (2023, 2024.5)


def test_numbers_beyond_int64_on_integer_fields_stay_comparable_as_floats() -> None:
    assert _only(_validate("metadata.year", Operator.GREATER_THAN, 1e19)).value == 1e19
    assert _only(_validate("metadata.year", Operator.LESS_THAN, -1e308)).value == -1e308
    assert compile_filter(_validate("metadata.year", Operator.GREATER_THAN, 1e19)) is not None


def test_dates_at_the_ends_of_the_calendar_compile_to_four_digit_years() -> None:
    first = _only(_validate("created_at", Operator.GREATER_THAN, "0001-01-01"))
    assert "'0001-01-01T00:00:00.000000Z'" in literal(first.value)  # type: ignore[arg-type]
    last = _only(_validate("created_at", Operator.LESS_THAN, "9999-12-31T23:59:59Z"))
    assert "'9999-12-31T23:59:59.000000Z'" in literal(last.value)  # type: ignore[arg-type]


def test_a_date_that_leaves_the_calendar_in_utc_is_refused() -> None:
    path, words = _violation("created_at", Operator.LESS_THAN, "9999-12-31T23:00:00-05:00")
    assert path == "filter.groups[0].conditions[0].value"
    assert "outside years 0001 to 9999" in words


@pytest.mark.parametrize(
    ("field", "operator", "value", "path", "words"),
    [
        ("colour", Operator.EQUALS, "x", "field", "unknown field"),
        ("", Operator.EQUALS, "x", "field", "must not be empty"),
        ("metadata.missing", Operator.EQUALS, "x", "field", "unknown metadata key"),
        ("source", None, "x", "operator", "must be specified"),
        ("title", Operator.LESS_THAN, "x", "operator", "number or timestamp"),
        ("metadata.ok", Operator.GREATER_THAN, True, "operator", "number or timestamp"),
        ("metadata.year", Operator.CONTAINS, "20", "operator", "text fields only"),
        ("source", Operator.IN, "x", "value", "list"),
        ("source", Operator.NOT_IN, [], "value", "at least one"),
        ("source", Operator.EQUALS, ["x"], "value", "single value"),
        ("source", Operator.CONTAINS, "", "value", "non-empty"),
        ("source", Operator.EQUALS, 3, "value", "string"),
        ("metadata.year", Operator.EQUALS, True, "value", "number"),
        ("metadata.year", Operator.EQUALS, float("nan"), "value", "finite"),
        ("metadata.ok", Operator.EQUALS, "true", "value", "true or false"),
        ("created_at", Operator.GREATER_THAN, "03/05/2024", "value", "ISO-8601"),
        ("created_at", Operator.GREATER_THAN, 1709600000, "value", "ISO-8601"),
        ("source", Operator.EQUALS, None, "value", "must be set"),
    ],
)
def test_invalid_conditions_name_the_bad_part(
    field: str, operator: Operator | None, value: RawValue, path: str, words: str
) -> None:
    where, description = _violation(field, operator, value)
    assert where == f"filter.groups[0].conditions[0].{path}"
    assert words in description


def test_list_items_are_named_by_index() -> None:
    where, _ = _violation("metadata.year", Operator.IN, [2024, "x"])
    assert where == "filter.groups[0].conditions[0].value[1]"


def test_empty_group_is_invalid() -> None:
    with pytest.raises(InvalidArgument) as caught:
        validate_filter(RawFilter(((),)), FIELDS)
    assert caught.value.violations[0].field == "filter.groups[0].conditions"


def _group(*names: str) -> FilterGroup:
    return FilterGroup(tuple(Condition(n, FieldType.STRING, Operator.EQUALS, n) for n in names))


def test_combine_filters_distributes_caller_and_over_model_or() -> None:
    caller = FilterExpression((_group("a"), _group("b")))
    model = FilterExpression((_group("x"), _group("y", "z")))
    combined = combine_filters(caller, model, max_groups=32)
    assert [[c.field for c in g.conditions] for g in combined.groups] == [
        ["a", "x"],
        ["a", "y", "z"],
        ["b", "x"],
        ["b", "y", "z"],
    ]


def test_combine_filters_with_an_empty_side_keeps_the_other() -> None:
    caller = FilterExpression((_group("a"),))
    assert combine_filters(caller, FilterExpression(), max_groups=32) == caller
    assert combine_filters(FilterExpression(), caller, max_groups=32) == caller
    assert combine_filters(FilterExpression(), FilterExpression(), max_groups=32).is_empty


@pytest.mark.parametrize(
    ("value", "sql"),
    [
        ("plain", "'plain'"),
        ("O'Brien", "'O''Brien'"),
        ("' OR 1=1 --", "''' OR 1=1 --'"),
        ("back\\slash", "'back\\slash'"),
        (True, "true"),
        (7, "7"),
        (2.5, "2.5"),
    ],
)
def test_literals_are_rendered_so_no_value_escapes_its_quotes(value: str, sql: str) -> None:
    assert literal(value) == sql


def test_like_patterns_escape_wildcards() -> None:
    assert like_pattern("50%_a\\b") == "%50\\%\\_a\\\\b%"


def test_compiled_filter_keeps_the_or_of_and_shape() -> None:
    expression = validate_filter(
        RawFilter(
            (
                (
                    RawCondition("source", Operator.EQUALS, "a') OR ('1'='1"),
                    RawCondition("metadata.year", Operator.NOT_IN, [1, 2]),
                ),
                (RawCondition("title", Operator.CONTAINS, "Wi_ld%"),),
            )
        ),
        FIELDS,
    )
    assert compile_filter(expression) == (
        "((`source` = 'a'') OR (''1''=''1' AND "
        "(`meta__year` IS NULL OR `meta__year` NOT IN (1, 2))) OR "
        "(lower(`title`) LIKE lower('%Wi\\_ld\\%%') ESCAPE '\\'))"
    )
