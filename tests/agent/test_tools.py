"""Tool schemas from the validating models, argument checks, Layer-1 formatting, filter merge."""

from __future__ import annotations

import json

import pytest

from services.agent.filters import FilterCondition, FilterGroup
from services.agent.search import SearchHit
from services.agent.tools import (
    Answer,
    SearchPlan,
    SearchTool,
    SubmitAnswerTool,
    ToolArgumentsError,
    parse_arguments,
)
from services.agent.tools.results import format_results

SEARCH_TOOL = SearchTool().spec
SUBMIT_ANSWER_TOOL = SubmitAnswerTool().spec


def test_tool_schemas_are_inlined_and_keep_integers() -> None:
    text = json.dumps(SEARCH_TOOL.parameters)
    assert "$ref" not in text
    assert "$defs" not in text
    limit = SEARCH_TOOL.parameters["properties"]["limit"]
    assert limit["type"] == "integer"
    assert (limit["minimum"], limit["maximum"]) == (1, 200)
    assert isinstance(limit["minimum"], int)
    condition = SEARCH_TOOL.parameters["properties"]["filter_groups"]["items"]["properties"][
        "conditions"
    ]["items"]
    assert condition["properties"]["operator"]["enum"][0] == "equals"
    assert SUBMIT_ANSWER_TOOL.parameters["required"] == ["text"]


def test_the_contract_example_arguments_validate() -> None:
    plan = parse_arguments(
        SearchPlan,
        '{"query": {"primary": "text", "variations": ["dense-only rephrasing"]},'
        ' "filter_groups": [{"conditions": [{"field": "source", "operator": "equals",'
        ' "value": "x"}]}], "limit": 10, "offset": 0, "retrieval_strategy": "hybrid"}',
    )
    assert plan.filter_groups[0].conditions[0].value == "x"
    answer = parse_arguments(
        Answer,
        '{"text": "answer text citing [1] ...", "citations": [{"result_id": "doc-7__chunk_0"}]}',
    )
    assert answer.citations[0].result_id == "doc-7__chunk_0"


@pytest.mark.parametrize(
    ("arguments", "mentions"),
    [
        ("", "query"),
        ("not json", "not valid JSON"),
        ('{"query": {"primary": ""}}', "query.primary"),
        ('{"query": {"primary": "q"}, "retrieval_strategy": "magic"}', "retrieval_strategy"),
        (
            '{"query": {"primary": "q", "variations": ["v","v","v","v","v","v","v","v","v","v"]}}',
            "variations",
        ),
        ('{"query": {"primary": "q"}, "filter_groups": [{"conditions": []}]}', "conditions"),
    ],
)
def test_invalid_search_arguments_explain_what_to_fix(arguments: str, mentions: str) -> None:
    with pytest.raises(ToolArgumentsError) as caught:
        parse_arguments(SearchPlan, arguments)
    assert mentions in str(caught.value)


def _hit(n: int, chars: int) -> SearchHit:
    return SearchHit(
        id=f"d{n}__chunk_0", document_id=f"d{n}", title=f"T{n}", text="t" * chars, score=1 - n / 10
    )


def test_results_are_formatted_per_the_contract() -> None:
    formatted = format_results([_hit(0, 5)], 7, max_chars=10_000)
    assert formatted.text == (
        "Found 7 results; showing 1.\n\n### [d0__chunk_0] T0\n"
        "source:  | entity_type:  | score: 1.0000 | url: \nttttt\n"
    )


def test_budget_drops_lowest_ranked_results_whole_never_cutting_one() -> None:
    hits = [_hit(n, 1_000) for n in range(5)]
    formatted = format_results(hits, 5, max_chars=3_300)
    assert [h.id for h in formatted.shown] == ["d0__chunk_0", "d1__chunk_0", "d2__chunk_0"]
    assert formatted.text.startswith("Found 5 results; showing 3.")
    assert formatted.text.count("t" * 1_000) == 3
    assert len(formatted.text) <= 3_300


def test_a_result_too_large_for_the_budget_is_not_shown_at_all() -> None:
    formatted = format_results([_hit(0, 5_000), _hit(1, 10)], 2, max_chars=1_000)
    assert formatted.shown == []
    assert "showing 0" in formatted.text


def _group(*values: str) -> FilterGroup:
    return FilterGroup(
        conditions=[FilterCondition(field="source", operator="equals", value=v) for v in values]
    )
