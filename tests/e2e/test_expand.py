"""Query expansion through the three real services, as separate processes
(`agent.loop.expand_queries` with `expand_route` on the fake OpenAI server, falling back to the
offline extractive provider): the agent's search also runs with the passage the route's model
wrote, and the stream shows it; when the model is down and the offline provider answers instead,
the search goes as asked and the run still answers; and when the search tool's bound on a query
(`limits.query_chars`, here 200) is below the agent's and refuses the passage's variation, the
search is sent again as asked."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from quarry.agent.v1 import agent_pb2

from services.agent.client import AgentClient, RunOptions
from services.agent.expand import EXPAND_SYSTEM
from services.llm_gateway.testing import Reply
from tests.e2e.conftest import COLLECTION, Stack, running_stack

pytestmark = pytest.mark.slow
QUESTION = "How can I get a scratch folder that cleans itself up?"
PASSAGE = "tempfile.TemporaryDirectory() creates a directory that is removed automatically."
SEARCH_TOOL_QUERY_CHARS = 200
"""Below the agent's `loop.max_query_chars` (4,000): the question and `PASSAGE` fit, a longer
passage does not."""


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    env = {
        "QUARRY_AGENT_LOOP__EXPAND_QUERIES": "true",
        "QUARRY_AGENT_LOOP__EXPAND_ROUTE": "openai-or-offline",
        "QUARRY_SEARCH_TOOL_LIMITS__QUERY_CHARS": str(SEARCH_TOOL_QUERY_CHARS),
    }
    with running_stack(tmp_path_factory.mktemp("e2e-expand"), env) as started:
        yield started


async def _run(stack: Stack) -> list[agent_pb2.StreamRunResponse]:
    options = RunOptions(collection=COLLECTION, mode="fast", route="agent", timeout_s=60)
    async with AgentClient(stack.agent) as client:
        return [event async for event in client.stream_run(QUESTION, options)]


def _searching(events: list[agent_pb2.StreamRunResponse]) -> agent_pb2.SearchingEvent:
    [searching] = [e.searching for e in events if e.WhichOneof("event") == "searching"]
    return searching


async def test_the_search_also_runs_with_the_passage_the_expand_route_wrote(stack: Stack) -> None:
    stack.openai.script.reset([Reply(text=PASSAGE)])
    before = len(stack.openai.requests)

    events = await _run(stack)

    searching = _searching(events)
    assert searching.expansion.passage == PASSAGE
    assert not searching.expansion.failed
    assert searching.expansion.duration_ms > 0
    assert list(searching.query.variations) == []  # the model's own variations, kept apart
    assert searching.result_count > 0
    [asked] = stack.openai.requests[before:]
    messages = asked.body["messages"]
    assert messages[0] == {"role": "system", "content": EXPAND_SYSTEM}
    assert messages[-1] == {"role": "user", "content": f"Query: {searching.query.primary}"}
    assert asked.body["temperature"] == 0
    assert "tools" not in asked.body
    results = events[-1].done.response.results
    assert results[0].chunk.id == "tempfile-tempdir__chunk_0"  # the passage's words found it


async def test_with_the_model_down_the_offline_fallback_writes_no_passage_and_the_run_answers(
    stack: Stack,
) -> None:
    stack.openai.script.reset(default=Reply.server_error(503))
    before = len(stack.openai.requests)

    events = await _run(stack)

    assert len(stack.openai.requests) == before + 1  # one try, then the extractive fallback
    searching = _searching(events)
    assert searching.expansion.failed
    assert searching.expansion.passage == ""
    assert searching.result_count > 0
    assert searching.error == ""
    assert events[-1].done.response.answer.text
    results = events[-1].done.response.results
    assert results[0].chunk.id != "tempfile-tempdir__chunk_0"  # the question's words alone


async def test_a_passage_the_search_tool_refuses_as_too_long_leaves_the_search_as_asked(
    stack: Stack,
) -> None:
    long_passage = " ".join([PASSAGE] * 3)
    assert len(QUESTION) + 1 + len(long_passage) > SEARCH_TOOL_QUERY_CHARS
    stack.openai.script.reset([Reply(text=long_passage)])

    events = await _run(stack)

    searching = _searching(events)
    assert searching.error == ""
    assert searching.expansion.failed
    assert searching.expansion.passage == long_passage  # written, and refused
    assert searching.result_count > 0
    assert events[-1].done.response.answer.text
    results = events[-1].done.response.results
    assert results[0].chunk.id != "tempfile-tempdir__chunk_0"  # the question's words alone
