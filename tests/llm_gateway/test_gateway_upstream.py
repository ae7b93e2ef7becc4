"""The whole gateway over gRPC against the fake OpenAI server, through the real SDK: fallback,
Retry-After, hangs, cancellation, secrets, and record → replay."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path

import grpc
import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from quarry.llmgateway.v1 import llm_gateway_pb2 as pb

from services.common.status import details_of_rpc_error
from services.common.telemetry import setup_telemetry
from services.llm_gateway.config import ProviderSettings
from services.llm_gateway.testing import (
    FakeAnthropicServer,
    FakeOpenAIServer,
    Reply,
    ScriptedError,
    ScriptedToolCall,
)
from tests.llm_gateway.conftest import FAKE_API_KEY
from tests.llm_gateway.gateway_fixtures import (
    agent_tools,
    gateway_settings,
    running_gateway,
    scripted_entry,
    user,
)

KEY_ENV = "QUARRY_TEST_OPENAI_KEY"
NAME = "openai/gpt-test"
CLAUDE = "anthropic/claude-test"


@pytest.fixture(autouse=True)
def _key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, FAKE_API_KEY)


def _openai(fake: FakeOpenAIServer, **overrides: object) -> ProviderSettings:
    values: dict[str, object] = {
        "kind": "openai",
        "model": "gpt-test",
        "base_url": fake.base_url,
        "api_key_env": KEY_ENV,
        "context_window_tokens": 16_000,
        "timeout_s": 5.0,
        "retry": {"max_attempts": 2, "base_backoff_s": 0.001, "max_backoff_s": 0.05},
        **overrides,
    }
    return ProviderSettings.model_validate(values)


def _anthropic(fake: FakeAnthropicServer, **overrides: object) -> ProviderSettings:
    values: dict[str, object] = {
        "kind": "anthropic",
        "model": "claude-test",
        "base_url": fake.base_url,
        "api_key_env": KEY_ENV,
        **overrides,
    }
    return ProviderSettings.model_validate(values)


async def test_a_failing_vendor_falls_back_to_extractive_with_every_attempt_listed(
    fake_openai: FakeOpenAIServer,
) -> None:
    fake_openai.reset(default=Reply.server_error(503))
    settings = gateway_settings([_openai(fake_openai)], {"agent": [NAME, "extractive"]})
    async with running_gateway(settings) as stub:
        response = await stub.Generate(pb.GenerateRequest(messages=[user("hi")]))
    assert response.provider == "extractive"
    assert response.provider_kind == "extractive"  # what answered: an agent may not want it
    assert [(a.provider, a.outcome, a.try_number) for a in response.attempts] == [
        (NAME, pb.ATTEMPT_OUTCOME_RETRYABLE_ERROR, 1),
        (NAME, pb.ATTEMPT_OUTCOME_RETRYABLE_ERROR, 2),
        ("extractive", pb.ATTEMPT_OUTCOME_SUCCESS, 1),
    ]
    assert len(fake_openai.requests) == 2


async def test_a_429_is_retried_after_its_retry_after_and_then_answers(
    fake_openai: FakeOpenAIServer,
) -> None:
    fake_openai.reset([Reply.rate_limited("0.02"), Reply(text="after the wait")])
    settings = gateway_settings([_openai(fake_openai)], {"agent": [NAME, "extractive"]})
    async with running_gateway(settings) as stub:
        response = await stub.Generate(pb.GenerateRequest(messages=[user("hi")]))
    assert response.message.text == "after the wait"
    assert (response.provider, response.provider_kind) == (NAME, "openai")
    assert [a.outcome for a in response.attempts] == [
        pb.ATTEMPT_OUTCOME_RETRYABLE_ERROR,
        pb.ATTEMPT_OUTCOME_SUCCESS,
    ]


async def test_a_vendor_hanging_past_the_per_try_timeout_falls_back(
    fake_openai: FakeOpenAIServer,
) -> None:
    fake_openai.reset(default=Reply.hang(30))
    entry = _openai(fake_openai, timeout_s=0.2, retry={"max_attempts": 1})
    settings = gateway_settings([entry], {"agent": [NAME, "extractive"]})
    async with running_gateway(settings) as stub:
        response = await stub.Generate(pb.GenerateRequest(messages=[user("hi")]))
    assert response.provider == "extractive"
    assert response.attempts[0].outcome == pb.ATTEMPT_OUTCOME_RETRYABLE_ERROR


async def test_cancelling_mid_stream_closes_the_upstream_and_leaves_the_breaker_alone(
    fake_openai: FakeOpenAIServer,
) -> None:
    fake_openai.reset(
        [Reply(text="a long answer that stalls", chunk_size=2, stall_after_events=3, delay_s=30)]
    )
    settings = gateway_settings([_openai(fake_openai)], {"agent": [NAME, "extractive"]})
    async with running_gateway(settings) as stub:
        call = stub.StreamGenerate(pb.StreamGenerateRequest(messages=[user("hi")]))
        first = await call.read()
        assert first.HasField("text_delta")
        call.cancel()
        (upstream,) = fake_openai.requests
        assert await asyncio.to_thread(upstream.disconnected.wait, 5)
        status = await stub.GetStatus(pb.GetStatusRequest())
    vendor = next(p for p in status.providers if p.name == NAME)
    assert (vendor.consecutive_failures, vendor.failures) == (0, 0)
    assert vendor.breaker_state == pb.BREAKER_STATE_CLOSED


async def test_api_keys_never_reach_logs_spans_or_statuses(
    fake_openai: FakeOpenAIServer, caplog: pytest.LogCaptureFixture
) -> None:
    leaky = ScriptedError(status=401, message=f"Incorrect API key provided: {FAKE_API_KEY}")
    fake_openai.reset(default=Reply(error=leaky))
    spans = InMemorySpanExporter()
    telemetry = setup_telemetry("llm_gateway", span_exporter=spans)
    settings = gateway_settings([_openai(fake_openai)], {"agent": [NAME]})
    with caplog.at_level(logging.DEBUG):
        async with running_gateway(settings, telemetry) as stub:
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await stub.Generate(pb.GenerateRequest(messages=[user("hi")]))
            with pytest.raises(grpc.aio.AioRpcError):
                await stub.StreamGenerate(pb.StreamGenerateRequest(messages=[user("hi")])).read()
            status = await stub.GetStatus(pb.GetStatusRequest())
    telemetry.shutdown()

    assert fake_openai.requests[0].sent_api_key(FAKE_API_KEY), "the key was used"
    details = details_of_rpc_error(caught.value)
    assert details.code == grpc.StatusCode.UNAVAILABLE
    assert "Incorrect API key provided" in details.metadata["attempts"]
    exposed = [
        caught.value.details() or "",
        str(caught.value.trailing_metadata()),
        json.dumps(details.metadata),
        str(status),
        caplog.text,
        *(
            json.dumps(dict(s.attributes or {})) + s.name + str(s.status.description)
            for s in spans.get_finished_spans()
        ),
        *(
            json.dumps([dict(e.attributes or {}) for e in s.events])
            for s in spans.get_finished_spans()
        ),
    ]
    assert caplog.text, "the failure was logged"
    for text in exposed:
        assert FAKE_API_KEY not in text
        assert FAKE_API_KEY[:20] not in text


async def test_a_run_recorded_against_the_vendor_replays_identically_through_scripted(
    fake_openai: FakeOpenAIServer, tmp_path: Path
) -> None:
    recording = tmp_path / "run.yaml"
    fake_openai.reset(
        [
            Reply(tool_calls=[ScriptedToolCall("call_a", "search", '{"query": {"primary": "x"}}')]),
            Reply(text="The answer [1]."),
        ]
    )
    live = gateway_settings([_openai(fake_openai, record_to=str(recording))], {"agent": [NAME]})
    replay = gateway_settings([scripted_entry(str(recording), name=NAME)], {"agent": [NAME]})

    async def run(settings: object) -> list[pb.GenerateResponse]:
        async with running_gateway(settings) as stub:  # type: ignore[arg-type]
            first = await stub.Generate(
                pb.GenerateRequest(messages=[user("q")], tools=agent_tools())
            )
            call = first.message.tool_calls[0]
            follow_up = [
                user("q"),
                first.message,
                pb.Message(
                    role=pb.ROLE_TOOL, tool_call_id=call.id, text="Found 0 results; showing 0."
                ),
            ]
            second = await stub.Generate(
                pb.GenerateRequest(messages=follow_up, tools=agent_tools())
            )
        return [first, second]

    recorded, replayed = await run(live), await run(replay)
    for original, again in zip(recorded, replayed, strict=True):
        assert again.message == original.message
        assert again.stop_reason == original.stop_reason
        assert again.usage == original.usage
        assert again.model == original.model


async def test_an_overloaded_anthropic_falls_back_to_openai_on_the_stream_path(
    fake_openai: FakeOpenAIServer, fake_anthropic: FakeAnthropicServer
) -> None:
    fake_anthropic.reset(default=Reply.overloaded())
    fake_openai.reset([Reply(text="from openai")])
    claude = _anthropic(fake_anthropic, retry={"max_attempts": 1})
    settings = gateway_settings(
        [claude, _openai(fake_openai)], {"agent": [CLAUDE, NAME, "extractive"]}
    )
    async with running_gateway(settings) as stub:
        events = [
            e async for e in stub.StreamGenerate(pb.StreamGenerateRequest(messages=[user("hi")]))
        ]
    completed = events[-1].completed
    assert "".join(e.text_delta.text for e in events[:-1]) == "from openai"
    assert completed.provider == NAME
    assert completed.provider_kind == "openai"
    assert [(a.provider, a.outcome) for a in completed.attempts] == [
        ("anthropic/claude-test", pb.ATTEMPT_OUTCOME_RETRYABLE_ERROR),
        (NAME, pb.ATTEMPT_OUTCOME_SUCCESS),
    ]
    assert len(fake_anthropic.requests) == 1


async def test_the_callers_deadline_bounds_the_try_and_is_not_charged_to_the_provider(
    fake_openai: FakeOpenAIServer,
) -> None:
    fake_openai.reset(default=Reply.hang(30))
    settings = gateway_settings([_openai(fake_openai, timeout_s=30)], {"agent": [NAME]})
    async with running_gateway(settings) as stub:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.Generate(pb.GenerateRequest(messages=[user("hi")]), timeout=1.0)
        (upstream,) = fake_openai.requests
        assert await asyncio.to_thread(upstream.disconnected.wait, 5)
        status = await stub.GetStatus(pb.GetStatusRequest())
    assert caught.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    vendor = next(p for p in status.providers if p.name == NAME)
    assert (vendor.failures, vendor.consecutive_failures) == (0, 0)


@pytest.mark.parametrize("llama_cpp_style", [False, True])
async def test_top_logprobs_reach_the_vendor_and_come_back_most_likely_first(
    fake_openai: FakeOpenAIServer, llama_cpp_style: bool
) -> None:
    logprobs = {"no": -0.4, "yes": -1.2, "Yes": -2.5, "No": -3.0}
    fake_openai.reset(
        [Reply(text="no", first_token_logprobs=logprobs, llama_cpp_logprobs=llama_cpp_style)]
    )
    settings = gateway_settings([_openai(fake_openai)], {"agent": [NAME]})
    async with running_gateway(settings) as stub:
        response = await stub.Generate(
            pb.GenerateRequest(messages=[user("judge")], max_output_tokens=1, top_logprobs=3)
        )
    [request] = fake_openai.requests
    assert (request.body["logprobs"], request.body["top_logprobs"]) == (True, 3)
    assert [(t.token, t.logprob) for t in response.first_token_logprobs] == [
        ("no", -0.4),
        ("yes", -1.2),
        ("Yes", -2.5),
    ]


async def test_without_top_logprobs_none_are_asked_or_returned(
    fake_openai: FakeOpenAIServer,
) -> None:
    fake_openai.reset([Reply(text="no", first_token_logprobs={"no": -0.1})])
    settings = gateway_settings([_openai(fake_openai)], {"agent": [NAME]})
    async with running_gateway(settings) as stub:
        response = await stub.Generate(pb.GenerateRequest(messages=[user("judge")]))
    [request] = fake_openai.requests
    assert "logprobs" not in request.body
    assert "top_logprobs" not in request.body
    assert list(response.first_token_logprobs) == []


@pytest.mark.parametrize("asked", [0, 21])
async def test_top_logprobs_out_of_range_is_invalid_argument_naming_the_field(
    fake_openai: FakeOpenAIServer, asked: int
) -> None:
    settings = gateway_settings([_openai(fake_openai)], {"agent": [NAME]})
    async with running_gateway(settings) as stub:
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await stub.Generate(pb.GenerateRequest(messages=[user("judge")], top_logprobs=asked))
    assert raised.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert "top_logprobs" in (raised.value.details() or "")
    assert fake_openai.requests == []


async def test_a_provider_without_logprobs_answers_with_none(
    fake_anthropic: FakeAnthropicServer,
) -> None:
    fake_anthropic.reset([Reply(text="yes")])
    anthropic = _anthropic(fake_anthropic, context_window_tokens=16_000)
    settings = gateway_settings([anthropic], {"agent": [CLAUDE]})
    async with running_gateway(settings) as stub:
        response = await stub.Generate(pb.GenerateRequest(messages=[user("judge")], top_logprobs=5))
    assert response.message.text == "yes"
    assert list(response.first_token_logprobs) == []
