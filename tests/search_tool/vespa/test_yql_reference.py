"""The shared filter table through the YQL compiler, the subset parser and the reference evaluator
(L2: Vespa's documented semantics, real RE2). It proves the compiler plus our model of Vespa give
exactly the engine-independent semantics; the live suite checks the model against Vespa."""

from __future__ import annotations

import pytest

from services.search_tool.engine.vespa.yql import compile_filter, where
from services.search_tool.filters import (
    FilterExpression,
    Operator,
    RawCondition,
    RawFilter,
    combine_filters,
    validate_filter,
)
from tests.search_tool.filter_cases import CASES, FilterCase
from tests.search_tool.vespa.conftest import fixture_documents, fixture_fields
from tests.search_tool.vespa.yql_reference import evaluate, parse_expression, parse_query

DOCUMENTS = fixture_documents()


def _filter(*groups: list[RawCondition]) -> FilterExpression:
    return validate_filter(RawFilter(tuple(tuple(g) for g in groups)), fixture_fields())


def _matching(expression: FilterExpression) -> set[str]:
    query = parse_query(f"select chunk_json from chunk where {where('fixture', expression)}")
    return {doc_id for doc_id, document in DOCUMENTS.items() if evaluate(query.where, document)}


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_filter_case_selects_exactly_the_expected_documents_under_vespa_semantics(
    case: FilterCase,
) -> None:
    expression = _filter([RawCondition(case.field, case.operator, case.value)])
    assert _matching(expression) == set(case.expected)


def test_groups_are_or_of_and_and_negation_only_groups_stay_valid_or_operands() -> None:
    expression = _filter(
        [
            RawCondition("source", Operator.EQUALS, "confluence"),
            RawCondition("metadata.draft", Operator.EQUALS, True),
        ],
        [RawCondition("source", Operator.NOT_IN, ["confluence", "github", "gdrive"])],
    )
    compiled = compile_filter(expression)
    assert " or (true and !(" in compiled
    assert _matching(expression) == {"beta", "epsilon"}


def test_caller_and_model_filters_combined_only_narrow() -> None:
    caller = _filter([RawCondition("source", Operator.EQUALS, "confluence")])
    model = _filter(
        [RawCondition("metadata.year", Operator.EQUALS, 2024)],
        [RawCondition("source", Operator.EQUALS, "github")],
    )
    assert _matching(combine_filters(caller, model, max_groups=32)) == {"beta"}


def test_a_document_of_another_collection_never_matches() -> None:
    other = dict(DOCUMENTS["alpha"], collection="other")
    node = parse_expression(where("fixture", FilterExpression()))
    assert evaluate(node, DOCUMENTS["alpha"])
    assert not evaluate(node, other)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (RawCondition("source", Operator.EQUALS, ""), set()),
        (RawCondition("url", Operator.EQUALS, ""), {"delta", "epsilon"}),
        (RawCondition("url", Operator.NOT_EQUALS, ""), {"alpha", "beta", "gamma"}),
        (RawCondition("url", Operator.IN, ["", "x"]), {"delta", "epsilon"}),
        (RawCondition("metadata.year", Operator.EQUALS, 2022.5), set()),
        (RawCondition("metadata.year", Operator.NOT_IN, [2022.5]), set(DOCUMENTS)),
        (
            RawCondition("metadata.year", Operator.LESS_THAN, 1e30),
            {"alpha", "beta", "gamma", "delta"},
        ),
        (RawCondition("chunk_index", Operator.GREATER_THAN, -1e30), set(DOCUMENTS)),
        (RawCondition("metadata.score", Operator.IN, [3, 5]), {"beta", "delta"}),
        (RawCondition("metadata.team", Operator.CONTAINS, "' or ''"), {"epsilon"}),
    ],
    ids=lambda v: repr(v) if not isinstance(v, set) else "",
)
def test_edge_values_keep_the_embedded_engines_semantics(
    raw: RawCondition, expected: set[str]
) -> None:
    """Empty strings equal unset strings (the embedded engine stores "" for both), fractional and
    out-of-range numbers against integer fields, `in` on doubles (not a YQL `in`)."""
    assert _matching(_filter([raw])) == expected
