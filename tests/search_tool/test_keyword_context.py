"""A chunk's keyword index also sees its neighbouring chunks (`chunking.keyword_context_chunks`):
a KEYWORD search finds the chunks around a word as well as the one that holds it, ranks the one
that holds it first, and never returns the neighbours' text as a hit's text."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from quarry.common.v1 import search_pb2
from quarry.searchtool.v1 import search_tool_pb2

from services.search_tool.config import ChunkingSettings, SearchToolSettings
from services.search_tool.embedding import Embedder
from tests.search_tool.grpc_helpers import document, search, serving

KEYWORD = search_pb2.RETRIEVAL_STRATEGY_KEYWORD
HYBRID = search_pb2.RETRIEVAL_STRATEGY_HYBRID
SENTENCES = [
    f"Paragraph {i} describes the coastline survey and its tide measurements in detail."
    for i in range(12)
]
SENTENCES[6] = "Paragraph 6 records one narwhal seen near the northern glacier front."
REPORT = document("survey", " ".join(SENTENCES), title="Coastline survey")


@asynccontextmanager
async def _service(
    settings: SearchToolSettings, embedder: Embedder, context: int
) -> AsyncIterator[Any]:
    chunking = ChunkingSettings(chunk_tokens=32, overlap_tokens=8, keyword_context_chunks=context)
    async with serving(settings.model_copy(update={"chunking": chunking}), embedder) as stub:
        yield stub


async def _upsert(stub: Any) -> Any:
    return await stub.UpsertDocuments(
        search_tool_pb2.UpsertDocumentsRequest(collection="c", documents=[REPORT])
    )


async def _hits(stub: Any, strategy: search_pb2.RetrievalStrategy = KEYWORD) -> list[Any]:
    return list((await stub.Search(search("c", "narwhal", strategy, limit=20))).results)


async def test_keyword_search_finds_the_neighbours_of_the_chunk_holding_the_word_ranked_after_it(
    settings: SearchToolSettings, embedder: Embedder
) -> None:
    async with _service(settings, embedder, context=1) as stub:
        assert (await _upsert(stub)).chunks_upserted > 4
        hits = await _hits(stub)
    holding = [h for h in hits if "narwhal" in h.chunk.text]
    around = [h for h in hits if "narwhal" not in h.chunk.text]
    assert holding
    assert around, [h.chunk.chunk_index for h in hits]
    assert hits[: len(holding)] == holding  # the chunks that hold the word come first
    indexes = {h.chunk.chunk_index for h in holding}
    for hit in around:  # neighbours, one chunk away, returned with their own text
        assert min(abs(hit.chunk.chunk_index - i) for i in indexes) == 1
        assert hit.chunk.text in REPORT.text
    assert max(h.score for h in around) < min(h.score for h in holding)


async def test_without_keyword_context_only_the_chunks_holding_the_word_match(
    settings: SearchToolSettings, embedder: Embedder
) -> None:
    async with _service(settings, embedder, context=0) as stub:
        await _upsert(stub)
        hits = await _hits(stub)
    assert hits
    assert all("narwhal" in h.chunk.text for h in hits)


async def test_changing_the_keyword_context_rewrites_unchanged_documents_on_their_next_upsert(
    settings: SearchToolSettings, embedder: Embedder
) -> None:
    async with _service(settings, embedder, context=0) as stub:
        first = await _upsert(stub)
        assert (await _upsert(stub)).chunks_upserted == 0  # same settings: nothing to do
        before = len(await _hits(stub))
    async with _service(settings, embedder, context=1) as stub:
        assert len(await _hits(stub)) == before  # stored rows keep their index until rewritten
        again = await _upsert(stub)
        assert (again.chunks_upserted, again.chunks_deleted) == (first.chunks_upserted, 0)
        after = await _hits(stub)
        collection = await stub.GetCollection(search_tool_pb2.GetCollectionRequest(collection="c"))
    assert len(after) > before
    assert collection.collection.chunk_count == first.chunks_upserted


async def test_hybrid_scores_the_neighbours_on_both_sides_and_keeps_the_holder_first(
    settings: SearchToolSettings, embedder: Embedder
) -> None:
    async with _service(settings, embedder, context=1) as stub:
        await _upsert(stub)
        hits = await _hits(stub, HYBRID)
    assert "narwhal" in hits[0].chunk.text
    assert all(h.HasField("keyword_score") and h.HasField("dense_score") for h in hits)
