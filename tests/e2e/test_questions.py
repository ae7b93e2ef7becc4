"""Questions to the caller through the three real services, as separate processes, with API-key
auth on at the agent: the model (scripted on the fake OpenAI server) calls `ask_user`, the stream
shows the question, and the answer comes back on another RPC — from grpcurl, from the run's own
key only — or the short acknowledge window expires and the run goes on without one."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest
from quarry.agent.v1 import agent_pb2

from services.agent.client import AgentClient, RunOptions
from services.common.auth import key_digest
from services.common.errors import InvalidArgument, QuarryError
from services.llm_gateway.testing import Reply, ScriptedToolCall
from tests.e2e.conftest import COLLECTION, Stack, running_stack
from tests.grpcurl.test_grpcurl import GRPCURL

pytestmark = pytest.mark.slow
OWNER, OTHER = "qk-e2e-owner-7c1d", "qk-e2e-other-2b9e"
CITED = "tempfile-tempdir__chunk_0"
QUESTION = "How do I make a temporary directory?"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    keys = [
        {"name": "owner", "sha256": key_digest(OWNER), "read": [COLLECTION]},
        {"name": "other", "sha256": key_digest(OTHER), "read": [COLLECTION]},
    ]
    env = {
        "QUARRY_AGENT_SERVER__AUTH__ENABLED": "true",
        "QUARRY_AGENT_SERVER__AUTH__KEYS": json.dumps(keys),
        "QUARRY_AGENT_QUESTIONS__ACKNOWLEDGE_TIMEOUT_S": "30",
        "QUARRY_AGENT_QUESTIONS__ANSWER_TIMEOUT_S": "60",
    }
    with running_stack(tmp_path_factory.mktemp("e2e-questions"), env) as started:
        yield started


def _call(call_id: str, name: str, arguments: dict[str, Any]) -> ScriptedToolCall:
    return ScriptedToolCall(call_id, name, json.dumps(arguments))


def _script(stack: Stack) -> None:
    stack.openai.script.reset(
        [
            Reply(
                text="Which platform?",
                tool_calls=[_call("c1", "ask_user", {"question": "Which Python version?"})],
            ),
            Reply(
                tool_calls=[_call("c2", "search", {"query": {"primary": "temporary directory"}})]
            ),
            Reply(
                tool_calls=[
                    _call(
                        "c3",
                        "submit_answer",
                        {"text": "TemporaryDirectory [1]", "citations": [{"result_id": CITED}]},
                    )
                ]
            ),
        ]
    )


def _options(**overrides: Any) -> RunOptions:
    fields: dict[str, Any] = {
        "collection": COLLECTION,
        "mode": "thinking",
        "route": "openai",
        "timeout_s": 60,
        "tools": ["ask_user"],
        **overrides,
    }
    return RunOptions(**fields)


def _tool_messages(stack: Stack, since: int) -> list[str]:
    """The tool results the model was sent, in its second request of the run."""
    body = stack.openai.requests[since + 1].body
    return [m["content"] for m in body["messages"] if m["role"] == "tool"]


async def _grpcurl_answer(stack: Stack, key: str, run_id: str, question_id: str, text: str) -> str:
    data = {"run_id": run_id, "question_id": question_id, "text": text}
    process = await asyncio.create_subprocess_exec(
        GRPCURL,
        "-plaintext",
        "-H",
        f"authorization: Bearer {key}",
        "-d",
        json.dumps(data),
        stack.agent,
        "quarry.agent.v1.AgentService/AnswerQuestion",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 0, err.decode()
    return out.decode()


async def test_a_question_is_answered_with_grpcurl_and_only_by_the_runs_own_key(
    stack: Stack,
) -> None:
    _script(stack)
    before = len(stack.openai.requests)
    events: list[agent_pb2.StreamRunResponse] = []
    async with (
        AgentClient(stack.agent, api_key=OWNER) as owner,
        AgentClient(stack.agent, api_key=OTHER) as other,
    ):
        async for event in owner.stream_run(QUESTION, _options()):
            events.append(event)
            if event.WhichOneof("event") != "question":
                continue
            q = event.question
            with pytest.raises(QuarryError) as hijack:
                await other.answer_question(q.run_id, q.question_id, "hijacked")
            await owner.acknowledge_question(q.run_id, q.question_id)
            await _grpcurl_answer(stack, OWNER, q.run_id, q.question_id, "Python 3.12")

    assert hijack.value.code == "PERMISSION_DENIED"
    kinds = [e.WhichOneof("event") for e in events]
    assert kinds[:4] == ["started", "thinking", "question", "question_closed"]
    question, closed = events[2].question, events[3].question_closed
    assert question.text == "Which Python version?"
    assert 0 < question.acknowledge_within_ms <= 30_000
    assert (closed.outcome, closed.answer) == (agent_pb2.QUESTION_OUTCOME_ANSWERED, "Python 3.12")
    first = stack.openai.requests[before].body
    assert "ask_user" in [t["function"]["name"] for t in first["tools"]]
    assert _tool_messages(stack, before) == ["The caller answered: Python 3.12"]
    assert events[-1].done.response.answer.text == "TemporaryDirectory [1]"


async def test_an_unacknowledged_question_expires_and_the_run_answers_without_it(
    stack: Stack,
) -> None:
    _script(stack)
    before = len(stack.openai.requests)
    async with AgentClient(stack.agent, api_key=OWNER) as owner:
        events = [e async for e in owner.stream_run(QUESTION, _options(question_acknowledge_s=0.3))]

    closed = next(e.question_closed for e in events if e.WhichOneof("event") == "question_closed")
    assert closed.outcome == agent_pb2.QUESTION_OUTCOME_NOT_ACKNOWLEDGED
    [tool_result] = _tool_messages(stack, before)
    assert tool_result.startswith("No answer: the caller did not respond")
    assert events[-1].done.response.answer.text == "TemporaryDirectory [1]"


async def test_a_unary_run_through_the_real_agent_refuses_ask_user(stack: Stack) -> None:
    async with AgentClient(stack.agent, api_key=OWNER) as owner:
        with pytest.raises(InvalidArgument) as caught:
            await owner.run(QUESTION, _options())
    assert caught.value.code == "INVALID_ARGUMENT"
    assert [v.field for v in caught.value.violations] == ["tools[0]"]
