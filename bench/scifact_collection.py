"""SciFact as a search tool collection, built once under `var/` and reused by every evaluation.

The corpus goes through the product's own ingest (`SearchService.upsert_documents`: validation,
chunking, embedding, batched writes), in process; the embedder's vectors are cached on disk
(`bench/embedding_cache.py`), so rebuilding the collection or embedding the queries again costs
nothing the second time.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from bench.embedding_cache import CachedEmbedder, HashedEmbedder
from bench.harness import VAR_DIR, SciFact, note, settings_for
from services.search_tool.config import SearchToolSettings
from services.search_tool.documents import Document
from services.search_tool.embedding import build_embedder
from services.search_tool.server import open_engine
from services.search_tool.service import SearchService

COLLECTION = "scifact"
INGEST_BATCH = 64
VECTOR_CACHE = VAR_DIR / "eval" / "scifact-vectors.npz"
HASHED_DATA_DIR = VAR_DIR / "eval" / "scifact-hashed"
"""Where the latency benches' `--hashed-vectors` collection lives (never the real one's)."""


def cached_embedder(cache: Path = VECTOR_CACHE) -> CachedEmbedder:
    """MiniLM (the default embedder) behind the on-disk vector cache."""
    return CachedEmbedder(build_embedder(settings_for(Path()).embedding), cache)


def hashed_embedder() -> CachedEmbedder:
    """`HashedEmbedder` (latency only) behind the same cache type, so a query's vector costs
    the search path what a cached MiniLM vector costs (`bench/peers/search.py`)."""
    inner = HashedEmbedder(build_embedder(settings_for(Path()).embedding))
    return CachedEmbedder(inner, HASHED_DATA_DIR.with_name("scifact-hashed-vectors.npz"))


async def build_collection(
    data_dir: Path,
    data: SciFact,
    embedder: CachedEmbedder,
    settings: SearchToolSettings | None = None,
    *,
    collection: str = COLLECTION,
) -> dict[str, Any]:
    """Ingest the corpus into `collection` on the engine of `settings` (LanceDB under `data_dir`
    by default). Any BEIR-format corpus works (`bench/eval_beir.py`); `source` is `collection`.

    Always through the product's upsert, which skips every document whose stored version has the
    same content fingerprint (text, fields, embedding model and chunking recipe): a collection
    built under other chunking settings is rewritten, never silently reused."""
    settings = settings or settings_for(data_dir)
    service = SearchService(await open_engine(settings), embedder, settings)
    try:
        started = time.monotonic()
        chunks = 0
        for start in range(0, len(data.corpus), INGEST_BATCH):
            batch = data.corpus[start : start + INGEST_BATCH]
            documents = [
                Document(
                    id=d["_id"],
                    title=d.get("title", ""),
                    text=d["text"],
                    source=collection,
                    entity_type="abstract",
                )
                for d in batch
            ]
            result = await service.upsert_documents(collection, documents)
            chunks += result.chunks_upserted
            if result.chunks_upserted:
                note(f"ingested {start + len(batch)}/{len(data.corpus)} documents, {chunks} chunks")
        embedder.save()
        stats = await service.get_collection(collection)
        seconds = time.monotonic() - started
        note(f"collection {collection!r}: {stats.chunk_count} chunks, {chunks} written")
        return {
            "reused": chunks == 0,
            "chunks": stats.chunk_count,
            "chunks_written": chunks,
            "seconds": round(seconds, 1),
        }
    finally:
        await service.close()
