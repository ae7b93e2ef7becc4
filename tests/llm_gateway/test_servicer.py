"""The gateway through gRPC: offline default route, request validation, status mapping."""

from __future__ import annotations

import json
from collections.abc import AsyncIterable
from pathlib import Path

import grpc
import pytest
from quarry.llmgateway.v1 import llm_gateway_pb2 as pb

from services.common.status import details_of_rpc_error
from services.llm_gateway.config import ProviderSettings
from tests.llm_gateway.gateway_fixtures import (
    agent_question,
    agent_tools,
    gateway_settings,
    running_gateway,
    scripted_entry,
    search_result,
    user,
)


async def test_default_route_without_keys_answers_with_a_search_call_from_extractive() -> None:
    async with running_gateway(gateway_settings()) as stub:
        response = await stub.Generate(
            pb.GenerateRequest(
                messages=[user(agent_question("Who founded the Royal Society?"))],
                tools=agent_tools(),
            )
        )
    assert response.provider == "extractive"
    assert response.model == "extractive-v1"
    assert response.stop_reason == pb.STOP_REASON_TOOL_USE
    (call,) = response.message.tool_calls
    assert call.name == "search"
    assert json.loads(call.arguments_json)["query"]["primary"] == "Who founded the Royal Society?"
    assert [a.outcome for a in response.attempts] == [pb.ATTEMPT_OUTCOME_SUCCESS]
    assert response.usage.input_tokens > 0


async def test_stream_generate_sends_tool_call_deltas_then_the_completed_message() -> None:
    question = agent_question("When was the Royal Society founded?")
    passages = search_result(
        [("doc-1__chunk_0", "Royal Society", "The Royal Society was founded in 1660 in London.")]
    )
    messages = [
        user(question),
        pb.Message(
            role=pb.ROLE_ASSISTANT,
            tool_calls=[pb.ToolCall(id="c1", name="search", arguments_json="{}")],
        ),
        pb.Message(role=pb.ROLE_TOOL, tool_call_id="c1", text=passages),
    ]
    async with running_gateway(gateway_settings()) as stub:
        events = [
            event
            async for event in stub.StreamGenerate(
                pb.StreamGenerateRequest(messages=messages, tools=agent_tools())
            )
        ]
    deltas = [e.tool_call_delta for e in events if e.HasField("tool_call_delta")]
    completed = events[-1].completed
    assert events[-1].HasField("completed")
    assert deltas[0].name == "submit_answer"
    assert (
        "".join(d.arguments_delta for d in deltas) == completed.message.tool_calls[0].arguments_json
    )
    answer = json.loads(completed.message.tool_calls[0].arguments_json)
    assert "1660" in answer["text"]
    assert answer["citations"] == [{"result_id": "doc-1__chunk_0"}]


async def test_unknown_route_is_not_found() -> None:
    async with running_gateway(gateway_settings()) as stub:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.Generate(pb.GenerateRequest(route="nope", messages=[user("hi")]))
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND
    assert "nope" in (caught.value.details() or "")


@pytest.mark.parametrize(
    ("request_message", "field"),
    [
        (pb.GenerateRequest(), "messages"),
        (
            pb.GenerateRequest(
                messages=[
                    user("q"),
                    pb.Message(role=pb.ROLE_ASSISTANT, text="thinking"),
                    user("more"),
                    pb.Message(role=pb.ROLE_TOOL, tool_call_id="missing", text="result"),
                ]
            ),
            "messages[3].tool_call_id",
        ),
        (
            pb.GenerateRequest(
                messages=[user("q")],
                tools=[pb.Tool(name="search", parameters_json="{not json")],
            ),
            "tools[0].parameters_json",
        ),
        (
            pb.GenerateRequest(
                messages=[user("q")],
                tools=[pb.Tool(name="search", parameters_json='{"type": "wrong-type"}')],
            ),
            "tools[0].parameters_json",
        ),
        (
            pb.GenerateRequest(messages=[pb.Message(role=pb.ROLE_UNSPECIFIED, text="x")]),
            "messages[0].role",
        ),
        (
            pb.GenerateRequest(
                messages=[user("q")],
                tool_choice=pb.ToolChoice(mode=pb.TOOL_CHOICE_MODE_NAMED, name="absent"),
            ),
            "tool_choice.name",
        ),
    ],
)
async def test_caller_mistakes_are_invalid_argument_naming_the_field(
    request_message: pb.GenerateRequest, field: str
) -> None:
    async with running_gateway(gateway_settings()) as stub:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.Generate(request_message)
    details = details_of_rpc_error(caught.value)
    assert details.code == grpc.StatusCode.INVALID_ARGUMENT
    assert [v.field for v in details.violations] == [field]


async def test_invalid_json_schema_for_structured_output_names_schema_json() -> None:
    async with running_gateway(gateway_settings()) as stub:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.GenerateStructured(
                pb.GenerateStructuredRequest(
                    messages=[user("summarise")],
                    schema_json='{"type": "object", "properties": {"a": {"type": 5}}}',
                )
            )
    details = details_of_rpc_error(caught.value)
    assert details.code == grpc.StatusCode.INVALID_ARGUMENT
    assert [v.field for v in details.violations] == ["schema_json"]


