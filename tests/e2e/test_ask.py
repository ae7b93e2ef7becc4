"""A streamed question through the three real services, as separate processes: once with the
offline extractive route, once with the openai and once with the anthropic provider (fake APIs)."""

from __future__ import annotations

import json

import pytest
from quarry.agent.v1 import agent_pb2

from services.agent.client import AgentClient, ModeName, RunOptions
from services.llm_gateway.testing import Reply, ScriptedToolCall
from tests.e2e.conftest import CHUNK_IDS, COLLECTION, GERMAN_COLLECTION, Stack, upsert

pytestmark = pytest.mark.slow
QUESTION = "How do I create a temporary directory that is removed automatically?"
CITED = "tempfile-tempdir__chunk_0"


def _kinds(events: list[agent_pb2.StreamRunResponse]) -> list[str]:
    return [str(e.WhichOneof("event")) for e in events]


async def _ask(
    stack: Stack, *, route: str, mode: ModeName = "fast"
) -> list[agent_pb2.StreamRunResponse]:
    async with AgentClient(stack.agent) as agent:
        return [
            e
            async for e in agent.stream_run(
                QUESTION, RunOptions(collection=COLLECTION, mode=mode, route=route, timeout_s=60)
            )
        ]


def _assert_answer_cites_real_results(
    events: list[agent_pb2.StreamRunResponse],
) -> agent_pb2.RunResponse:
    assert _kinds(events)[-1] == "done", events[-1]
    response = events[-1].done.response
    cited = [c.result_id for c in response.answer.citations]
    assert cited, response.answer.text
    assert set(cited) <= CHUNK_IDS
    assert set(cited) <= {r.chunk.id for r in response.results}
    assert all(c.title for c in response.answer.citations)
    return response


async def test_extractive_route_answers_with_citations_of_the_collection(stack: Stack) -> None:
    events = await _ask(stack, route="", mode="thinking")
    kinds = _kinds(events)
    assert kinds[0] == "started"
    assert "searching" in kinds
    assert events[0].started.route == "agent"
    searching = next(e.searching for e in events if e.WhichOneof("event") == "searching")
    assert searching.result_count > 0
    response = _assert_answer_cites_real_results(events)
    assert CITED in [c.result_id for c in response.answer.citations]
    assert response.stop_reason == agent_pb2.STOP_REASON_ANSWERED


def _script(search_id: str, answer_id: str) -> list[Reply]:
    search = {"query": {"primary": "temporary directory removed automatically"}, "limit": 5}
    answer = {
        "text": "Use tempfile.TemporaryDirectory(): the directory is removed automatically [1].",
        "citations": [{"result_id": CITED}],
    }
    return [
        Reply(
            text="I will search for temporary directories.",
            tool_calls=[ScriptedToolCall(search_id, "search", json.dumps(search))],
        ),
        Reply(tool_calls=[ScriptedToolCall(answer_id, "submit_answer", json.dumps(answer))]),
    ]


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_vendor_provider_runs_the_scripted_conversation(stack: Stack, provider: str) -> None:
    fake = stack.openai if provider == "openai" else stack.anthropic
    before = len(fake.requests)
    ids = ("call_search_1", "call_answer_1") if provider == "openai" else ("toolu_01", "toolu_02")
    fake.script.reset(_script(*ids))

    events = await _ask(stack, route=provider)

    assert _kinds(events) == ["started", "thinking", "searching", "done"]
    assert events[1].thinking.text == "I will search for temporary directories."
    assert events[2].searching.query.primary == "temporary directory removed automatically"
    response = _assert_answer_cites_real_results(events)
    assert [c.result_id for c in response.answer.citations] == [CITED]
    assert response.results[0].chunk.id == CITED
    assert response.answer.citations[0].url.endswith("tempfile-tempdir.html")
    requests = fake.requests[before:]
    assert len(requests) == 2
    second = json.dumps(requests[1].body)
    assert ids[0] in second
    assert "Found " in second


HANDBUCH = [
    ("haeuser", "Häuser", "Die Dächer der Häuser sind aus Schiefer. Die Stadt liegt im Norden."),
    ("bruecke", "Brücke", "Woraus die Brücke besteht, ist unklar. Die Brücke ist alt."),
]
GERMAN_QUESTION = "Woraus ist das Dach des Hauses?"
"""Its words meet the first document only as German stems (Dach / Dächer, Hauses / Häuser)."""


async def _ask_in(stack: Stack, collection: str) -> agent_pb2.RunResponse:
    upsert(stack.search_tool, collection, HANDBUCH, "handbuch")
    async with AgentClient(stack.agent) as agent:
        events = [
            e
            async for e in agent.stream_run(
                GERMAN_QUESTION, RunOptions(collection=collection, mode="fast", timeout_s=60)
            )
        ]
    assert _kinds(events)[-1] == "done", events[-1]
    return events[-1].done.response


async def test_the_offline_answer_in_a_german_collection_meets_its_question_in_german_stems(
    stack: Stack,
) -> None:
    """The collection's language travels from the search tool's setting through the agent's
    description of the collection to the extractive answer; an English collection holding the
    same documents answers from the other one."""
    german = await _ask_in(stack, GERMAN_COLLECTION)
    assert german.answer.text.startswith("Die Dächer der Häuser sind aus Schiefer. [1]")
    assert german.answer.citations[0].result_id == "haeuser__chunk_0"
    english = await _ask_in(stack, "e2e-handbook")
    assert "Schiefer" not in english.answer.text
    assert [c.result_id for c in english.answer.citations] == ["bruecke__chunk_0"]
