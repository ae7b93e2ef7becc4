"""The agent's tools through the three real services, the model scripted on the fake OpenAI
server: what each tool returns to the model, the events a caller sees, and the allowlist."""

from __future__ import annotations

import json
from typing import Any

import grpc
import pytest
from quarry.agent.v1 import agent_pb2
from quarry.llmgateway.v1 import llm_gateway_pb2, llm_gateway_pb2_grpc

from services.agent.client import AgentClient, RunOptions
from services.agent.tools import TOOL_NAMES
from services.llm_gateway.testing import Reply, ScriptedError, ScriptedToolCall
from tests.e2e.conftest import COLLECTION, Stack

pytestmark = pytest.mark.slow
QUESTION = "By how much does 1250 exceed 980, in percent?"


def _call(call_id: str, name: str, arguments: dict[str, Any] | str) -> ScriptedToolCall:
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return ScriptedToolCall(call_id, name, text)


def _answer(call_id: str, text: str, citations: list[str] | None = None) -> Reply:
    cited = [{"result_id": c} for c in citations or []]
    return Reply(tool_calls=[_call(call_id, "submit_answer", {"text": text, "citations": cited})])


async def _stream(stack: Stack, options: RunOptions) -> list[agent_pb2.StreamRunResponse]:
    async with AgentClient(stack.agent) as agent:
        return [event async for event in agent.stream_run(QUESTION, options)]


def _tool_messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [m for m in body["messages"] if m["role"] == "tool"]


async def test_calculate_answers_the_model_and_streams_a_calculating_event(stack: Stack) -> None:
    stack.openai.script.reset(
        [
            Reply(
                text="Compute the change.",
                tool_calls=[_call("c1", "calculate", {"expression": "(1250 - 980) / 980 * 100"})],
            ),
            Reply(tool_calls=[_call("c2", "calculate", {"expression": "1 / 0"})]),
            _answer("c3", "27.55 % more."),
        ]
    )
    before = len(stack.openai.requests)
    events = await _stream(
        stack,
        RunOptions(collection=COLLECTION, mode="thinking", route="openai", timeout_s=60),
    )

    calculations = [e.calculating for e in events if e.WhichOneof("event") == "calculating"]
    assert [(c.expression, c.result, c.error) for c in calculations] == [
        ("(1250 - 980) / 980 * 100", "27.5510204082", ""),
        ("1 / 0", "", "division by zero"),
    ]
    sent = stack.openai.requests[before:]
    assert [t["function"]["name"] for t in sent[0].body["tools"]] == list(TOOL_NAMES)
    assert _tool_messages(sent[1].body)[0]["content"] == "(1250 - 980) / 980 * 100 = 27.5510204082"
    assert "division by zero" in _tool_messages(sent[2].body)[1]["content"]
    assert events[-1].done.response.answer.text == "27.55 % more."


async def test_the_allowlist_limits_the_tools_and_refuses_others_back_to_the_model(
    stack: Stack,
) -> None:
    stack.openai.script.reset(
        [
            Reply(tool_calls=[_call("c1", "calculate", {"expression": "2 + 2"})]),
            _answer("c2", "I cannot calculate here."),
        ]
    )
    before = len(stack.openai.requests)
    events = await _stream(
        stack,
        RunOptions(
            collection=COLLECTION,
            mode="thinking",
            route="openai",
            timeout_s=60,
            tools=["search"],
        ),
    )

    sent = stack.openai.requests[before:]
    assert [t["function"]["name"] for t in sent[0].body["tools"]] == ["search", "submit_answer"]
    system = sent[0].body["messages"][0]["content"]
    assert "calculate" not in system
    assert _tool_messages(sent[1].body)[0]["content"] == (
        "The tool 'calculate' is not available in this run. The tools are search, submit_answer."
    )
    assert not [e for e in events if e.WhichOneof("event") == "calculating"]
    assert events[-1].WhichOneof("event") == "done"


