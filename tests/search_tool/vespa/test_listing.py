"""ListDocuments on Vespa, through gRPC: a search tool built as `python -m services.search_tool`
builds it, on the Vespa engine, whose Vespa is a bucketed stand-in (`bucketed_vespa.py`) behind
the recording server, spoken to by pyvespa's real HTTP/2 client.

A filter on document-level fields is listed by visiting the first chunks with Vespa's
continuation (`listing.py`), a page costing about its own size; anything else by the id-ordered
full read as before. Page tokens are opaque, validated and tied to the listing's filter."""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator, Sequence
from typing import Any

import grpc
import numpy as np
import numpy.typing as npt
import pytest
from google.protobuf import struct_pb2
from quarry.common.v1 import search_pb2
from quarry.searchtool.v1 import search_tool_pb2, search_tool_pb2_grpc

from services.common.settings import ServerSettings
from services.common.status import details_of_rpc_error
from services.search_tool.client import SearchToolClient
from services.search_tool.config import EngineSettings, SearchToolSettings, VespaSettings
from services.search_tool.documents import Chunk, chunk_id
from services.search_tool.engine.vespa.package import package_profile
from services.search_tool.server import build_search_tool_server
from tests.search_tool.engine_fixtures import DIMENSIONS, vector_for
from tests.search_tool.vespa.bucketed_vespa import BucketedVespa
from tests.search_tool.vespa.recording_server import Recorded, RecordingServer

DOCUMENTS = 60


class _FixtureEmbedder:
    model_name = "test-model"
    dimensions = DIMENSIONS
    tokenizer: Any = None
    scripts = None

    async def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        return np.stack([vector_for(t) for t in texts])


def _store(vespa: BucketedVespa, number: int) -> None:
    """Document `doc-NN`: 1-3 chunks, wiki or git, metadata year and team."""
    document = f"doc-{number:02}"
    for index in range(1 + number % 3):
        vespa.put(
            Chunk(
                id=chunk_id(document, index),
                document_id=document,
                chunk_index=index,
                text=f"text {number} part {index}",
                title=f"title {number}",
                source="wiki" if number % 2 == 0 else "git",
                metadata={"year": 2000 + number % 5, "team": "a" if number % 4 < 2 else "b"},
            )
        )


@pytest.fixture
async def listing() -> AsyncIterator[tuple[Any, BucketedVespa, RecordingServer, str]]:
    vespa = BucketedVespa()
    for number in range(DOCUMENTS):
        _store(vespa, number)
    server_side = RecordingServer(vespa.respond)
    await server_side.start()
    settings = SearchToolSettings(
        server=ServerSettings(port=0, grace_s=0),
        engine=EngineSettings(
            kind="vespa",
            vespa=VespaSettings(url=server_side.url, facts_ttl_s=0),
            readiness_interval_s=3600,
        ),
        log_format="text",
    )
    server = build_search_tool_server(settings, embedder_factory=_FixtureEmbedder)
    await server.start()
    try:
        async with grpc.aio.insecure_channel(server.address) as channel:
            yield (
                search_tool_pb2_grpc.SearchToolServiceStub(channel),
                vespa,
                server_side,
                (server.address),
            )
    finally:
        await server.stop(0)
        await server_side.close()


def _condition(
    field: str, operator: search_pb2.FilterOperator, value: struct_pb2.Value
) -> search_pb2.Filter:
    return search_pb2.Filter(
        groups=[
            search_pb2.FilterGroup(
                conditions=[search_pb2.FilterCondition(field=field, operator=operator, value=value)]
            )
        ]
    )


WIKI = _condition(
    "source", search_pb2.FILTER_OPERATOR_EQUALS, struct_pb2.Value(string_value="wiki")
)
GIT = _condition("source", search_pb2.FILTER_OPERATOR_EQUALS, struct_pb2.Value(string_value="git"))
LATER_CHUNKS = _condition(
    "chunk_index", search_pb2.FILTER_OPERATOR_GREATER_THAN, struct_pb2.Value(number_value=0)
)
TEAM_A = _condition(
    "metadata.team", search_pb2.FILTER_OPERATOR_EQUALS, struct_pb2.Value(string_value="a")
)


async def _pages(
    stub: Any, size: int, filter: search_pb2.Filter | None = None
) -> list[search_tool_pb2.ListDocumentsResponse]:
    pages = []
    token = ""
    while True:
        page = await stub.ListDocuments(
            search_tool_pb2.ListDocumentsRequest(
                collection="fixture", page_size=size, page_token=token, filter=filter
            )
        )
        pages.append(page)
        token = page.next_page_token
        if not token:
            return pages


def _visits(server: RecordingServer) -> list[Recorded]:
    return [r for r in server.requests if r.path == "/document/v1/quarry/chunk/docid"]


def _queries(server: RecordingServer) -> list[dict[str, Any]]:
    bodies = [r.json() for r in server.requests if r.path == "/search/"]
    return [b for b in bodies if b.get("ranking") != package_profile()]  # readiness left out


