"""How chunk records map to Vespa `chunk` documents, and hits back to chunks.

A chunk's Vespa document id is `id:quarry:chunk::<collection>.<chunk id in URL-safe base64>`:
chunk ids are any UTF-8 (URLs, paths, `#`, `?`), and pyvespa's document/v1 path quotes the id
without escaping `/`, so the id part is kept to `[A-Za-z0-9_.-]`; the real chunk id is the
`chunk_id` field. Collection names (`[a-z0-9][a-z0-9_-]*`) never contain the `.`.

Timestamps are epoch microseconds (the embedded engine's precision); breadcrumbs are stored as an
array of structs plus `breadcrumb_terms` (every id and name, for equals/in) and `breadcrumb_path`
(names joined by ` > `, for contains); metadata goes into the typed map of its key's type.
`chunk_json` carries everything a hit returns except the title and the text, which are the
`title` and `text` summary fields: a hit reads those three (`HIT_FIELDS`), and the text is stored
once as itself (plus its indexed form in `search_text`), not again inside the JSON.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from typing import Any

from services.search_tool.documents import (
    Breadcrumb,
    Chunk,
    ChunkRecord,
    MetadataValue,
    epoch_microseconds,
    from_epoch_microseconds,
)
from services.search_tool.engine.vespa.package import EMBEDDING, METADATA_MAPS, SEARCH_TEXT
from services.search_tool.filters import FieldType

HIT_FIELDS = ("chunk_id", "chunk_json", "title", "text")
"""The summary fields a hit, a scan and a visit read."""


def chunk_document_id(collection: str, chunk_id: str) -> str:
    """The user-specified part of the chunk's Vespa document id."""
    encoded = base64.urlsafe_b64encode(chunk_id.encode()).decode().rstrip("=")
    return f"{collection}.{encoded}"


def chunk_fields(
    collection: str, record: ChunkRecord, metadata_types: Mapping[str, FieldType]
) -> dict[str, Any]:
    """The document/v1 `fields` of one chunk; `metadata_types` gives each key's map."""
    chunk = record.chunk
    fields: dict[str, Any] = {
        "collection": collection,
        "chunk_id": chunk.id,
        "document_id": chunk.document_id,
        "chunk_index": chunk.chunk_index,
        "title": chunk.title,
        "text": chunk.text,
        SEARCH_TEXT: record.indexed_text,
        "source": chunk.source,
        "entity_type": chunk.entity_type,
        "url": chunk.url,
        "breadcrumbs": [
            {"id": b.id, "name": b.name, "entity_type": b.entity_type} for b in chunk.breadcrumbs
        ],
        "breadcrumb_terms": sorted({t for b in chunk.breadcrumbs for t in (b.id, b.name) if t}),
        "breadcrumb_path": " > ".join(b.name for b in chunk.breadcrumbs),
        "content_hash": record.content_hash,
        "chunk_json": chunk_json(chunk, metadata_types),
        EMBEDDING: {"values": [float(x) for x in record.vector]},
    }
    for name in ("created_at", "updated_at"):
        moment = getattr(chunk, name)
        if moment is not None:  # unset: no value, so ranges never match it
            fields[name] = epoch_microseconds(moment)
    maps: dict[str, dict[str, MetadataValue]] = {}
    for key, value in chunk.metadata.items():
        field_type = metadata_types[key]
        maps.setdefault(METADATA_MAPS[field_type.value], {})[key] = _typed(value, field_type)
    fields.update(maps)
    return fields


def chunk_json(chunk: Chunk, metadata_types: Mapping[str, FieldType]) -> str:
    """Everything a hit returns but the title and the text (their own fields), as one JSON
    string (metadata typed as its key)."""
    return json.dumps(
        {
            "id": chunk.id,
            "document_id": chunk.document_id,
            "chunk_index": chunk.chunk_index,
            "source": chunk.source,
            "entity_type": chunk.entity_type,
            "created_at": _micros(chunk, "created_at"),
            "updated_at": _micros(chunk, "updated_at"),
            "url": chunk.url,
            "breadcrumbs": [
                {"id": b.id, "name": b.name, "entity_type": b.entity_type}
                for b in chunk.breadcrumbs
            ],
            "metadata": {
                k: _typed(v, metadata_types.get(k, FieldType.STRING))
                for k, v in chunk.metadata.items()
            },
        },
        ensure_ascii=False,
        separators=(",", ":"),
    )


def chunk_from_hit(hit: Mapping[str, Any]) -> Chunk:
    """The `Chunk` a hit's `HIT_FIELDS` describe (an unset `title` or `text` is empty: Vespa
    leaves an empty string field out of the summary)."""
    fields = json.loads(hit["chunk_json"])
    return Chunk(
        id=fields["id"],
        document_id=fields["document_id"],
        chunk_index=int(fields["chunk_index"]),
        text=str(hit.get("text", fields.get("text", ""))),
        title=str(hit.get("title", fields.get("title", ""))),
        source=fields["source"],
        entity_type=fields["entity_type"],
        created_at=_moment(fields["created_at"]),
        updated_at=_moment(fields["updated_at"]),
        url=fields["url"],
        breadcrumbs=tuple(
            Breadcrumb(c["id"], c["name"], c["entity_type"]) for c in fields["breadcrumbs"]
        ),
        metadata=fields["metadata"],
    )


def _typed(value: MetadataValue, field_type: FieldType) -> MetadataValue:
    if field_type is FieldType.DOUBLE and not isinstance(value, bool):
        return float(value)
    return value


def _micros(chunk: Chunk, name: str) -> int | None:
    moment = getattr(chunk, name)
    return None if moment is None else epoch_microseconds(moment)


def _moment(micros: int | None) -> Any:
    return None if micros is None else from_epoch_microseconds(micros)