async def test_read_returns_the_document_of_a_seen_result_within_the_caller_filter(
    stack: Stack,
) -> None:
    search = {"query": {"primary": "temporary directory removed automatically"}, "limit": 1}
    stack.openai.script.reset(
        [
            Reply(tool_calls=[_call("c1", "search", search)]),
            Reply(
                tool_calls=[
                    _call("c2", "read", {"result_id": "tempfile-tempdir__chunk_0"}),
                    _call("c3", "read", {"result_id": "shutil-rmtree__chunk_0"}),
                ]
            ),
            _answer("c4", "TemporaryDirectory [1].", ["tempfile-tempdir__chunk_0"]),
        ]
    )
    before = len(stack.openai.requests)
    events = await _stream(
        stack,
        RunOptions(collection=COLLECTION, mode="thinking", route="openai", timeout_s=60),
    )

    reads = [e.reading for e in events if e.WhichOneof("event") == "reading"]
    assert [(r.document_id, r.first_chunk, r.chunks_shown, r.chunk_count) for r in reads] == [
        ("tempfile-tempdir", 0, 1, 1),
        ("", 0, 0, 0),  # the unseen id: its event carries the error the model read
    ]
    assert reads[1].error.startswith("'shutil-rmtree__chunk_0' is not a result you have seen")
    results = _tool_messages(stack.openai.requests[before:][2].body)
    assert results[1]["content"].startswith("Read tempfile-tempdir: chunks 0-0 of 1.")
    assert "### [tempfile-tempdir__chunk_0] tempfile.TemporaryDirectory" in results[1]["content"]
    assert "'shutil-rmtree__chunk_0' is not a result you have seen" in results[2]["content"]
    assert events[-1].done.response.answer.citations[0].result_id == "tempfile-tempdir__chunk_0"


async def test_count_answers_how_many_through_the_real_search_tool(stack: Stack) -> None:
    tempfile = [{"conditions": [{"field": "title", "operator": "contains", "value": "tempfile"}]}]
    stack.openai.script.reset(
        [
            Reply(
                tool_calls=[
                    _call("c1", "count", {"filter_groups": tempfile, "group_by": ["source"]}),
                    _call("c2", "count", {"group_by": ["colour"]}),
                ]
            ),
            _answer("c3", "Two tempfile documents."),
        ]
    )
    before = len(stack.openai.requests)
    events = await _stream(
        stack,
        RunOptions(collection=COLLECTION, mode="thinking", route="openai", timeout_s=60),
    )

    counts = [e.counting for e in events if e.WhichOneof("event") == "counting"]
    assert [(c.document_count, list(c.group_by), c.exact) for c in counts] == [
        (2, ["source"], True),
        (0, ["colour"], False),  # refused: its event carries the error the model read
    ]
    assert "group_by[0]: cannot group by 'colour'" in counts[1].error
    results = _tool_messages(stack.openai.requests[before:][1].body)
    assert results[0]["content"] == (
        "Counted 2 documents (2 chunks) matching the filter.\n"
        "\n### Documents by source\npython-docs: 2\n"
    )
    assert "group_by[0]: cannot group by 'colour'" in results[1]["content"]
    assert events[-1].done.response.usage.searches == 0


async def test_a_fallback_to_the_offline_provider_is_named_on_the_answer(stack: Stack) -> None:
    down = Reply(error=ScriptedError(status=500, message="vendor down"))
    stack.openai.script.reset([], default=down)
    events = await _stream(
        stack,
        RunOptions(collection=COLLECTION, mode="thinking", route="openai-or-offline", timeout_s=60),
    )
    stack.openai.script.reset()

    final = events[-1].done.response.answered_by
    assert (final.provider, final.fallback) == ("extractive", True)
    assert final.fallback_reason.startswith("openai/gpt-fake: retryable error")


async def test_thinking_events_name_their_provider_and_the_answer_names_the_runs_fallback(
    stack: Stack,
) -> None:
    stack.openai.script.reset(
        [
            Reply(error=ScriptedError(status=500, message="vendor down")),
            Reply(text="The results answer it.", tool_calls=[_answer("c2", "Done.").tool_calls[0]]),
        ]
    )
    events = await _stream(
        stack,
        RunOptions(collection=COLLECTION, mode="thinking", route="openai-or-offline", timeout_s=60),
    )

    [thinking] = [e.thinking for e in events if e.WhichOneof("event") == "thinking"]
    assert thinking.text == "The results answer it."
    by = thinking.answered_by
    assert (by.provider, by.model, by.fallback) == ("openai/gpt-fake", "gpt-fake", False)
    final = events[-1].done.response.answered_by
    assert (final.provider, final.fallback) == ("openai/gpt-fake", True)
    assert final.fallback_reason.startswith("openai/gpt-fake: retryable error")
    assert events[-1].done.response.usage.searches == 1


