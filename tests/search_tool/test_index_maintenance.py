"""Index maintenance converges by itself: a collection written only through the API ends up
compacted into one fragment with every row inside BM25 and the scalar indexes once writes pause,
as far as the settle's thresholds (`settle_unindexed_factor`, `settle_fragments`) make that due."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
from quarry.searchtool.v1 import search_tool_pb2, search_tool_pb2_grpc

from services.common.settings import ServerSettings
from services.search_tool.config import EngineSettings, SearchToolSettings
from services.search_tool.documents import Document
from services.search_tool.embedding import Embedder
from services.search_tool.engine.base import CollectionSpec, EngineQuery, Strategy
from services.search_tool.engine.lancedb import LanceDBEngine, indexes
from services.search_tool.engine.lancedb.indexes import IndexPolicy
from services.search_tool.server import build_search_tool_server
from tests.search_tool.engine_fixtures import DIMENSIONS, records
from tests.search_tool.filter_cases import FIXTURE
from tests.search_tool.grpc_helpers import document

NEVER = IndexPolicy(
    fts_refresh_rows=1_000_000,
    fts_min_refresh_rows=1_000_000,
    settle_unindexed_factor=0,
    settle_fragments=2,
)
"""The write path alone never rebuilds an index under this policy; the settle once writes pause
folds in every row and compacts every second fragment (its thresholds at their least)."""


async def _unindexed(table: Any) -> tuple[int, int]:
    """(data fragments, rows outside some index)."""
    fragments = int((await table.stats())["fragment_stats"]["num_fragments"])
    unindexed = sum(index.num_unindexed_rows or 0 for index in await table.list_indices())
    return fragments, unindexed


async def _written_in_three_requests(engine: LanceDBEngine) -> Any:
    await engine.ensure_collection("c", CollectionSpec("test-model", DIMENSIONS))
    for part in (FIXTURE[:2], FIXTURE[2:4], FIXTURE[4:]):
        await engine.upsert("c", records(part))
    return await engine._table("c")


async def test_indexes_converge_once_writes_pause(tmp_path: Path) -> None:
    engine = await LanceDBEngine.open(tmp_path / "db", policy=NEVER, settle_after_s=0.01)
    try:
        table = await _written_in_three_requests(engine)
        await engine.maintenance_settled("c")
        assert await _unindexed(table) == (1, 0)
        await engine.delete_chunks("c", ["alpha__chunk_0"])
        await engine.maintenance_settled("c")
        assert await _unindexed(table) == (1, 0)
    finally:
        await engine.close()


async def test_without_maintenance_api_writes_stay_unindexed(tmp_path: Path) -> None:
    engine = await LanceDBEngine.open(tmp_path / "db", policy=NEVER, settle_after_s=None)
    try:
        table = await _written_in_three_requests(engine)
        await engine.maintenance_settled("c")
        fragments, unindexed = await _unindexed(table)
        assert fragments == 3
        assert unindexed > 0
    finally:
        await engine.close()


async def test_a_collection_ingested_only_through_grpc_reaches_the_indexed_state(
    tmp_path: Path, embedder: Embedder
) -> None:
    settings = SearchToolSettings(
        server=ServerSettings(port=0),
        data_dir=tmp_path / "data",
        engine=EngineSettings(
            settle_after_s=0.05,
            fts_refresh_rows=1_000_000,
            settle_unindexed_factor=0,
            settle_fragments=2,
        ),
    )
    server = build_search_tool_server(settings, embedder_factory=lambda: embedder)
    await server.start()
    try:
        async with grpc.aio.insecure_channel(server.address) as channel:
            stub = search_tool_pb2_grpc.SearchToolServiceStub(channel)
            for i in range(3):
                await stub.UpsertDocuments(
                    search_tool_pb2.UpsertDocumentsRequest(
                        collection="api",
                        documents=[document(f"doc {i}/{j}", f"text {i} {j}") for j in range(5)],
                    )
                )
        assert server.service is not None
        engine = server.service.engine
        assert isinstance(engine, LanceDBEngine)
        await engine.maintenance_settled("api")
        assert await _unindexed(await engine._table("api")) == (1, 0)
    finally:
        await server.stop(0)


async def test_writes_return_and_searches_answer_while_a_background_refresh_is_held(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = await LanceDBEngine.open(tmp_path / "db", policy=NEVER, settle_after_s=0.01)
    try:
        await engine.ensure_collection("c", CollectionSpec("test-model", DIMENSIONS))
        in_refresh, release = asyncio.Event(), asyncio.Event()
        build_fts = indexes._build_fts

        async def held_build(table: Any) -> None:
            in_refresh.set()
            await release.wait()
            await build_fts(table)

        monkeypatch.setattr(indexes, "_build_fts", held_build)
        for part in (FIXTURE[:2], FIXTURE[2:4], FIXTURE[4:]):
            # a guard against a deadlock, not a timing: a refresh may already be held here
            await asyncio.wait_for(engine.upsert("c", records(part)), timeout=60)
        await asyncio.wait_for(in_refresh.wait(), timeout=60)  # maintenance is now inside

        late = Document(id="late", text="a walrus arrived during the refresh", source="s")
        write = asyncio.create_task(engine.upsert("c", records([late])))
        delete = asyncio.create_task(engine.delete_chunks("c", ["alpha__chunk_0"]))
        done, _ = await asyncio.wait({write, delete}, timeout=60)
        assert done == {write, delete}, "a write waited for the background refresh"
        assert write.result() == 1
        assert delete.result() == 1
        assert not release.is_set()
        assert engine._maintenance.pending("c")
        empty = np.zeros((0, DIMENSIONS), np.float32)
        page = await engine.search("c", EngineQuery(Strategy.KEYWORD, "walrus", empty, limit=5))
        assert [h.chunk.id for h in page.hits] == ["late__chunk_0"]

        release.set()
        await engine.maintenance_settled("c")
        # the writes landed during the refresh, so it ran again after them and converged
        assert await _unindexed(await engine._table("c")) == (1, 0)
        assert (await engine.describe("c")).chunk_count == len(FIXTURE)
    finally:
        await engine.close()


def _notes(count: int, start: int = 0) -> list[Document]:
    return [
        Document(id=f"note-{i}", text=f"field note {i} about herons", source="s")
        for i in range(start, start + count)
    ]


@asynccontextmanager
async def _forty_rows_indexed(
    path: Path, *, unindexed_factor: float, fragments: int
) -> AsyncIterator[tuple[LanceDBEngine, Any]]:
    """An engine whose write path never rebuilds, settling with these thresholds, and a
    collection of 40 rows in one fragment, every row indexed."""
    policy = IndexPolicy(
        fts_refresh_rows=1_000_000,
        fts_min_refresh_rows=1_000_000,
        settle_unindexed_factor=unindexed_factor,
        settle_fragments=fragments,
    )
    engine = await LanceDBEngine.open(path, policy=policy, settle_after_s=0.01)
    try:
        await engine.ensure_collection("c", CollectionSpec("test-model", DIMENSIONS))
        await engine.upsert("c", records(_notes(40)))
        await engine.refresh("c")
        table = await engine._table("c")
        assert await _unindexed(table) == (1, 0)
        yield engine, table
    finally:
        await engine.close()


async def test_a_small_write_into_a_large_collection_is_scanned_until_enough_rows_follow(
    tmp_path: Path,
) -> None:
    """The settle folds new rows into the indexes only once they number
    `settle_unindexed_factor` × √rows: each fold reads every row, so one small write at a time
    used to cost a large collection a full rebuild (and a compaction and a vector-index rebuild)
    after every pause."""
    async with _forty_rows_indexed(tmp_path / "db", unindexed_factor=0.5, fragments=1_000) as (
        engine,
        table,
    ):
        late = Document(id="late", text="a walrus came ashore", source="s")
        await engine.upsert("c", records([late]))  # 1 row: under 0.5 × √41 = 3.2
        await engine.maintenance_settled("c")
        fragments, unindexed = await _unindexed(table)
        assert fragments == 2, "a small write was compacted at once"
        assert unindexed > 0, "a small write was folded into the indexes at once"
        empty = np.zeros((0, DIMENSIONS), np.float32)
        page = await engine.search("c", EngineQuery(Strategy.KEYWORD, "walrus", empty, limit=5))
        assert [h.chunk.id for h in page.hits] == ["late__chunk_0"]

        await engine.upsert("c", records(_notes(4, start=40)))  # 5 rows new: over 3.2
        await engine.maintenance_settled("c")
        assert await _unindexed(table) == (1, 0)
        page = await engine.search("c", EngineQuery(Strategy.KEYWORD, "walrus", empty, limit=5))
        assert [h.chunk.id for h in page.hits] == ["late__chunk_0"]


async def test_small_writes_are_compacted_once_settle_fragments_accumulate(
    tmp_path: Path,
) -> None:
    async with _forty_rows_indexed(tmp_path / "db", unindexed_factor=1.0, fragments=4) as (
        engine,
        table,
    ):
        seen = []
        for i in range(3):
            await engine.upsert("c", records(_notes(1, start=100 + i)))
            await engine.maintenance_settled("c")
            seen.append((await _unindexed(table))[0])
        # 2 and 3 fragments are left for later; at the 4th the settle compacts though the rows
        # stay under √43 = 6.6: the three small fragments become one, kept apart from the
        # indexed one (Lance compacts fragments an index covers apart from those it does not)
        assert seen == [2, 3, 2]
        assert (await engine.describe("c")).chunk_count == 43


def test_the_settle_thresholds_are_configurable() -> None:
    policy = EngineSettings(settle_unindexed_factor=0.5, settle_fragments=8).index_policy()
    assert (policy.settle_unindexed_factor, policy.settle_fragments) == (0.5, 8)
    with pytest.raises(ValueError, match="settle_fragments"):
        EngineSettings(settle_fragments=1)
    with pytest.raises(ValueError, match="settle_unindexed_factor"):
        EngineSettings(settle_unindexed_factor=-0.5)


class _CompactionLoses:
    """A table whose compaction loses the commit race to a concurrent write, as Lance reports."""

    name = "racy"

    async def stats(self) -> dict[str, Any]:
        return {"fragment_stats": {"num_fragments": 5}}

    async def optimize(self, **_: Any) -> None:
        raise RuntimeError(
            "lance error: Retryable commit conflict for version 41: This Rewrite transaction was "
            "preempted by concurrent transaction Delete at version 41. Please retry."
        )


class _CompactionBreaks(_CompactionLoses):
    async def optimize(self, **_: Any) -> None:
        raise RuntimeError("lance error: disk full")


async def test_a_compaction_that_loses_to_a_concurrent_write_is_given_up() -> None:
    compacted = await indexes._compact(
        _CompactionLoses(), IndexPolicy(), due=True, fragments_due=64
    )
    assert compacted is False


async def test_a_compaction_that_fails_otherwise_still_raises() -> None:
    with pytest.raises(RuntimeError, match="disk full"):
        await indexes._compact(_CompactionBreaks(), IndexPolicy(), due=True, fragments_due=64)


async def test_a_collection_left_unindexed_by_a_stopped_writer_is_maintained_when_reopened(
    tmp_path: Path,
) -> None:
    writer = await LanceDBEngine.open(tmp_path / "db", policy=NEVER, settle_after_s=None)
    try:
        await _written_in_three_requests(writer)  # stops before any maintenance ran
    finally:
        await writer.close()
    reader = await LanceDBEngine.open(tmp_path / "db", policy=NEVER, settle_after_s=0.01)
    try:
        table = await reader._table("c")
        assert reader._maintenance.pending("c")
        await reader.maintenance_settled("c")
        assert await _unindexed(table) == (1, 0)
    finally:
        await reader.close()
    again = await LanceDBEngine.open(tmp_path / "db", policy=NEVER, settle_after_s=0.01)
    try:
        await again._table("c")
        assert not again._maintenance.pending("c"), "a converged collection was maintained again"
    finally:
        await again.close()


async def test_dropping_an_unindexed_collection_just_opened_leaves_no_maintenance(
    tmp_path: Path,
) -> None:
    writer = await LanceDBEngine.open(tmp_path / "db", policy=NEVER, settle_after_s=None)
    try:
        await _written_in_three_requests(writer)
    finally:
        await writer.close()
    engine = await LanceDBEngine.open(tmp_path / "db", policy=NEVER, settle_after_s=0.01)
    try:
        await engine.drop_collection("c")  # opens it (finding it unindexed) to drop it
        assert not engine._maintenance.pending("c")
        assert await engine.list_collections() == []
    finally:
        await engine.close()
