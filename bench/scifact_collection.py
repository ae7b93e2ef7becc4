"""SciFact as a search tool collection, built once under `var/` and reused by every evaluation.

The corpus goes through the product's own ingest (`SearchService.upsert_documents`: validation,
chunking, embedding, batched writes), in process; the embedder's vectors are cached on disk
(`bench/embedding_cache.py`), so rebuilding the collection or embedding the queries again costs
nothing the second time.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
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
INGEST_BATCH_BYTES = 1_000_000
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


def indexable(document: dict[str, str]) -> tuple[str, str] | None:
    """(title, text) of a BEIR document as the search tool takes it, or None to leave it out.

    A document with a title and no text (TREC-COVID and SCIDOCS hold papers without an abstract)
    is its title, given as the text; one with neither is left out: the search tool refuses an
    empty text, and nothing could find it."""
    title, text = document.get("title") or "", document.get("text") or ""
    if text.strip():
        return title, text
    if title.strip():
        return "", title
    return None


def ingest_batches(documents: list[Document]) -> Iterator[list[Document]]:
    """`documents` in order, in calls of at most `INGEST_BATCH` documents and, unless one document
    is larger alone, `INGEST_BATCH_BYTES` of text: a collection of long documents (news, web
    pages) stays within the bench's per-call bounds (`bench/harness.BENCH_LIMITS`)."""
    batch: list[Document] = []
    size = 0
    for document in documents:
        length = len(document.text.encode("utf-8"))
        if batch and (len(batch) == INGEST_BATCH or size + length > INGEST_BATCH_BYTES):
            yield batch
            batch, size = [], 0
        batch.append(document)
        size += length
    if batch:
        yield batch


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
        fields = {d["_id"]: indexable(d) for d in data.corpus}
        corpus = [
            Document(id=i, title=f[0], text=f[1], source=collection, entity_type="abstract")
            for i, f in fields.items()
            if f is not None
        ]
        sent = 0
        for batch in ingest_batches(corpus):
            result = await service.upsert_documents(collection, batch)
            chunks += result.chunks_upserted
            sent += len(batch)
            if result.chunks_upserted:
                note(f"ingested {sent}/{len(corpus)} documents, {chunks} chunks")
        embedder.save()
        stats = await service.get_collection(collection)
        seconds = time.monotonic() - started
        note(f"collection {collection!r}: {stats.chunk_count} chunks, {chunks} written")
        return {
            "reused": chunks == 0,
            "documents_without_text": len(fields) - len(corpus),
            "documents_title_only": sum(
                1 for d in data.corpus if not (d.get("text") or "").strip() and fields[d["_id"]]
            ),
            "chunks": stats.chunk_count,
            "chunks_written": chunks,
            "seconds": round(seconds, 1),
        }
    finally:
        await service.close()
