"""Storage faults of the search tool, made for real: a full filesystem (a small tmpfs, or a file
size limit of 0 in a subprocess where none can be mounted) answers writes RESOURCE_EXHAUSTED
naming the data directory and the cause, leaves no empty collection behind and keeps serving
reads; a collection whose files the test damaged answers DATA_LOSS naming it, is listed as
damaged, and every other collection keeps working."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeAlias

import grpc
import pytest
from quarry.searchtool.v1 import search_tool_pb2

from services.common.settings import ServerSettings
from services.common.status import details_of_rpc_error
from services.search_tool.config import SearchToolSettings
from services.search_tool.embedding import Embedder
from tests.faults import can_mount_tmpfs, damage, fill, small_filesystem
from tests.search_tool.grpc_helpers import serving

Stub: TypeAlias = Any


def _settings(data_dir: Path) -> SearchToolSettings:
    return SearchToolSettings(
        server=ServerSettings(port=0, grace_s=0.5), data_dir=data_dir, log_format="text"
    )


@asynccontextmanager
async def _serving(data_dir: Path, embedder: Embedder) -> AsyncIterator[Stub]:
    async with serving(_settings(data_dir), embedder) as stub:
        yield stub


def _documents(count: int, words: str) -> list[search_tool_pb2.Document]:
    return [search_tool_pb2.Document(id=f"d{n}", text=f"{words}{n} " * 40) for n in range(count)]


async def _write(stub: Stub, collection: str, count: int = 5, words: str = "alpha beta ") -> None:
    await stub.UpsertDocuments(
        search_tool_pb2.UpsertDocumentsRequest(
            collection=collection, documents=_documents(count, words)
        )
    )


async def _refused(call: Callable[[], Awaitable[object]]) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call()
    return caught.value


async def _names(stub: Stub) -> dict[str, str]:
    reply = await stub.ListCollections(search_tool_pb2.ListCollectionsRequest())
    return {c.name: c.damage for c in reply.collections}


@pytest.fixture
def tmpfs(tmp_path: Path) -> Path:
    if not can_mount_tmpfs(tmp_path / "probe"):
        pytest.skip("no tmpfs can be mounted here; the RLIMIT_FSIZE test covers a full disk")
    return tmp_path / "small"


async def test_on_a_full_disk_writes_are_resource_exhausted_naming_the_data_dir_and_reads_go_on(
    tmpfs: Path, embedder: Embedder
) -> None:
    with small_filesystem(tmpfs, 3 * 1024 * 1024):
        data_dir = tmpfs / "data"
        async with _serving(data_dir, embedder) as stub:
            await _write(stub, "kept")
            fill(tmpfs)

            for collection in ("kept", "fresh"):
                error = await _refused(lambda c=collection: _write(stub, c, 5, "gamma delta "))  # type: ignore[misc]
                assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, error.details()
                details = details_of_rpc_error(error)
                assert details.reason == "STORAGE_FULL"
                assert details.metadata["data_dir"] == str(data_dir)
                assert str(data_dir) in details.message
                assert "No space left on device" in details.message
                assert details.retry_after_s == 60.0

            assert await _names(stub) == {"kept": ""}  # no empty collection left behind
            reply = await stub.Search(
                search_tool_pb2.SearchRequest(collection="kept", query={"primary": "alpha"})
            )
            assert reply.results
            (tmpfs / "filler").unlink()
            await _write(stub, "fresh", 2, "gamma delta ")
            assert set(await _names(stub)) == {"kept", "fresh"}


_FSIZE_SCRIPT = textwrap.dedent(
    """
    import asyncio, json, resource, signal, sys
    from pathlib import Path
    from services.search_tool.embedding import EmbeddingSettings, build_embedder
    from tests.search_tool.test_storage_faults import _names, _refused, _serving, _write

    async def main(data_dir):
        async with _serving(data_dir, build_embedder(EmbeddingSettings())) as stub:
            await _write(stub, "kept")
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of a killed process
            resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))  # no file may grow any more
            codes = {}
            for collection in ("kept", "fresh"):
                error = await _refused(lambda: _write(stub, collection, 5, "gamma delta "))
                codes[collection] = [error.code().name, error.details()]
            from quarry.searchtool.v1 import search_tool_pb2
            reply = await stub.Search(
                search_tool_pb2.SearchRequest(collection="kept", query={"primary": "alpha"})
            )
            names = await _names(stub)
            print(json.dumps({"codes": codes, "names": names, "hits": len(reply.results)}))

    asyncio.run(main(Path(sys.argv[1])))
    """
)


def test_a_file_size_limit_is_resource_exhausted_like_a_full_disk(tmp_path: Path) -> None:
    """The documented equivalent of a full disk where no tmpfs can be mounted."""
    done = subprocess.run(
        [sys.executable, "-c", _FSIZE_SCRIPT, str(tmp_path / "data")],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    for collection in ("kept", "fresh"):
        code, message = result["codes"][collection]
        assert code == "RESOURCE_EXHAUSTED", message
        assert str(tmp_path / "data") in message
        assert "File too large" in message
    assert result["names"] == {"kept": ""}
    assert result["hits"] > 0


async def _damaged(tmp_path: Path, embedder: Embedder, part: str) -> Path:
    """Two collections written and closed, then 4 KB of every `part` file of `bad` overwritten."""
    data_dir = tmp_path / "data"
    async with _serving(data_dir, embedder) as stub:
        await _write(stub, "good", 20)
        await _write(stub, "bad", 20)
    files = [p for p in (data_dir / "bad.lance").rglob("*") if p.is_file() and part in str(p)]
    assert files
    for path in files:
        size = path.stat().st_size
        damage(path, offset=size // 3, length=min(4096, max(1, size // 3)))
    return data_dir


async def test_a_collection_with_damaged_versions_is_data_loss_listed_as_damaged_and_deletable(
    tmp_path: Path, embedder: Embedder
) -> None:
    data_dir = await _damaged(tmp_path, embedder, "_versions")
    async with _serving(data_dir, embedder) as stub:
        listed = await _names(stub)
        assert listed["good"] == ""
        assert "collection bad is damaged" in listed["bad"]
        calls: list[Callable[[], Awaitable[object]]] = [
            lambda: stub.GetCollection(search_tool_pb2.GetCollectionRequest(collection="bad")),
            lambda: stub.Search(
                search_tool_pb2.SearchRequest(collection="bad", query={"primary": "alpha"})
            ),
            lambda: stub.ReadDocument(
                search_tool_pb2.ReadDocumentRequest(collection="bad", document_id="d1")
            ),
            lambda: _write(stub, "bad", 1),
        ]
        for call in calls:
            error = await _refused(call)
            assert error.code() == grpc.StatusCode.DATA_LOSS, error.details()
            details = details_of_rpc_error(error)
            assert details.reason == "COLLECTION_DAMAGED"
            assert details.metadata == {"collection": "bad"}
        reply = await stub.Search(
            search_tool_pb2.SearchRequest(collection="good", query={"primary": "alpha"})
        )
        assert reply.results
        await stub.DeleteCollection(search_tool_pb2.DeleteCollectionRequest(collection="bad"))
        assert await _names(stub) == {"good": ""}


async def test_a_collection_with_damaged_data_files_answers_searches_data_loss(
    tmp_path: Path, embedder: Embedder
) -> None:
    data_dir = await _damaged(tmp_path, embedder, "/data/")
    async with _serving(data_dir, embedder) as stub:
        error = await _refused(
            lambda: stub.Search(
                search_tool_pb2.SearchRequest(collection="bad", query={"primary": "alpha"})
            )
        )
        assert error.code() == grpc.StatusCode.DATA_LOSS, error.details()
        assert "collection bad is damaged" in (error.details() or "")
        good = await stub.Search(
            search_tool_pb2.SearchRequest(collection="good", query={"primary": "alpha"})
        )
        assert good.results
