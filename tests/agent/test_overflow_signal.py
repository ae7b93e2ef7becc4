"""Context-window overflow reaches the agent as one signal: the gateway's INVALID_ARGUMENT with
reason CONTEXT_WINDOW_EXCEEDED (`services.common.errors`), also when the provider stopped mid-reply
at its window. The agent compacts older exchanges on it and retries the turn."""

from __future__ import annotations

import json
from collections.abc import Mapping

import pytest
from quarry.agent.v1 import agent_pb2

from services.common.telemetry import Telemetry, setup_telemetry
from services.llm_gateway.config import GatewaySettings, ProviderSettings
from services.llm_gateway.testing import FakeAnthropicServer, Reply, ScriptedToolCall
from tests.agent.conftest import DOCUMENTS
from tests.agent.fake_search import FakeSearch
from tests.agent.test_cancellation import SERVER, _servers
from tests.agent.test_dependency_clients import FakeSearchService

TEMP = "tempfile__chunk_0"


@pytest.fixture
def telemetry() -> Telemetry:
    return setup_telemetry("test")


KEY_ENV = "QUARRY_TEST_ANTHROPIC_KEY"


def _call(call_id: str, name: str, arguments: Mapping[str, object]) -> Reply:
    return Reply(tool_calls=[ScriptedToolCall(call_id, name, json.dumps(arguments))])


async def test_a_reply_the_provider_stopped_at_its_window_makes_the_agent_compact_and_retry(
    telemetry: Telemetry, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Anthropic stops a reply with `model_context_window_exceeded`: the gateway answers
    CONTEXT_WINDOW_EXCEEDED, the agent summarises the older exchanges (GenerateStructured) and
    sends the turn again, which answers; the cut-off text is nowhere in the answer."""
    monkeypatch.setenv(KEY_ENV, "sk-test-fake-key-0123456789abcdef")
    summary = {"summary": "Searched tempfile and shutil.", "queries_tried": ["tempfile", "shutil"]}
    answer = {"text": "Use TemporaryDirectory [1].", "citations": [{"result_id": TEMP}]}
    with FakeAnthropicServer() as fake:
        fake.push(
            _call("c1", "search", {"query": {"primary": "tempfile"}}),
            _call("c2", "search", {"query": {"primary": "shutil"}}),
            Reply(text="TemporaryDirectory is", stop_reason="model_context_window_exceeded"),
            Reply(text=json.dumps(summary)),
            _call("c3", "submit_answer", answer),
        )
        claude = ProviderSettings.model_validate(
            {
                "kind": "anthropic",
                "model": "claude-test",
                "base_url": fake.base_url,
                "api_key_env": KEY_ENV,
                "retry": {"max_attempts": 1},
            }
        )
        gateway = GatewaySettings(
            providers=[claude],
            routes={"agent": [claude.name]},
            default_route="agent",
            server=SERVER,
        )
        service = FakeSearchService(FakeSearch(DOCUMENTS, collection="python-docs"))
        async with _servers(telemetry, service, gateway=gateway) as agent:
            reply = await agent.Run(
                agent_pb2.RunRequest(
                    query="temporary directory",
                    collection="python-docs",
                    mode=agent_pb2.MODE_THINKING,
                ),
                timeout=30,
            )
        summarised, retried = (json.dumps(r.body) for r in fake.requests[3:5])
    assert reply.stop_reason == agent_pb2.STOP_REASON_ANSWERED
    assert [c.result_id for c in reply.answer.citations] == [TEMP]
    assert [s.compacted for s in reply.steps] == [False, False, True]
    assert "TemporaryDirectory is" not in reply.answer.text
    assert "queries_tried" in summarised
    assert "Searched tempfile and shutil." in retried
    assert len(fake.requests) == 5
