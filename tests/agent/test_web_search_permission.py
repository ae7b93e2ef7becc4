"""An operator forbids web search per API key: a request naming `web_search` with such a key is
PERMISSION_DENIED at the agent's edge, before any model or search call; the same key may run
without it, and a key that may search the web gets the tool."""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc
import pytest
from quarry.agent.v1 import agent_pb2, agent_pb2_grpc

from services.agent.config import AgentSettings
from services.agent.loop import AgentLoop
from services.agent.server import SERVICE_NAME, access_rules
from services.agent.servicer import AgentServicer
from services.agent.testing import ScriptedModel, answer_call, turn
from services.common.auth import ApiKey, AuthSettings, key_digest
from services.common.server import QuarryServer, ServiceRegistration, build_server
from services.common.settings import ServerSettings
from services.common.status import details_of_rpc_error
from tests.agent.conftest import DOCUMENTS
from tests.agent.fake_search import FakeSearch, FakeWebPage

WEB_KEY, INSIDE_KEY = "qk-agent-web-7a7a", "qk-agent-inside-8b8b"
KEYS = [
    ApiKey(name="researcher", sha256=key_digest(WEB_KEY), read=["*"]),
    ApiKey(name="inside-only", sha256=key_digest(INSIDE_KEY), read=["*"], web_search=False),
]


@pytest.fixture
def model() -> ScriptedModel:
    return ScriptedModel([turn("", answer_call("Nothing."))])


@pytest.fixture
async def agent(model: ScriptedModel) -> AsyncIterator[QuarryServer]:
    search = FakeSearch(
        DOCUMENTS, collection="python-docs", web_pages=[FakeWebPage("https://z", "Z", "z")]
    )
    settings = AgentSettings(
        server=ServerSettings(port=0, grace_s=0, auth=AuthSettings(enabled=True, keys=KEYS))
    )
    servicer = AgentServicer(AgentLoop(model, search), settings)

    def register(server: grpc.aio.Server) -> None:
        agent_pb2_grpc.add_AgentServiceServicer_to_server(servicer, server)

    server = build_server(
        [ServiceRegistration(SERVICE_NAME, register, access_rules(settings))], settings.server
    )
    await server.start()
    yield server
    await server.stop(0)


async def _run(server: QuarryServer, key: str, tools: list[str]) -> agent_pb2.RunResponse:
    async with grpc.aio.insecure_channel(server.address) as channel:
        stub = agent_pb2_grpc.AgentServiceStub(channel)
        request = agent_pb2.RunRequest(collection="python-docs", query="zig", tools=tools)
        response: agent_pb2.RunResponse = await stub.Run(
            request, metadata=[("authorization", f"Bearer {key}")]
        )
        return response


async def test_a_key_without_web_search_may_not_name_the_tool(
    agent: QuarryServer, model: ScriptedModel
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await _run(agent, INSIDE_KEY, ["web_search"])
    details = details_of_rpc_error(caught.value)
    assert details.code == grpc.StatusCode.PERMISSION_DENIED
    assert "inside-only" in details.message
    assert "web_search" in details.message
    assert details.metadata.get("permission") == "web_search"
    assert model.requests == []


async def test_the_same_key_runs_without_the_tool(
    agent: QuarryServer, model: ScriptedModel
) -> None:
    response = await _run(agent, INSIDE_KEY, ["summarize"])
    assert response.answer.text == "Nothing."
    assert "web_search" not in [t.name for t in model.requests[0].callable_tools]


async def test_a_key_that_may_search_the_web_is_offered_the_tool(
    agent: QuarryServer, model: ScriptedModel
) -> None:
    await _run(agent, WEB_KEY, ["web_search"])
    assert "web_search" in [t.name for t in model.requests[0].callable_tools]
