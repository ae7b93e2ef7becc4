"""The caller's filter through the three real services: refused before any model call when the
search tool refuses it, and never left by the model's searches when it holds."""

from __future__ import annotations

import json

import pytest

from services.agent.client import AgentClient, RunOptions, parse_filter
from services.common.errors import InvalidArgument
from services.llm_gateway.testing import Reply, ScriptedToolCall
from tests.e2e.conftest import COLLECTION, Stack

pytestmark = pytest.mark.slow
QUESTION = "How do I create a temporary directory that is removed automatically?"


async def test_a_caller_filter_the_search_tool_refuses_is_invalid_argument_naming_it(
    stack: Stack,
) -> None:
    bad = parse_filter(
        '[{"conditions": [{"field": "title", "operator": "greater_than", "value": "a"}]}]'
    )
    before = len(stack.openai.requests)
    async with AgentClient(stack.agent) as agent:
        with pytest.raises(InvalidArgument) as caught:
            await agent.run(
                QUESTION,
                RunOptions(collection=COLLECTION, filter=bad, route="openai", timeout_s=60),
            )
    assert caught.value.code == "INVALID_ARGUMENT"
    assert [v.field for v in caught.value.violations] == ["filter.groups[0].conditions[0].operator"]
    assert len(stack.openai.requests) == before


async def test_results_stay_inside_the_caller_filter_whatever_the_model_searches(
    stack: Stack,
) -> None:
    only_mkdtemp = parse_filter(
        '[{"conditions": [{"field": "title", "operator": "contains", "value": "mkdtemp"}]}]'
    )
    widen = {
        "query": {"primary": "directory"},
        "filter_groups": [
            {"conditions": [{"field": "title", "operator": "contains", "value": "shutil"}]},
            {"conditions": [{"field": "source", "operator": "not_equals", "value": "x"}]},
        ],
        "limit": 20,
    }
    stack.openai.script.reset(
        [
            Reply(tool_calls=[ScriptedToolCall("c1", "search", json.dumps(widen))]),
            Reply(
                tool_calls=[
                    ScriptedToolCall("c2", "submit_answer", json.dumps({"text": "mkdtemp"}))
                ]
            ),
        ]
    )
    async with AgentClient(stack.agent) as agent:
        response = await agent.run(
            QUESTION,
            RunOptions(
                collection=COLLECTION,
                filter=only_mkdtemp,
                mode="thinking",
                route="openai",
                timeout_s=60,
            ),
        )
    assert response.usage.searches == 1
    assert {r.chunk.document_id for r in response.results} == {"tempfile-mkdtemp"}
