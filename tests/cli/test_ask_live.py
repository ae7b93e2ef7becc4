"""`quarry ask` in a terminal-less subprocess against an agent whose searches go to a real search
tool: the still-building warning and `--limit`."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import grpc
import pytest
from quarry.agent.v1 import agent_pb2_grpc
from quarry.searchtool.v1 import search_tool_pb2

from services.agent.config import AgentSettings
from services.agent.loop import AgentLoop
from services.agent.search_tool_client import SearchToolClient as AgentSearchClient
from services.agent.server import SERVICE_NAME
from services.agent.servicer import AgentServicer
from services.agent.testing import ScriptedModel, answer_call, search_call, turn
from services.common.channels import open_channel
from services.common.server import QuarryServer, ServiceRegistration, build_server
from services.common.settings import ServerSettings
from services.search_tool.client import SearchToolClient
from services.search_tool.server import SearchToolServer
from tests.cli.conftest import quarry

pytestmark = pytest.mark.slow

NOTES = 30


@asynccontextmanager
async def _agent(search_tool: str, model: ScriptedModel) -> AsyncIterator[QuarryServer]:
    """The agent service with `model`, searching the real search tool at `search_tool`."""
    channel = open_channel(search_tool)
    settings = AgentSettings(server=ServerSettings(port=0, grace_s=0))
    servicer = AgentServicer(AgentLoop(model, AgentSearchClient(channel)), settings)

    def register(server: grpc.aio.Server) -> None:
        agent_pb2_grpc.add_AgentServiceServicer_to_server(servicer, server)

    server = build_server([ServiceRegistration(SERVICE_NAME, register)], settings.server)
    await server.start()
    try:
        yield server
    finally:
        await server.stop(0)
        await channel.close(None)


async def _store_notes(address: str, *, building: bool) -> None:
    documents = [
        search_tool_pb2.Document(id=f"n{n:02}", text=f"Kettle note {n}: descale with vinegar.")
        for n in range(NOTES)
    ]
    async with SearchToolClient(address) as client:
        await client.upsert_documents("notes", documents, building=building)


def _search_and_answer(limit: int = 10) -> Callable[[], ScriptedModel]:
    return lambda: ScriptedModel(
        [turn("", search_call("descale kettle", limit=limit)), turn("", answer_call("Vinegar."))]
    )


async def test_ask_warns_that_a_collection_still_being_built_may_miss_documents(
    search_tool: SearchToolServer,
) -> None:
    await _store_notes(search_tool.address, building=True)
    args = ("ask", "How do I descale?", "--collection", "notes")
    async with _agent(search_tool.address, _search_and_answer()()) as agent:
        building = await quarry(
            *args, "--address", agent.address, "--search-tool", search_tool.address
        )
    assert building.returncode == 0, building.stderr
    printed = " ".join(building.stdout.split())
    assert (
        f"note: notes is still being built ({NOTES} documents so far): the answer may miss "
        "documents that are not in yet" in printed
    )
    assert printed.index("still being built") < printed.index("Vinegar.")

    await _store_notes(search_tool.address, building=False)
    async with _agent(search_tool.address, _search_and_answer()()) as agent:
        built = await quarry(
            *args, "--address", agent.address, "--search-tool", search_tool.address, "--json"
        )
    assert built.returncode == 0, built.stderr
    assert "still being built" not in built.stdout + built.stderr
    assert all(json.loads(line) for line in built.stdout.splitlines())


async def test_ask_json_puts_the_building_warning_on_stderr_and_keeps_stdout_events(
    search_tool: SearchToolServer,
) -> None:
    await _store_notes(search_tool.address, building=True)
    async with _agent(search_tool.address, _search_and_answer()()) as agent:
        done = await quarry(
            "ask", "How do I descale?", "--collection", "notes", "--json",
            "--address", agent.address, "--search-tool", search_tool.address,
        )  # fmt: skip
    assert "quarry: notes is still being built" in done.stderr
    assert [next(iter(json.loads(line))) for line in done.stdout.splitlines()][-1] == "done"


async def test_ask_limit_returns_that_many_results_though_the_model_asked_for_fewer(
    search_tool: SearchToolServer,
) -> None:
    await _store_notes(search_tool.address, building=False)
    async with _agent(search_tool.address, _search_and_answer(limit=5)()) as agent:
        done = await quarry(
            "ask", "How do I descale?", "--collection", "notes", "--limit", "25", "--json",
            "--address", agent.address, "--search-tool", search_tool.address,
        )  # fmt: skip
    events = [json.loads(line) for line in done.stdout.splitlines()]
    response = events[-1]["done"]["response"]
    assert len(response["results"]) == 25
    assert len({r["chunk"]["id"] for r in response["results"]}) == 25


async def test_ask_limit_beyond_the_maximum_is_refused_before_calling() -> None:
    done = await quarry("ask", "q", "--limit", "201", "--address", "127.0.0.1:1")
    assert done.returncode == 2
    assert "argument --limit: must be 1..200 (the most a run returns)" in done.stderr
    zero = await quarry("ask", "q", "--limit", "0", "--address", "127.0.0.1:1")
    assert "argument --limit: must be 1..200" in zero.stderr
    words = await quarry("ask", "q", "--limit", "many", "--address", "127.0.0.1:1")
    assert "argument --limit: 'many' is not a whole number" in words.stderr
