"""What `GetCollection` reports about a LanceDB table: counts, fields, date range, embedding."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from services.search_tool.engine.base import CollectionStats
from services.search_tool.engine.lancedb.rows import embedding_of, filterable_fields


async def describe_table(name: str, table: Any) -> CollectionStats:
    """Scans four columns of every row: the caller remembers the answer per table version."""
    schema = await table.schema()
    model, dimensions = embedding_of(schema)
    rows = await (
        table.query().select(["document_id", "source", "entity_type", "created_at"]).to_arrow()
    )
    created = rows.column("created_at")
    return CollectionStats(
        name=name,
        document_count=pc.count_distinct(rows.column("document_id")).as_py(),
        chunk_count=rows.num_rows,
        sources=_documents_per(rows, "source"),
        entity_types=_documents_per(rows, "entity_type"),
        fields=filterable_fields(schema),
        earliest_created_at=pc.min(created).as_py(),
        latest_created_at=pc.max(created).as_py(),
        embedding_model=model,
        embedding_dimensions=dimensions,
    )


def _documents_per(rows: pa.Table, column: str) -> dict[str, int]:
    if rows.num_rows == 0:
        return {}
    grouped = rows.group_by(column).aggregate([("document_id", "count_distinct")])
    counts = zip(
        grouped.column(column).to_pylist(),
        grouped.column("document_id_count_distinct").to_pylist(),
        strict=True,
    )
    return {value or "": int(count) for value, count in counts if value}
