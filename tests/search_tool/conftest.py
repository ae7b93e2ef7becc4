"""Fixtures for the search tool: the real MiniLM embedder (loaded once) and in-process servers."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from quarry.searchtool.v1 import search_tool_pb2_grpc

from services.common.settings import ServerSettings
from services.search_tool.config import ChunkingSettings, SearchToolSettings
from services.search_tool.embedding import Embedder, EmbeddingSettings, build_embedder
from services.search_tool.server import SearchToolServer, build_search_tool_server


@pytest.fixture(scope="session")
def embedder() -> Embedder:
    """all-MiniLM-L6-v2 int8, shared by every test of the session (it loads in about a second)."""
    return build_embedder(EmbeddingSettings())


@pytest.fixture
def settings(tmp_path: Path) -> SearchToolSettings:
    """Port 0, a fresh data directory, small chunks so that short texts make several chunks."""
    return SearchToolSettings(
        server=ServerSettings(port=0, grace_s=0.5),
        data_dir=tmp_path / "data",
        chunking=ChunkingSettings(chunk_tokens=32, overlap_tokens=8),
        max_document_bytes=20_000,
        log_format="text",
    )


@pytest.fixture
async def server(
    settings: SearchToolSettings, embedder: Embedder
) -> AsyncIterator[SearchToolServer]:
    built = build_search_tool_server(settings, embedder_factory=lambda: embedder)
    await built.start()
    yield built
    await built.stop(0)


@pytest.fixture
async def stub(
    server: SearchToolServer,
) -> AsyncIterator[search_tool_pb2_grpc.SearchToolServiceStub]:
    async with grpc.aio.insecure_channel(server.address) as channel:
        yield search_tool_pb2_grpc.SearchToolServiceStub(channel)