async def test_pages_visit_the_first_chunks_and_list_every_document_exactly_once(
    listing: tuple[Any, BucketedVespa, RecordingServer, str],
) -> None:
    """Seven to a page over 16 buckets of about four documents: pages end inside a visit's
    answer, so the cursor resumes inside it. Every document once, none twice, no page larger
    than asked, each with its own chunk count, source and metadata; the visits read each first
    chunk about once in all (not the collection per page), and queries only count chunks."""
    stub, vespa, server, _ = listing
    pages = await _pages(stub, 7)
    listed = [d for page in pages for d in page.documents]
    assert sorted(d.id for d in listed) == [f"doc-{n:02}" for n in range(DOCUMENTS)]
    assert len(listed) == DOCUMENTS
    assert all(len(page.documents) <= 7 for page in pages)
    assert len(pages) >= DOCUMENTS // 7
    for document in listed:
        number = int(document.id.removeprefix("doc-"))
        assert document.chunk_count == 1 + number % 3
        assert document.source == ("wiki" if number % 2 == 0 else "git")
        assert document.metadata["year"].int_value == 2000 + number % 5
    assert any(answer.documents > answer.wanted for answer in vespa.visits)  # overshoot met
    assert sum(answer.documents for answer in vespa.visits) < 2 * DOCUMENTS
    assert all(
        v.query["selection"].endswith("and chunk.chunk_index == 0")
        and v.query["selection"].startswith('chunk.collection == "fixture"')
        and v.query["fieldSet"] == "chunk:chunk_id,chunk_json"
        for v in _visits(server)
    )
    counts = _queries(server)
    assert counts
    assert all("all(group(document_id) max(" in b["yql"] for b in counts)
    assert all(b["yql"].count('"doc-') <= 7 for b in counts)  # the page's ids, not the rest


async def test_a_document_level_filter_rides_in_the_visit_selection(
    listing: tuple[Any, BucketedVespa, RecordingServer, str],
) -> None:
    stub, _, server, _ = listing
    pages = await _pages(stub, 9, WIKI)
    listed = [d for page in pages for d in page.documents]
    assert sorted(d.id for d in listed) == [f"doc-{n:02}" for n in range(0, DOCUMENTS, 2)]
    assert {d.source for d in listed} == {"wiki"}
    assert all('chunk.source == "wiki"' in v.query["selection"] for v in _visits(server))


@pytest.mark.parametrize(
    ("filter", "expected"),
    [
        (LATER_CHUNKS, [f"doc-{n:02}" for n in range(DOCUMENTS) if n % 3]),
        (TEAM_A, [f"doc-{n:02}" for n in range(DOCUMENTS) if n % 4 < 2]),
    ],
    ids=["a per-chunk field", "a metadata key (no document selection)"],
)
async def test_a_filter_visiting_cannot_serve_is_listed_by_id_as_before(
    listing: tuple[Any, BucketedVespa, RecordingServer, str],
    filter: search_pb2.Filter,
    expected: list[str],
) -> None:
    """`chunk_index > 0` matches later chunks only (chunk 0 would miss them); metadata has no
    document selection: both take the id-ordered read, and no visit is sent."""
    stub, _, server, _ = listing
    pages = await _pages(stub, 8, filter)
    listed = [d.id for page in pages for d in page.documents]
    assert listed == expected  # in id order, as the other engines list
    assert _visits(server) == []


async def test_the_client_lists_everything_through_vespa_paging(
    listing: tuple[Any, BucketedVespa, RecordingServer, str],
) -> None:
    """What `quarry ingest` reads to sync: every document with its chunk count."""
    _, _, server, address = listing
    async with SearchToolClient(address, timeout_s=30) as client:
        documents = await client.list_documents("fixture", filter=GIT)
    assert {d.id: d.chunk_count for d in documents} == {
        f"doc-{n:02}": 1 + n % 3 for n in range(1, DOCUMENTS, 2)
    }
    assert _visits(server)


async def test_documents_written_and_deleted_between_pages_leave_the_others_listed_once(
    listing: tuple[Any, BucketedVespa, RecordingServer, str],
) -> None:
    stub, vespa, _, _ = listing
    first = await stub.ListDocuments(
        search_tool_pb2.ListDocumentsRequest(collection="fixture", page_size=10)
    )
    seen = [d.id for d in first.documents]
    unlisted = sorted({f"doc-{n:02}" for n in range(DOCUMENTS)} - set(seen))
    for document in unlisted[:5]:
        vespa.remove_document(document)
    for number in range(DOCUMENTS, DOCUMENTS + 5):
        _store(vespa, number)
    token = first.next_page_token
    while token:
        page = await stub.ListDocuments(
            search_tool_pb2.ListDocumentsRequest(
                collection="fixture", page_size=10, page_token=token
            )
        )
        seen.extend(d.id for d in page.documents)
        token = page.next_page_token
    stayed = {f"doc-{n:02}" for n in range(DOCUMENTS)} - set(unlisted[:5])
    assert stayed <= set(seen)
    assert len(seen) == len(set(seen))
    assert not set(unlisted[:5]) & set(seen)


def _decoded(token: str) -> dict[str, Any]:
    payload: dict[str, Any] = json.loads(base64.urlsafe_b64decode(token))
    return payload


