"""`WebSearch` through gRPC: results on the wire, statuses, and the per-key permission."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from quarry.searchtool.v1 import search_tool_pb2 as st
from quarry.searchtool.v1 import search_tool_pb2_grpc as st_grpc

from services.common.auth import ApiKey, AuthSettings, key_digest
from services.common.errors import FailedPrecondition
from services.common.settings import ServerSettings
from services.search_tool.client import SearchToolClient
from services.search_tool.config import SearchToolSettings
from services.search_tool.embedding import Embedder
from services.search_tool.server import SearchToolServer, build_search_tool_server
from services.search_tool.web.config import WebProviderSettings, WebSearchSettings
from tests.search_tool.grpc_helpers import fails
from tests.search_tool.web.conftest import PAGES
from tests.search_tool.web.fake_web import FakeWebServer, WebReply

OPEN_KEY, CLOSED_KEY = "qk-web-allowed-1a2b", "qk-web-denied-3c4d"


def settings_for(
    tmp_path: Path, web: WebSearchSettings, auth: AuthSettings | None = None
) -> SearchToolSettings:
    return SearchToolSettings(
        server=ServerSettings(port=0, grace_s=0, auth=auth or AuthSettings()),
        data_dir=tmp_path / "data",
        web_search=web,
        log_format="text",
    )


async def started(settings: SearchToolSettings, embedder: Embedder) -> SearchToolServer:
    server = build_search_tool_server(settings, embedder_factory=lambda: embedder)
    await server.start()
    return server


@pytest.fixture
async def web_server(
    tmp_path: Path, embedder: Embedder, searxng: FakeWebServer
) -> AsyncIterator[SearchToolServer]:
    web = WebSearchSettings(
        providers=[WebProviderSettings(kind="searxng", base_url=searxng.base_url)]
    )
    server = await started(settings_for(tmp_path, web), embedder)
    yield server
    await server.stop(0)


async def test_web_search_returns_citable_web_results_with_provider_and_fetch_time(
    web_server: SearchToolServer,
) -> None:
    async with grpc.aio.insecure_channel(web_server.address) as channel:
        stub = st_grpc.SearchToolServiceStub(channel)
        reply = await stub.WebSearch(st.WebSearchRequest(query="systems languages", limit=2))
        again = await stub.WebSearch(st.WebSearchRequest(query="systems languages", limit=2))
    assert reply.provider == "searxng"
    assert not reply.cached
    assert again.cached
    assert [r.url for r in reply.results] == [PAGES[0].url, PAGES[1].url]
    first = reply.results[0]
    assert first.id.startswith("web_")
    assert first.title == PAGES[0].title
    assert first.snippet == "Rust is a systems language."
    assert first.provider == "searxng"
    assert first.fetched_at.seconds > 0
    assert again.results[0].fetched_at == first.fetched_at


async def test_web_search_faults_become_unavailable_with_retry_info(
    web_server: SearchToolServer, searxng: FakeWebServer
) -> None:
    searxng.push(WebReply(status=429, headers={"retry-after": "90"}))
    async with grpc.aio.insecure_channel(web_server.address) as channel:
        stub = st_grpc.SearchToolServiceStub(channel)
        details = await fails(
            stub.WebSearch(st.WebSearchRequest(query="zig")), grpc.StatusCode.UNAVAILABLE
        )
        bad = await fails(
            stub.WebSearch(st.WebSearchRequest(query="", limit=3)),
            grpc.StatusCode.INVALID_ARGUMENT,
        )
    assert details.reason == "WEB_SEARCH_FAILED"
    assert details.retry_after_s == 90.0
    assert [v.field for v in bad.violations] == ["query"]


async def test_web_search_is_failed_precondition_when_no_provider_is_configured(
    tmp_path: Path, embedder: Embedder
) -> None:
    server = await started(settings_for(tmp_path, WebSearchSettings()), embedder)
    try:
        async with grpc.aio.insecure_channel(server.address) as channel:
            stub = st_grpc.SearchToolServiceStub(channel)
            details = await fails(
                stub.WebSearch(st.WebSearchRequest(query="zig")),
                grpc.StatusCode.FAILED_PRECONDITION,
            )
    finally:
        await server.stop(0)
    assert details.reason == "WEB_SEARCH_DISABLED"


async def test_an_operator_can_forbid_web_search_per_api_key(
    tmp_path: Path, embedder: Embedder, searxng: FakeWebServer
) -> None:
    auth = AuthSettings(
        enabled=True,
        keys=[
            ApiKey(name="researcher", sha256=key_digest(OPEN_KEY), read=["*"]),
            ApiKey(name="inside-only", sha256=key_digest(CLOSED_KEY), read=["*"], web_search=False),
        ],
    )
    web = WebSearchSettings(
        providers=[WebProviderSettings(kind="searxng", base_url=searxng.base_url)]
    )
    server = await started(settings_for(tmp_path, web, auth), embedder)
    try:
        async with grpc.aio.insecure_channel(server.address) as channel:
            stub = st_grpc.SearchToolServiceStub(channel)
            request = st.WebSearchRequest(query="zig")
            allowed = await stub.WebSearch(
                request, metadata=[("authorization", f"Bearer {OPEN_KEY}")]
            )
            denied = await fails(
                stub.WebSearch(request, metadata=[("authorization", f"Bearer {CLOSED_KEY}")]),
                grpc.StatusCode.PERMISSION_DENIED,
            )
    finally:
        await server.stop(0)
    assert allowed.results
    assert "inside-only" in denied.message
    assert "search the web" in denied.message
    assert len(searxng.requests) == 1


async def test_the_public_client_searches_the_web(web_server: SearchToolServer) -> None:
    async with SearchToolClient(web_server.address) as client:
        reply = await client.web_search("zig", limit=1)
    assert [r.url for r in reply.results] == [PAGES[0].url]


async def test_the_public_client_reports_web_search_off_as_failed_precondition(
    tmp_path: Path, embedder: Embedder
) -> None:
    server = await started(settings_for(tmp_path, WebSearchSettings()), embedder)
    try:
        async with SearchToolClient(server.address) as client:
            with pytest.raises(FailedPrecondition, match="not configured"):
                await client.web_search("zig")
    finally:
        await server.stop(0)
