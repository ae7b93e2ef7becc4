"""How chunk records map to LanceDB rows: the table schema, and conversion both ways.

One table per collection. Chunk fields are columns that filters, BM25 and GetCollection read;
breadcrumbs are filtered through `breadcrumb_terms` (every id and name, for equals/in) and
`breadcrumb_path` (the names joined by ` > `, for contains); `search_text` (the title, then the
chunk's keyword text: its text and its neighbourhood, `ChunkRecord.indexed_text`) carries the
BM25 index; each metadata key is its own typed, nullable column `meta__<key>`, added
when first seen.

`chunk_json` holds, as one JSON string, everything a search hit returns: it is the only column a
search reads back, since LanceDB pays for every column it takes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from datetime import datetime
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from services.common.errors import InvalidArgument
from services.search_tool.documents import (
    Breadcrumb,
    Chunk,
    ChunkRecord,
    MetadataValue,
    epoch_microseconds,
    from_epoch_microseconds,
    metadata_type,
    widen,
)
from services.search_tool.engine.base import DocumentSummary
from services.search_tool.engine.lancedb.sql import (
    BREADCRUMB_PATH_COLUMN,
    BREADCRUMB_TERMS_COLUMN,
    METADATA_COLUMN_PREFIX,
)
from services.search_tool.filters import CHUNK_FIELDS, METADATA_PREFIX, FieldType

VECTOR_COLUMN = "vector"
SEARCH_TEXT_COLUMN = "search_text"
CONTENT_HASH_COLUMN = "content_hash"
CHUNK_JSON_COLUMN = "chunk_json"
EMBEDDING_MODEL_KEY = b"quarry.embedding_model"
DIMENSIONS_KEY = b"quarry.embedding_dimensions"

_TIMESTAMP = pa.timestamp("us", tz="UTC")
_ARROW_TYPES: Mapping[FieldType, pa.DataType] = {
    FieldType.STRING: pa.string(),
    FieldType.INTEGER: pa.int64(),
    FieldType.DOUBLE: pa.float64(),
    FieldType.BOOL: pa.bool_(),
    FieldType.TIMESTAMP: _TIMESTAMP,
}


def base_schema(embedding_model: str, dimensions: int) -> pa.Schema:
    """The columns every collection has, with the embedding recorded in the schema metadata."""
    return pa.schema(
        [
            pa.field("id", pa.string(), nullable=False),
            pa.field("document_id", pa.string(), nullable=False),
            pa.field("chunk_index", pa.int64(), nullable=False),
            pa.field("title", pa.string()),
            pa.field("text", pa.string()),
            pa.field(SEARCH_TEXT_COLUMN, pa.string()),
            pa.field("source", pa.string()),
            pa.field("entity_type", pa.string()),
            pa.field("created_at", _TIMESTAMP),
            pa.field("updated_at", _TIMESTAMP),
            pa.field("url", pa.string()),
            pa.field(BREADCRUMB_TERMS_COLUMN, pa.list_(pa.string())),
            pa.field(BREADCRUMB_PATH_COLUMN, pa.string()),
            pa.field(CONTENT_HASH_COLUMN, pa.string()),
            pa.field(VECTOR_COLUMN, pa.list_(pa.float32(), dimensions)),
            pa.field(CHUNK_JSON_COLUMN, pa.string()),
        ],
        metadata={
            EMBEDDING_MODEL_KEY: embedding_model.encode(),
            DIMENSIONS_KEY: b"%d" % dimensions,
        },
    )


def metadata_field(key: str, field_type: FieldType) -> pa.Field:
    """The nullable column holding metadata key `key`."""
    return pa.field(METADATA_COLUMN_PREFIX + key, _ARROW_TYPES[field_type])


def embedding_of(schema: pa.Schema) -> tuple[str, int]:
    """(model, dimensions) recorded when the collection was created."""
    recorded = schema.metadata or {}
    model = recorded.get(EMBEDDING_MODEL_KEY, b"").decode()
    dimensions = schema.field(VECTOR_COLUMN).type.list_size
    return model, int(dimensions)


def metadata_types(schema: pa.Schema) -> dict[str, FieldType]:
    """Metadata keys (without prefix) and their types."""
    types: dict[str, FieldType] = {}
    for field in schema:
        if field.name.startswith(METADATA_COLUMN_PREFIX):
            key = field.name[len(METADATA_COLUMN_PREFIX) :]
            types[key] = _field_type(field.type)
    return types


def filterable_fields(schema: pa.Schema) -> dict[str, FieldType]:
    """Chunk fields plus `metadata.<key>` for each metadata column."""
    fields = dict(CHUNK_FIELDS)
    for key, field_type in sorted(metadata_types(schema).items()):
        fields[METADATA_PREFIX + key] = field_type
    return fields


def added_metadata_fields(schema: pa.Schema, records: Sequence[ChunkRecord]) -> list[pa.Field]:
    """The columns `records` need that `schema` lacks: one per new metadata key, typed by its
    values. A value of another type than its key's column (or mixed types in a new key) is
    InvalidArgument naming `metadata.<key>`."""
    known = metadata_types(schema)
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
    return [metadata_field(key, field_type) for key, field_type in sorted(new.items())]


def to_table(records: Sequence[ChunkRecord], schema: pa.Schema) -> pa.Table:
    """Records as an Arrow table of exactly `schema` (absent metadata keys are null)."""
    columns: dict[str, list[Any]] = {field.name: [] for field in schema}
    for record in records:
        for name, value in _row(record, schema).items():
            columns[name].append(value)
    arrays = [pa.array(columns[f.name], type=f.type) for f in schema]
    return pa.Table.from_arrays(arrays, schema=schema)


def _row(record: ChunkRecord, schema: pa.Schema) -> dict[str, Any]:
    chunk = record.chunk
    crumbs = [{"id": b.id, "name": b.name, "entity_type": b.entity_type} for b in chunk.breadcrumbs]
    row: dict[str, Any] = {
        "id": chunk.id,
        "document_id": chunk.document_id,
        "chunk_index": chunk.chunk_index,
        "title": chunk.title,
        "text": chunk.text,
        SEARCH_TEXT_COLUMN: record.indexed_text,
        "source": chunk.source,
        "entity_type": chunk.entity_type,
        "created_at": chunk.created_at,
        "updated_at": chunk.updated_at,
        "url": chunk.url,
        BREADCRUMB_TERMS_COLUMN: sorted(
            {t for b in chunk.breadcrumbs for t in (b.id, b.name) if t}
        ),
        BREADCRUMB_PATH_COLUMN: " > ".join(b.name for b in chunk.breadcrumbs),
        CONTENT_HASH_COLUMN: record.content_hash,
        VECTOR_COLUMN: record.vector.tolist(),
    }
    for field in schema:
        if field.name.startswith(METADATA_COLUMN_PREFIX):
            value = chunk.metadata.get(field.name[len(METADATA_COLUMN_PREFIX) :])
            if value is not None and pa.types.is_floating(field.type):
                value = float(value)
            row[field.name] = value
    row[CHUNK_JSON_COLUMN] = _chunk_json(row, crumbs)
    return row


def _chunk_json(row: Mapping[str, Any], crumbs: list[dict[str, str]]) -> str:
    """The hit-facing fields of a row (metadata already typed as its columns are) as JSON."""
    return json.dumps(
        {
            "id": row["id"],
            "document_id": row["document_id"],
            "chunk_index": row["chunk_index"],
            "title": row["title"],
            "text": row["text"],
            "source": row["source"],
            "entity_type": row["entity_type"],
            "created_at": _microseconds(row["created_at"]),
            "updated_at": _microseconds(row["updated_at"]),
            "url": row["url"],
            "breadcrumbs": crumbs,
            "metadata": _metadata_of(row),
        },
        ensure_ascii=False,
        separators=(",", ":"),
    )


def document_summaries(
    rows: Sequence[Mapping[str, Any]], wanted: AbstractSet[str]
) -> list[DocumentSummary]:
    """One summary per document in `wanted`, from its rows (chunk 0 gives source and metadata)."""
    counts: dict[str, int] = {}
    first: dict[str, Mapping[str, Any]] = {}
    for row in rows:
        document = row["document_id"]
        if document not in wanted:
            continue
        counts[document] = counts.get(document, 0) + 1
        if row["chunk_index"] == 0 or document not in first:
            first[document] = row
    return [
        DocumentSummary(
            id=document,
            source=first[document]["source"] or "",
            chunk_count=count,
            metadata=_metadata_of(first[document]),
        )
        for document, count in counts.items()
    ]


def _metadata_of(row: Mapping[str, Any]) -> dict[str, MetadataValue]:
    """The metadata a row holds in its `meta__<key>` columns (absent keys are null there)."""
    return {
        name[len(METADATA_COLUMN_PREFIX) :]: value
        for name, value in row.items()
        if name.startswith(METADATA_COLUMN_PREFIX) and value is not None
    }


def _microseconds(moment: datetime | None) -> int | None:
    return None if moment is None else epoch_microseconds(moment)


def _moment(microseconds: int | None) -> datetime | None:
    return None if microseconds is None else from_epoch_microseconds(microseconds)


def stored_vectors(column: Any) -> npt.NDArray[np.float32]:
    """A column of stored vectors (an Arrow fixed-size list array, chunked or not) as a matrix,
    one row per vector, without a copy where Arrow holds them in one buffer."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    return np.asarray(column.flatten().to_numpy()).reshape(len(column), column.type.list_size)


def to_chunk(chunk_json: str) -> Chunk:
    """The `Chunk` a stored row's `chunk_json` describes."""
    fields = json.loads(chunk_json)
    return Chunk(
        id=fields["id"],
        document_id=fields["document_id"],
        chunk_index=int(fields["chunk_index"]),
        text=fields["text"] or "",
        title=fields["title"] or "",
        source=fields["source"] or "",
        entity_type=fields["entity_type"] or "",
        created_at=_moment(fields["created_at"]),
        updated_at=_moment(fields["updated_at"]),
        url=fields["url"] or "",
        breadcrumbs=tuple(
            Breadcrumb(c["id"], c["name"], c.get("entity_type", "")) for c in fields["breadcrumbs"]
        ),
        metadata=fields["metadata"],
    )


def _field_type(arrow_type: pa.DataType) -> FieldType:
    for field_type, candidate in _ARROW_TYPES.items():
        if arrow_type == candidate:
            return field_type
    raise ValueError(f"unsupported metadata column type {arrow_type}")