def _encoded(payload: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(payload).encode()).decode()


async def _refusal(stub: Any, token: str, filter: search_pb2.Filter | None = None) -> str:
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await stub.ListDocuments(
            search_tool_pb2.ListDocumentsRequest(
                collection="fixture", page_size=7, page_token=token, filter=filter
            )
        )
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    violations = details_of_rpc_error(refused.value).violations
    assert [v.field for v in violations] == ["page_token"]
    return str(violations[0].description)


async def test_a_page_token_is_tied_to_the_filter_it_was_issued_for(
    listing: tuple[Any, BucketedVespa, RecordingServer, str],
) -> None:
    stub, _, server, _ = listing
    first = await stub.ListDocuments(
        search_tool_pb2.ListDocumentsRequest(collection="fixture", page_size=7, filter=WIKI)
    )
    visits = len(_visits(server))
    assert "another collection or filter" in await _refusal(stub, first.next_page_token, GIT)
    assert "another collection or filter" in await _refusal(stub, first.next_page_token)
    assert len(_visits(server)) == visits  # refused before Vespa is asked


@pytest.mark.parametrize(
    "cursor",
    [
        "not json",
        json.dumps({"c": "%%%", "w": 0, "a": "", "e": ""}),  # not a progress token's alphabet
        json.dumps({"c": "", "w": 5000, "a": "", "e": ""}),  # more than a visit asks for
        json.dumps({"c": "", "w": 0, "a": "doc-03", "e": ""}),  # an id from no response
        json.dumps({"c": "QUJD", "w": 7, "a": "", "e": "xyz"}),  # not a digest
        json.dumps({"c": "QUJD", "w": 7}),
    ],
)
async def test_a_cursor_this_service_did_not_write_is_refused_before_vespa_is_asked(
    listing: tuple[Any, BucketedVespa, RecordingServer, str], cursor: str
) -> None:
    stub, _, server, _ = listing
    first = await stub.ListDocuments(
        search_tool_pb2.ListDocumentsRequest(collection="fixture", page_size=7)
    )
    forged = _encoded({**_decoded(first.next_page_token), "cursor": cursor})
    visits = len(_visits(server))
    await _refusal(stub, forged)
    assert len(_visits(server)) == visits


async def test_a_continuation_vespa_refuses_is_an_invalid_page_token(
    listing: tuple[Any, BucketedVespa, RecordingServer, str],
) -> None:
    """Well formed, but no progress token Vespa issued: Vespa answers 400 and the caller hears
    INVALID_ARGUMENT naming `page_token`, with Vespa's message (not FAILED_PRECONDITION)."""
    stub, _, server, _ = listing
    first = await stub.ListDocuments(
        search_tool_pb2.ListDocumentsRequest(collection="fixture", page_size=7)
    )
    cursor = json.dumps({"c": "Zm9yZ2Vk", "w": 0, "a": "", "e": ""})
    forged = _encoded({**_decoded(first.next_page_token), "cursor": cursor})
    message = await _refusal(stub, forged)
    assert "Failed to parse progress token" in message
    assert _visits(server)[-1].query["continuation"] == "Zm9yZ2Vk"


@pytest.mark.parametrize("token", ["garbage", "eyJ4IjogMX0=", "W10=", "x" * 100_000])
async def test_a_token_this_service_did_not_issue_is_refused(
    listing: tuple[Any, BucketedVespa, RecordingServer, str], token: str
) -> None:
    stub, _, server, _ = listing
    await _refusal(stub, token)
    assert _visits(server) == []


async def test_writes_that_move_a_resumed_visit_repeat_documents_and_never_skip_one(
    listing: tuple[Any, BucketedVespa, RecordingServer, str],
) -> None:
    """The first page ends inside a visit's answer; then every document of that answer's last
    bucket is deleted, so the same request now has to visit further buckets to find as many
    documents and ends elsewhere. The next page serves that answer from its start: documents of
    the first page come again, and no document stored throughout is missed."""
    stub, vespa, _, _ = listing
    first = await stub.ListDocuments(
        search_tool_pb2.ListDocumentsRequest(collection="fixture", page_size=7)
    )
    cursor = json.loads(_decoded(first.next_page_token)["cursor"])
    assert cursor["a"]  # the page ended inside the answer
    (answer,) = vespa.visits
    assert answer.continuation is not None
    last_bucket = BucketedVespa.bucket_of_token(answer.continuation) - 1
    removed = {
        f["document_id"] for key, f in vespa.documents.items() if vespa.bucket(key) == last_bucket
    }
    for document in removed:
        vespa.remove_document(document)
    seen = [d.id for d in first.documents]
    token = first.next_page_token
    while token:
        page = await stub.ListDocuments(
            search_tool_pb2.ListDocumentsRequest(
                collection="fixture", page_size=7, page_token=token
            )
        )
        seen.extend(d.id for d in page.documents)
        token = page.next_page_token
    stayed = {f"doc-{n:02}" for n in range(DOCUMENTS)} - removed
    assert stayed <= set(seen)
    assert len(seen) > len(set(seen))  # served again from the start of the answer