async def test_a_model_writing_tool_calls_as_json_text_searches_and_hears_of_its_broken_call(
    stack: Stack,
) -> None:
    search = {"tool": "search", "arguments": {"query": {"primary": "temporary directory"}}}
    answer = {
        "tool": "submit_answer",
        "arguments": {
            "text": "Use TemporaryDirectory [1].",
            "citations": [{"result_id": "tempfile-tempdir__chunk_0"}],
        },
    }
    stack.openai.script.reset(
        [
            Reply(text="I will search.\n```json\n" + json.dumps(search) + "\n```"),
            Reply(text='{"tool": "search", "arguments": {"query": {"primary": '),
            Reply(text=json.dumps(answer)),
        ]
    )
    before = len(stack.openai.requests)
    events = await _stream(
        stack,
        RunOptions(collection=COLLECTION, mode="thinking", route="openai-text", timeout_s=60),
    )

    sent = stack.openai.requests[before:]
    assert all("tools" not in r.body for r in sent)
    searching = [e.searching for e in events if e.WhichOneof("event") == "searching"]
    assert [(s.query.primary, bool(s.error)) for s in searching] == [
        ("temporary directory", False),
        ("", True),  # the broken call: its event carries the error the model read
    ]
    assert searching[1].error.startswith("The arguments are not valid JSON")
    broken = sent[2].body["messages"][-2]["content"]  # the last is the turn's directive
    assert broken.startswith("Tool result (error) for call")
    assert "The arguments are not valid JSON" in broken
    response = events[-1].done.response
    assert response.answer.citations[0].result_id == "tempfile-tempdir__chunk_0"
    assert response.answered_by.provider == "openai/gpt-text"


async def test_offline_thinking_reads_after_a_rich_first_search_while_fast_searches_once(
    stack: Stack,
) -> None:
    """THINKING searches again only after a thin first search (fewer than 3 results); this one
    finds plenty, so it reads around the best result instead."""
    question = "How do I create a temporary directory that is removed automatically?"
    async with AgentClient(stack.agent) as agent:
        runs = {
            mode: [
                e
                async for e in agent.stream_run(
                    question, RunOptions(collection=COLLECTION, mode=mode, timeout_s=60)
                )
            ]
            for mode in ("fast", "thinking")
        }

    def kinds(mode: str) -> list[str]:
        return [
            str(e.WhichOneof("event"))
            for e in runs[mode]
            if e.WhichOneof("event") in ("searching", "reading")
        ]

    assert kinds("fast") == ["searching"]
    assert kinds("thinking") == ["searching", "reading"]
    thinking = [e.thinking for e in runs["thinking"] if e.WhichOneof("event") == "thinking"]
    assert thinking[0].text.startswith("Reading the passage around the best result")
    assert {t.answered_by.provider for t in thinking} == {"extractive"}
    for mode in ("fast", "thinking"):
        answer = runs[mode][-1].done.response.answer
        assert answer.citations
        assert "TemporaryDirectory" in answer.text


async def test_the_offline_route_asked_hello_says_what_it_is(stack: Stack) -> None:
    async with grpc.aio.insecure_channel(stack.gateway) as channel:
        stub = llm_gateway_pb2_grpc.LlmGatewayServiceStub(channel)
        reply = await stub.Generate(
            llm_gateway_pb2.GenerateRequest(
                route="agent",
                messages=[llm_gateway_pb2.Message(role=llm_gateway_pb2.ROLE_USER, text="hello")],
            ),
            timeout=30,
        )
    assert reply.provider == "extractive"
    assert reply.message.text.startswith("This is Quarry's offline extractive model")
    assert "could not find" not in reply.message.text
