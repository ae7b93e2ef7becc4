"""A small fake collection and helpers shared by the agent tests."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from quarry.common.v1 import search_pb2
from quarry.searchtool.v1 import search_tool_pb2, search_tool_pb2_grpc

from services.agent import filter_wire
from services.agent.events import AgentEvent, Done
from services.agent.filters import CallerFilter
from services.agent.loop import AgentLoop
from services.agent.run import RunResult
from services.agent.search_tool_client import SearchToolClient
from services.common.server import QuarryServer
from services.common.settings import ServerSettings
from services.search_tool.config import SearchToolSettings
from services.search_tool.documents import Document
from services.search_tool.embedding import EmbeddingSettings, build_embedder
from services.search_tool.server import build_search_tool_server
from tests.agent.fake_search import FakeDocument, FakeSearch
from tests.search_tool.filter_cases import FIXTURE
from tests.search_tool.grpc_helpers import document
from tests.search_tool.grpc_helpers import value as struct_value

DOCUMENTS = [
    FakeDocument(
        "tempfile__chunk_0",
        "tempfile — Generate temporary files and directories",
        "TemporaryDirectory() creates a temporary directory; it is removed automatically "
        "when the context manager exits.",
        source="stdlib",
        entity_type="module",
        url="https://docs.python.org/3/library/tempfile.html",
    ),
    FakeDocument(
        "tempfile__chunk_1",
        "tempfile — mkdtemp",
        "mkdtemp() creates a temporary directory; the user is responsible for deleting it.",
        source="stdlib",
        entity_type="module",
        url="https://docs.python.org/3/library/tempfile.html#mkdtemp",
    ),
    FakeDocument(
        "shutil__chunk_0",
        "shutil — High-level file operations",
        "shutil.rmtree() deletes an entire directory tree.",
        source="stdlib",
        entity_type="module",
        url="https://docs.python.org/3/library/shutil.html",
    ),
    FakeDocument(
        "tutorial__chunk_0",
        "Tutorial — Reading and writing files",
        "open() returns a file object; use the with statement so the file is closed.",
        source="tutorial",
        entity_type="page",
        url="https://docs.python.org/3/tutorial/inputoutput.html",
    ),
]


@pytest.fixture
def search() -> FakeSearch:
    return FakeSearch(DOCUMENTS, collection="python-docs")


async def collect(events: AsyncIterator[AgentEvent]) -> list[AgentEvent]:
    return [event async for event in events]


def result_of(events: list[AgentEvent]) -> RunResult:
    last = events[-1]
    assert isinstance(last, Done)
    return last.result


def caller_filter(*groups: list[tuple[str, str, Any]]) -> CallerFilter:
    """A caller's filter as the agent API's edge hands it on: built on the wire from groups of
    `(field, operator, value)`, then converted in (`filter_wire.caller_filter`)."""
    message = search_pb2.Filter()
    for conditions in groups:
        group = message.groups.add()
        for field, operator, value in conditions:
            number = search_pb2.FilterOperator.Value(f"FILTER_OPERATOR_{operator.upper()}")
            group.conditions.add(field=field, operator=number, value=struct_value(value))
    return filter_wire.caller_filter(message)


async def run_events(loop: AgentLoop, **kwargs: object) -> list[AgentEvent]:
    from services.agent.run import RunRequest

    request = RunRequest(**{"collection": "python-docs", "query": "temporary directory", **kwargs})  # type: ignore[arg-type]
    return await collect(loop.stream(request))


FILTER_COLLECTION = "conformance"
"""The collection `filter_search_tool` holds: the shared filter fixture (tests/search_tool)."""


def fixture_document(doc: Document) -> search_tool_pb2.Document:
    """A document of the shared filter fixture as the search tool's UpsertDocuments takes it."""
    message = document(
        doc.id,
        doc.text,
        title=doc.title,
        source=doc.source,
        entity_type=doc.entity_type,
        url=doc.url,
        created_at=doc.created_at,
        metadata=dict(doc.metadata),
        breadcrumbs=[
            search_pb2.Breadcrumb(id=b.id, name=b.name, entity_type=b.entity_type)
            for b in doc.breadcrumbs
        ],
    )
    if doc.updated_at is not None:
        message.updated_at.FromDatetime(doc.updated_at)
    return message


@pytest.fixture
async def filter_search_tool(tmp_path: Path) -> AsyncIterator[QuarryServer]:
    """The real search tool, embedded engine, holding the shared filter fixture in
    `FILTER_COLLECTION`: what the agent's fakes and wire conversions are checked against."""
    settings = SearchToolSettings(
        server=ServerSettings(port=0, grace_s=0), data_dir=tmp_path / "data", log_format="text"
    )
    embedder = build_embedder(EmbeddingSettings())
    server = build_search_tool_server(settings, embedder_factory=lambda: embedder)
    await server.start()
    try:
        async with grpc.aio.insecure_channel(server.address) as channel:
            await search_tool_pb2_grpc.SearchToolServiceStub(channel).UpsertDocuments(
                search_tool_pb2.UpsertDocumentsRequest(
                    collection=FILTER_COLLECTION, documents=[fixture_document(d) for d in FIXTURE]
                )
            )
        yield server
    finally:
        await server.stop(0)


@pytest.fixture
async def real_search(filter_search_tool: QuarryServer) -> AsyncIterator[SearchToolClient]:
    """The agent's search-tool client on `filter_search_tool`."""
    async with grpc.aio.insecure_channel(filter_search_tool.address) as channel:
        yield SearchToolClient(channel)
