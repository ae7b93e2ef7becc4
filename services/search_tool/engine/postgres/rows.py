"""Chunk records as rows of a collection's chunk table, and back.

A row keeps the chunk's filterable fields as columns, its metadata as jsonb (each value typed as
its key is in the collection), the hit-facing fields as one JSON text (`chunk_json`, the same
shape the embedded engine stores, read back by `to_chunk`), the vector in pgvector's text form and
the BM25 term counts of the keyword text (`bm25.term_counts`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
from psycopg.types.json import Jsonb

from services.common.errors import InvalidArgument
from services.search_tool.documents import (
    ChunkRecord,
    MetadataValue,
    epoch_microseconds,
    metadata_type,
    widen,
)
from services.search_tool.engine.bm25 import TermCounts, term_counts
from services.search_tool.engine.lancedb.rows import to_chunk
from services.search_tool.filters import FieldType

__all__ = ["COLUMNS", "Row", "new_metadata_types", "to_chunk", "to_row", "vector_text"]

COLUMNS = (
    "id",
    "document_id",
    "chunk_index",
    "title",
    "text",
    "source",
    "entity_type",
    "created_at",
    "updated_at",
    "url",
    "breadcrumb_terms",
    "breadcrumb_path",
    "metadata",
    "content_hash",
    "chunk_json",
    "embedding",
    "term_freqs",
    "doc_length",
)
"""The columns an upsert writes, in the order of `Row.values`."""


@dataclass(frozen=True)
class Row:
    """One chunk ready to write, and its BM25 term counts."""

    values: tuple[Any, ...]
    """Parameters in `COLUMNS` order."""
    counts: TermCounts
    """Term counts and length of its keyword text."""


def vector_text(vector: npt.NDArray[np.float32]) -> str:
    """pgvector's text form of a vector (`[0.1,0.2,...]`)."""
    return "[" + ",".join(repr(float(x)) for x in np.asarray(vector, dtype=np.float32)) + "]"


def new_metadata_types(
    known: Mapping[str, FieldType], records: Sequence[ChunkRecord]
) -> dict[str, FieldType]:
    """The metadata keys `records` bring that `known` lacks, typed by their values; a value of
    another type than its key's (or a new key mixing types) is InvalidArgument naming the key,
    exactly as in the embedded engine."""
    new: dict[str, FieldType] = {}
    for record in records:
        for key, value in record.chunk.metadata.items():
            incoming = metadata_type(value)
            if key in known:
                if widen(known[key], incoming) is not known[key]:
                    raise InvalidArgument.for_field(
                        f"metadata.{key}", f"is {known[key]} in this collection, not {incoming}"
                    )
                continue
            merged = widen(new[key], incoming) if key in new else incoming
            if merged is None:
                raise InvalidArgument.for_field(
                    f"metadata.{key}", f"mixes {new[key]} and {incoming} values"
                )
            new[key] = merged
    return new


def to_row(
    record: ChunkRecord, types: Mapping[str, FieldType], counts: TermCounts | None = None
) -> Row:
    """The row of one record; metadata values are typed as their keys (`types`). `counts`: the
    record's term counts when already made (`term_counts(record.indexed_text)`)."""
    chunk = record.chunk
    metadata: dict[str, MetadataValue] = {
        key: float(value) if types.get(key) is FieldType.DOUBLE else value
        for key, value in chunk.metadata.items()
    }
    crumbs = [{"id": b.id, "name": b.name, "entity_type": b.entity_type} for b in chunk.breadcrumbs]
    chunk_json = json.dumps(
        {
            "id": chunk.id,
            "document_id": chunk.document_id,
            "chunk_index": chunk.chunk_index,
            "title": chunk.title,
            "text": chunk.text,
            "source": chunk.source,
            "entity_type": chunk.entity_type,
            "created_at": _microseconds(chunk.created_at),
            "updated_at": _microseconds(chunk.updated_at),
            "url": chunk.url,
            "breadcrumbs": crumbs,
            "metadata": metadata,
        },
        ensure_ascii=False,
        separators=(",", ":"),
    )
    counts = counts if counts is not None else term_counts(record.indexed_text)
    values = (
        chunk.id,
        chunk.document_id,
        chunk.chunk_index,
        chunk.title,
        chunk.text,
        chunk.source,
        chunk.entity_type,
        chunk.created_at,
        chunk.updated_at,
        chunk.url,
        sorted({t for b in chunk.breadcrumbs for t in (b.id, b.name) if t}),
        " > ".join(b.name for b in chunk.breadcrumbs),
        Jsonb(metadata),
        record.content_hash,
        chunk_json,
        vector_text(record.vector),
        Jsonb(dict(counts.counts)),
        counts.length,
    )
    return Row(values, counts)


def _microseconds(moment: Any) -> int | None:
    return None if moment is None else epoch_microseconds(moment)
