"""Storage faults of the PostgreSQL engine, told by SQLSTATE: a full disk (53100 disk_full) answers
a write RESOURCE_EXHAUSTED `STORAGE_FULL` naming the PostgreSQL database, the SQLSTATE and the
collection, and reads keep working; a damaged relation (XX001 data_corrupted, XX002
index_corrupted) answers DATA_LOSS `COLLECTION_DAMAGED` naming the collection.

A PostgreSQL whose disk fills or whose pages rot cannot be made on demand here (a tablespace on a
tiny filesystem needs a mount this machine does not allow), so the real psycopg exception classes
the server's SQLSTATEs become are raised at the connection boundary (`AsyncCursor.executemany`,
`AsyncConnection.execute`) of a real search tool on the embedded PostgreSQL. The message text is
deliberately not PostgreSQL's: the mapping must not depend on it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import psycopg
import pytest
from quarry.searchtool.v1 import search_tool_pb2, search_tool_pb2_grpc

from services.common.postgres import PostgresSettings
from services.common.settings import ServerSettings
from services.common.status import details_of_rpc_error
from services.search_tool.config import ChunkingSettings, EngineSettings, SearchToolSettings
from services.search_tool.embedding import Embedder
from services.search_tool.server import build_search_tool_server
from tests.search_tool.grpc_helpers import document, search

pytestmark = pytest.mark.postgres


@pytest.fixture
async def stub(postgres_dsn: str, embedder: Embedder, tmp_path: Path) -> AsyncIterator[Any]:
    secret = tmp_path / "dsn"
    secret.write_text(postgres_dsn)
    settings = SearchToolSettings(
        server=ServerSettings(port=0, grace_s=0.5),
        data_dir=tmp_path / "unused",
        chunking=ChunkingSettings(chunk_tokens=32, overlap_tokens=8),
        engine=EngineSettings(
            kind="postgres",
            postgres=PostgresSettings(dsn_file=secret, pool_timeout_s=2, connect_timeout_s=2),
        ),
        log_format="text",
    )
    server = build_search_tool_server(settings, embedder_factory=lambda: embedder)
    await server.start()
    async with grpc.aio.insecure_channel(server.address) as channel:
        yield search_tool_pb2_grpc.SearchToolServiceStub(channel)
    await server.stop(0)


def _upsert(doc_id: str, text: str) -> search_tool_pb2.UpsertDocumentsRequest:
    return search_tool_pb2.UpsertDocumentsRequest(
        collection="docs", documents=[document(doc_id, text)]
    )


async def test_a_full_database_disk_answers_resource_exhausted_naming_it_and_reads_go_on(
    stub: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    await stub.UpsertDocuments(_upsert("a", "kettles boil water"))

    async def disk_full(self: Any, *args: Any, **kwargs: Any) -> None:
        raise psycopg.errors.DiskFull("the test's disk is full")

    monkeypatch.setattr(psycopg.AsyncCursor, "executemany", disk_full)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.UpsertDocuments(_upsert("b", "gardens need water"))
    details = details_of_rpc_error(caught.value)
    assert details.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert details.reason == "STORAGE_FULL"
    assert details.metadata["sqlstate"] == "53100"
    assert details.metadata["collection"] == "docs"
    assert "the PostgreSQL database is full" in details.message
    assert "SQLSTATE 53100" in details.message
    assert details.retry_after_s is not None
    assert details.retry_after_s > 0
    reply = await stub.Search(search("docs", "kettles"))
    assert [r.chunk.document_id for r in reply.results] == ["a"]


@pytest.mark.parametrize(
    "damage", [psycopg.errors.DataCorrupted, psycopg.errors.IndexCorrupted], ids=["XX001", "XX002"]
)
async def test_a_damaged_relation_answers_data_loss_naming_the_collection(
    stub: Any, monkeypatch: pytest.MonkeyPatch, damage: type[psycopg.Error]
) -> None:
    await stub.UpsertDocuments(_upsert("a", "kettles boil water"))
    real = psycopg.AsyncConnection.execute

    async def damaged(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        if "SELECT" in str(query if isinstance(query, str | bytes) else query.as_string(self)):
            raise damage("the test damaged this page")
        return await real(self, query, *args, **kwargs)

    monkeypatch.setattr(psycopg.AsyncConnection, "execute", damaged)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.Search(search("docs", "kettles"))
    details = details_of_rpc_error(caught.value)
    assert details.code == grpc.StatusCode.DATA_LOSS
    assert details.reason == "COLLECTION_DAMAGED"
    assert details.metadata["collection"] == "docs"
    assert details.metadata["sqlstate"] == damage.sqlstate
    assert "collection docs is damaged" in details.message


async def test_another_database_error_is_not_called_damage_or_a_full_disk(
    stub: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server error whose text says "No space left on device" but whose SQLSTATE is an
    undefined table is a bug: INTERNAL, not STORAGE_FULL (the text is not read)."""
    await stub.UpsertDocuments(_upsert("a", "kettles boil water"))

    async def undefined(self: Any, *args: Any, **kwargs: Any) -> None:
        raise psycopg.errors.UndefinedTable("No space left on device (os error 28) corrupt")

    monkeypatch.setattr(psycopg.AsyncCursor, "executemany", undefined)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.UpsertDocuments(_upsert("b", "gardens need water"))
    assert caught.value.code() == grpc.StatusCode.INTERNAL
