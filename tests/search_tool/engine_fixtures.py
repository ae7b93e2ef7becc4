"""Deterministic chunk records for engine tests: vectors derived from ids, no model needed."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from services.search_tool.documents import Chunk, ChunkRecord, Document, chunk_id

DIMENSIONS = 8


def vector_for(key: str) -> npt.NDArray[np.float32]:
    """A unit vector that depends only on `key`."""
    seed = int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big")
    raw = np.random.default_rng(seed).standard_normal(DIMENSIONS).astype(np.float32)
    unit: npt.NDArray[np.float32] = raw / np.linalg.norm(raw)
    return unit


def record(document: Document, index: int = 0, *, text: str | None = None) -> ChunkRecord:
    """One chunk of `document` (its whole text unless `text` is given)."""
    chunk = Chunk(
        id=chunk_id(document.id, index),
        document_id=document.id,
        chunk_index=index,
        text=document.text if text is None else text,
        title=document.title,
        source=document.source,
        entity_type=document.entity_type,
        created_at=document.created_at,
        updated_at=document.updated_at,
        url=document.url,
        breadcrumbs=document.breadcrumbs,
        metadata=dict(document.metadata),
    )
    return ChunkRecord(chunk=chunk, vector=vector_for(chunk.id), content_hash="h-" + document.id)


def records(documents: Sequence[Document]) -> list[ChunkRecord]:
    """One chunk per document."""
    return [record(d) for d in documents]
