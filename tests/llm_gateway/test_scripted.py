"""The scripted provider replays a conversation file; record mode writes one from a live run."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from services.llm_gateway.errors import RateLimited
from services.llm_gateway.model import (
    ChatRequest,
    ChatResponse,
    Completed,
    Message,
    Role,
    StopReason,
    ToolCall,
)
from services.llm_gateway.providers.extractive import ExtractiveProvider
from services.llm_gateway.providers.recording import RecordingProvider
from services.llm_gateway.providers.scripted import Conversation, ScriptedProvider
from tests.llm_gateway.gateway_fixtures import agent_question, search_result
from tests.llm_gateway.test_extractive import PASSAGES, TOOLS

SCRIPT = """
turns:
  - text: ""
    tool_calls:
      - {id: call_1, name: search, arguments: {query: {primary: photosynthesis}}}
    usage: {input_tokens: 120, output_tokens: 9}
  - fault: rate_limited
    retry_after_s: 2
  - text: "Chloroplasts [1]"
    stop_reason: end_turn
"""


def _provider(tmp_path: Path, text: str = SCRIPT) -> ScriptedProvider:
    path = tmp_path / "conversation.yaml"
    path.write_text(text)
    return ScriptedProvider(Conversation.load(path))


def _after_first_turn() -> ChatRequest:
    call = ToolCall("call_1", "search", '{"query": {"primary": "photosynthesis"}}')
    return ChatRequest(
        (
            Message(Role.USER, text="q"),
            Message(Role.ASSISTANT, tool_calls=(call,)),
            Message(Role.TOOL, text="results", tool_call_id="call_1"),
        )
    )


async def test_the_turn_is_chosen_by_the_number_of_assistant_messages(tmp_path: Path) -> None:
    provider = _provider(tmp_path)
    first = await provider.generate(ChatRequest((Message(Role.USER, text="q"),)))
    assert first.stop_reason is StopReason.TOOL_USE
    assert first.tool_calls[0].arguments_json == '{"query": {"primary": "photosynthesis"}}'
    assert (first.usage.input_tokens, first.usage.output_tokens) == (120, 9)
    again = await provider.generate(ChatRequest((Message(Role.USER, text="other"),)))
    assert again == first, "replay is stateless: same position, same reply"


async def test_a_fault_is_raised_once_before_its_reply(tmp_path: Path) -> None:
    provider = _provider(tmp_path)
    with pytest.raises(RateLimited) as caught:
        await provider.generate(_after_first_turn())
    assert caught.value.retry_after_s == 2
    second = await provider.generate(_after_first_turn())
    assert second.text == "Chloroplasts [1]"


async def test_concurrent_conversations_each_get_their_own_turns(tmp_path: Path) -> None:
    provider = _provider(
        tmp_path, SCRIPT.replace("  - fault: rate_limited\n    retry_after_s: 2\n", "")
    )
    starts = [ChatRequest((Message(Role.USER, text=f"q{i}"),)) for i in range(10)]
    replies = await asyncio.gather(*(provider.generate(r) for r in starts))
    assert {r.tool_calls[0].id for r in replies} == {"call_1"}


async def test_a_request_beyond_the_script_fails_clearly(tmp_path: Path) -> None:
    provider = _provider(tmp_path, "- text: only one\n")
    with pytest.raises(Exception, match="no turn 2"):
        await provider.generate(_after_first_turn())


async def test_a_malformed_fault_is_rejected_when_loading(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="fault must be one of"):
        _provider(tmp_path, "- fault: explode\n- text: x\n")


async def _agent_run(provider: object, *, stream: bool) -> list[ChatResponse]:
    """Two agent turns (search, then answer) against `provider`."""
    messages = [Message(Role.USER, text=agent_question("Where does photosynthesis take place?"))]
    responses = []
    for _ in range(2):
        request = ChatRequest(tuple(messages), TOOLS)
        if stream:
            events = [e async for e in provider.stream(request)]  # type: ignore[attr-defined]
            final = events[-1]
            assert isinstance(final, Completed)
            response = final.response
        else:
            response = await provider.generate(request)  # type: ignore[attr-defined]
        responses.append(response)
        call = response.tool_calls[0]
        messages.append(Message(Role.ASSISTANT, tool_calls=(call,)))
        messages.append(Message(Role.TOOL, text=search_result(PASSAGES), tool_call_id=call.id))
    return responses


@pytest.mark.parametrize("suffix", [".json", ".yaml"])
async def test_a_recorded_run_replays_identically(tmp_path: Path, suffix: str) -> None:
    path = tmp_path / f"recorded{suffix}"
    recorded = await _agent_run(RecordingProvider(ExtractiveProvider(), path), stream=True)
    replayed = await _agent_run(ScriptedProvider(Conversation.load(path)), stream=False)
    assert replayed == recorded
    if suffix == ".json":
        turns = json.loads(path.read_text())["turns"]
        assert [t["tool_calls"][0]["name"] for t in turns] == ["search", "submit_answer"]
