"""`web_search` and `summarize` wired through the three real servers, in process: a scripted
model in the gateway calls them; the agent's web search reaches the real search tool, whose
SearxNG provider is a local server speaking SearxNG's JSON; the summary is the gateway's offline
extractive summary on its own route. No network."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from quarry.agent.v1 import agent_pb2, agent_pb2_grpc
from quarry.searchtool.v1 import search_tool_pb2 as st
from quarry.searchtool.v1 import search_tool_pb2_grpc as st_grpc

from services.agent.config import AgentSettings, HistorySettings, LoopSettings
from services.agent.server import build_agent_server
from services.common.server import QuarryServer
from services.common.settings import ServerSettings
from services.llm_gateway.config import GatewaySettings, ProviderSettings
from services.llm_gateway.server import build_gateway_server
from services.search_tool.config import SearchToolSettings
from services.search_tool.embedding import Embedder, EmbeddingSettings, build_embedder
from services.search_tool.server import build_search_tool_server
from services.search_tool.web.base import web_result_id
from services.search_tool.web.config import WebProviderSettings, WebSearchSettings
from tests.search_tool.web.fake_web import FakeWebServer, Page, WebReply

PAGE = Page(
    "https://example.org/tmp", "Temporary directories", "TemporaryDirectory is removed on exit."
)
WEB_ID = web_result_id(PAGE.url)
CHUNK_ID = "tmp-1__chunk_0"


def _script(path: Path) -> Path:
    def call(n: int, name: str, arguments: dict[str, object]) -> dict[str, object]:
        return {
            "text": "",
            "tool_calls": [{"id": f"c{n}", "name": name, "arguments": json.dumps(arguments)}],
        }

    replies = [
        call(1, "web_search", {"query": "temporary directory python"}),
        call(2, "search", {"query": {"primary": "temporary directory"}}),
        call(
            3,
            "summarize",
            {"result_ids": [CHUNK_ID, WEB_ID], "focus": "temporary directory removed"},
        ),
        call(
            4,
            "submit_answer",
            {
                "text": "It is removed on exit [1][2].",
                "citations": [{"result_id": CHUNK_ID}, {"result_id": WEB_ID}],
            },
        ),
    ]
    path.write_text(json.dumps({"replies": replies}))
    return path


@pytest.fixture(scope="module")
def embedder() -> Embedder:
    return build_embedder(EmbeddingSettings())


@pytest.fixture
async def agent(tmp_path: Path, embedder: Embedder) -> AsyncIterator[tuple[str, FakeWebServer]]:
    searxng = FakeWebServer("searxng", default=WebReply((PAGE,))).start()
    server = ServerSettings(port=0, grace_s=0)
    web = WebSearchSettings(
        providers=[WebProviderSettings(kind="searxng", base_url=searxng.base_url)]
    )
    search = build_search_tool_server(
        SearchToolSettings(
            server=server, data_dir=tmp_path / "data", web_search=web, log_format="text"
        ),
        embedder_factory=lambda: embedder,
    )
    gateway = build_gateway_server(
        GatewaySettings(
            server=server,
            providers=[
                ProviderSettings(
                    kind="scripted", name="scripted/test", script=str(_script(tmp_path / "s.json"))
                ),
                ProviderSettings(kind="extractive"),
            ],
            routes={"agent": ["scripted/test"], "summaries": ["extractive"]},
            log_format="text",
        )
    )
    servers: list[QuarryServer] = [search, gateway]
    for started in servers:
        await started.start()
    agent_server = build_agent_server(
        AgentSettings(
            server=server,
            search_tool_address=search.address,
            llm_gateway_address=gateway.address,
            loop=LoopSettings(summarize_route="summaries"),
            history=HistorySettings(path=tmp_path / "runs.sqlite3"),
            log_format="text",
        )
    )
    await agent_server.start()
    servers.append(agent_server)
    async with grpc.aio.insecure_channel(search.address) as channel:
        document = st.Document(
            id="tmp-1",
            title="tempfile",
            text="TemporaryDirectory() creates a temporary directory that is removed on exit.",
        )
        await st_grpc.SearchToolServiceStub(channel).UpsertDocuments(
            st.UpsertDocumentsRequest(collection="docs", documents=[document])
        )
    yield agent_server.address, searxng
    for started in reversed(servers):
        await started.stop(0)
    searxng.stop()


async def test_a_run_searches_the_web_summarises_and_cites_both_through_the_services(
    agent: tuple[str, FakeWebServer],
) -> None:
    address, searxng = agent
    async with grpc.aio.insecure_channel(address) as channel:
        stub = agent_pb2_grpc.AgentServiceStub(channel)
        request = agent_pb2.StreamRunRequest(
            collection="docs",
            query="Is a temporary directory removed?",
            mode=agent_pb2.MODE_THINKING,
            tools=["web_search", "summarize"],
        )
        events = [event async for event in stub.StreamRun(request, timeout=60)]

    kinds = [e.WhichOneof("event") for e in events]
    assert kinds[-1] == "done", events[-1]
    web = next(e.web_searching for e in events if e.HasField("web_searching"))
    assert (web.query, web.result_count, web.provider, web.error) == (
        "temporary directory python",
        1,
        "searxng",
        "",
    )
    summary = next(e.summarizing for e in events if e.HasField("summarizing"))
    assert summary.error == ""
    assert set(summary.cited_ids) <= {CHUNK_ID, WEB_ID}
    assert summary.cited_ids
    assert summary.point_count >= 1
    response = events[-1].done.response
    citations = {c.result_id: c.web for c in response.answer.citations}
    assert citations == {CHUNK_ID: False, WEB_ID: True}
    web_results = [r for r in response.results if r.HasField("web")]
    assert [r.chunk.url for r in web_results] == [PAGE.url]
    assert response.usage.model_calls == 5
    assert searxng.requests[0].params["q"] == "temporary directory python"
