"""YQL compilation (L1): golden `where` clauses for every case of the shared filter table, and
hostile values that must stay values (parsed back by the subset parser, not by the compiler)."""

from __future__ import annotations

import pytest
import re2
from hypothesis import given
from hypothesis import strategies as st

from services.search_tool.engine.vespa.yql import compile_filter, string, substring_pattern, where
from services.search_tool.filters import (
    FilterExpression,
    Operator,
    RawCondition,
    RawFilter,
    validate_filter,
)
from tests.search_tool.filter_cases import CASES, FilterCase
from tests.search_tool.vespa.conftest import fixture_fields
from tests.search_tool.vespa.yql_reference import (
    Compare,
    SameElement,
    parse_expression,
    string_literals,
    unquote,
)

GOLDEN = {
    "source equals 'confluence'": '(source contains "confluence")',
    "source not_equals 'confluence'": '(true and !(source contains "confluence"))',
    "entity_type equals 'PAGE'": '(entity_type contains "PAGE")',
    "title contains 'REPORT'": '(title_attr matches "(?i)REPORT")',
    'title contains "o\'brien"': '(title_attr matches "(?i)o\\\\\'brien")',
    "text contains 'c:\\\\temp'": '(text_attr matches "(?i)c\\\\:\\\\\\\\temp")',
    "id in ['alpha__chunk_0', 'delta__chunk_0']": (
        '(chunk_id in ("alpha__chunk_0", "delta__chunk_0"))'
    ),
    "chunk_index greater_than 0": "(chunk_index > 0)",
    "created_at less_than_or_equal '2024-03-05T13:00:00+01:00'": (
        "(created_at <= 1709640000000000L)"
    ),
    "breadcrumbs in ['Onboarding', 'sp-eng']": '(breadcrumb_terms in ("Onboarding", "sp-eng"))',
    "breadcrumbs contains 'people ops > onb'": (
        '(breadcrumb_path matches "(?i)people\\\\ ops\\\\ \\\\>\\\\ onb")'
    ),
    "metadata.year greater_than 2022.5": (
        '(meta_long contains sameElement(key contains "year", value > 2022L))'
    ),
    "metadata.year not_in [2022, 2023]": (
        '(true and !((meta_long contains sameElement(key contains "year", value = 2022L)'
        ' or meta_long contains sameElement(key contains "year", value = 2023L))))'
    ),
    "metadata.score equals 3": (
        '(meta_double contains sameElement(key contains "score", value = 3.0))'
    ),
    "metadata.draft not_equals True": (
        '(true and !(meta_bool contains sameElement(key contains "draft", value = true)))'
    ),
    "metadata.team contains 'eng'": (
        '(meta_str contains sameElement(key contains "team", value matches "(?i)eng"))'
    ),
    "metadata.team in [\"x') OR (1=1\", 'Finance']": (
        '((meta_str contains sameElement(key contains "team", value contains "x\') OR (1=1")'
        ' or meta_str contains sameElement(key contains "team", value contains "Finance")))'
    ),
}


def _compiled(field: str, operator: Operator, value: object) -> str:
    raw = RawFilter(((RawCondition(field, operator, value),),))  # type: ignore[arg-type]
    return compile_filter(validate_filter(raw, fixture_fields()))


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_every_filter_case_compiles_to_yql_that_parses(case: FilterCase) -> None:
    compiled = _compiled(case.field, case.operator, case.value)
    parse_expression(compiled)
    if case.name in GOLDEN:
        assert compiled == GOLDEN[case.name]


def test_golden_table_names_real_cases() -> None:
    assert set(GOLDEN) <= {c.name for c in CASES}


def test_an_empty_filter_selects_the_collection_only() -> None:
    assert where("fixture", FilterExpression()) == 'collection contains "fixture"'


HOSTILE = [
    '" or true or "',
    '\\" or true or \\"',
    "' OR 1=1 --",
    "a\nb\r\tc\x00\x1f\x7f",
    "\\",
    '"',
    "ÆØÅ æøå ß İ",
    "%_*+?.()[]{}|^$",
    "\\u0022",
    "@p",
    'sameElement(key contains "x")',
]


@pytest.mark.parametrize("value", HOSTILE)
def test_a_hostile_equality_value_stays_one_string_literal(value: str) -> None:
    node = parse_expression(_compiled("source", Operator.EQUALS, value))
    assert node == Compare("source", "contains", value)


@pytest.mark.parametrize("value", HOSTILE)
def test_a_hostile_contains_value_becomes_a_literal_substring_pattern(value: str) -> None:
    node = parse_expression(_compiled("text", Operator.CONTAINS, value))
    assert isinstance(node, Compare)
    assert node.op == "matches"
    assert node.value == substring_pattern(value)
    assert re2.search(node.value, "before " + value + " after")
    assert not re2.search(node.value, "before after")


@pytest.mark.parametrize("value", HOSTILE)
def test_a_hostile_metadata_value_stays_inside_its_same_element(value: str) -> None:
    node = parse_expression(_compiled("metadata.team", Operator.NOT_IN, [value, "x"]))
    assert string_literals(node) == ["team", value, "team", "x"]


@given(st.text())
def test_any_text_round_trips_through_a_yql_string_literal(value: str) -> None:
    assert unquote(string(value)) == value


@given(st.text(min_size=1), st.text(), st.text())
def test_a_contains_pattern_finds_the_value_in_any_haystack_ignoring_case(
    value: str, before: str, after: str
) -> None:
    node = parse_expression(_compiled("title", Operator.CONTAINS, value))
    assert isinstance(node, Compare)
    assert re2.search(node.value, before + value + after)
    if value.isascii():  # ASCII case folding is unambiguous; Unicode folding is RE2's own
        assert re2.search(node.value, before + value.swapcase() + after)


@given(st.lists(st.text(), min_size=1, max_size=4))
def test_breadcrumb_in_lists_keep_every_value(values: list[str]) -> None:
    node = parse_expression(_compiled("breadcrumbs", Operator.IN, values))
    assert node == Compare("breadcrumb_terms", "in", tuple(values))
    assert not isinstance(node, SameElement)