def _scripted(tmp_path: Path, name: str, script: str) -> ProviderSettings:
    path = tmp_path / f"{name}.yaml"
    path.write_text(script)
    return scripted_entry(str(path), name=name, retry={"max_attempts": 1})


async def test_every_provider_failing_is_unavailable_with_the_attempts(tmp_path: Path) -> None:
    providers = [
        _scripted(
            tmp_path,
            "a",
            "replies:\n  - error: {status: 503, message: upstream 503}\n  - text: late\n",
        ),
        _scripted(
            tmp_path,
            "b",
            "replies:\n  - {fault: unauthorized, message: 401 invalid key}\n  - text: late\n",
        ),
    ]
    settings = gateway_settings(providers, {"agent": ["a", "b"]})
    async with running_gateway(settings) as stub:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.Generate(pb.GenerateRequest(messages=[user("hi")]))
    details = details_of_rpc_error(caught.value)
    assert details.code == grpc.StatusCode.UNAVAILABLE
    assert details.reason == "ALL_PROVIDERS_FAILED"
    attempts = json.loads(details.metadata["attempts"])
    assert [(a["provider"], a["outcome"]) for a in attempts] == [
        ("a", "retryable_error"),
        ("b", "fatal_error"),
    ]
    assert "upstream 503" in attempts[0]["error"]


async def test_rate_limited_everywhere_is_resource_exhausted_with_retry_info(
    tmp_path: Path,
) -> None:
    providers = [
        _scripted(tmp_path, "a", "replies: [{fault: rate_limited, retry_after: '7'}, {text: x}]\n"),
        _scripted(tmp_path, "b", "replies: [{fault: rate_limited, retry_after: '3'}, {text: x}]\n"),
    ]
    settings = gateway_settings(providers, {"agent": ["a", "b"]})
    async with running_gateway(settings) as stub:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.Generate(pb.GenerateRequest(messages=[user("hi")]))
    details = details_of_rpc_error(caught.value)
    assert details.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert details.retry_after_s == 3


async def test_context_overflow_is_invalid_argument_with_the_window_for_compaction(
    tmp_path: Path,
) -> None:
    providers = [
        _scripted(
            tmp_path,
            "a",
            "replies: [{fault: context_overflow, message: prompt is too long}, {text: x}]\n",
        ),
    ]
    providers[0].context_window_tokens = 32_000
    settings = gateway_settings(providers, {"agent": ["a", "extractive"]})
    async with running_gateway(settings) as stub:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.StreamGenerate(pb.StreamGenerateRequest(messages=[user("hi")])).read()
    details = details_of_rpc_error(caught.value)
    assert details.code == grpc.StatusCode.INVALID_ARGUMENT
    assert details.reason == "CONTEXT_WINDOW_EXCEEDED"
    assert details.metadata["provider"] == "a"
    assert details.metadata["context_window_tokens"] == "32000"


async def test_a_reply_stopped_at_the_window_is_the_same_overflow_status_as_an_overflow_error(
    tmp_path: Path,
) -> None:
    """Overflow has one signal: a provider that stops mid-reply at its window (Anthropic's
    `model_context_window_exceeded`) gives the caller CONTEXT_WINDOW_EXCEEDED as its overflow
    error does, unary and streamed (after deltas too), and no fallback is tried."""
    providers = [
        _scripted(
            tmp_path,
            "a",
            "default: {text: partial answer, stop_reason: model_context_window_exceeded}\n",
        ),
    ]
    providers[0].context_window_tokens = 32_000
    settings = gateway_settings(providers, {"agent": ["a", "extractive"]})
    async with running_gateway(settings) as stub:
        with pytest.raises(grpc.aio.AioRpcError) as unary:
            await stub.Generate(pb.GenerateRequest(messages=[user("hi")]))
        deltas: list[pb.StreamGenerateResponse] = []
        with pytest.raises(grpc.aio.AioRpcError) as streamed:
            await _drain(
                stub.StreamGenerate(pb.StreamGenerateRequest(messages=[user("hi")])), deltas
            )
    for caught in (unary.value, streamed.value):
        details = details_of_rpc_error(caught)
        assert details.code == grpc.StatusCode.INVALID_ARGUMENT
        assert details.reason == "CONTEXT_WINDOW_EXCEEDED"
        assert details.metadata["provider"] == "a"
        assert details.metadata["context_window_tokens"] == "32000"
    assert [d.WhichOneof("event") for d in deltas] == ["text_delta"] * len(deltas)
    assert deltas


async def _drain(
    stream: AsyncIterable[pb.StreamGenerateResponse], into: list[pb.StreamGenerateResponse]
) -> None:
    async for event in stream:
        into.append(event)


async def test_a_fallback_answer_lists_every_attempt(tmp_path: Path) -> None:
    providers = [
        _scripted(tmp_path, "a", "replies: [{fault: server_error, status: 503}, {text: never}]\n")
    ]
    settings = gateway_settings(providers, {"agent": ["a", "extractive"]})
    async with running_gateway(settings) as stub:
        response = await stub.Generate(pb.GenerateRequest(messages=[user("hi")]))
    assert response.provider == "extractive"
    assert [(a.provider, a.outcome, a.try_number) for a in response.attempts] == [
        ("a", pb.ATTEMPT_OUTCOME_RETRYABLE_ERROR, 1),
        ("extractive", pb.ATTEMPT_OUTCOME_SUCCESS, 1),
    ]
