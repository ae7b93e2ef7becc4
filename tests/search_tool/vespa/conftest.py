"""Shared pieces of the Vespa tests: the fixture collection's field types and its documents as
the feeder writes them."""

from __future__ import annotations

from typing import Any

from services.search_tool.documents import metadata_type, widen
from services.search_tool.engine.vespa.documents import chunk_fields
from services.search_tool.engine.vespa.package import TEXT_ATTRIBUTE_COPIES
from services.search_tool.filters import CHUNK_FIELDS, FieldType
from tests.search_tool.engine_fixtures import records
from tests.search_tool.filter_cases import FIXTURE


def fixture_metadata_types() -> dict[str, FieldType]:
    """Each metadata key's type, as a collection fed `FIXTURE` fixes it."""
    types: dict[str, FieldType] = {}
    for document in FIXTURE:
        for key, value in document.metadata.items():
            incoming = metadata_type(value)
            types[key] = widen(types[key], incoming) or incoming if key in types else incoming
    return types


def fixture_fields() -> dict[str, FieldType]:
    """The filterable fields of the fixture collection."""
    fields = dict(CHUNK_FIELDS)
    fields.update({f"metadata.{k}": t for k, t in fixture_metadata_types().items()})
    return fields


def fixture_documents() -> dict[str, dict[str, Any]]:
    """document id → the Vespa document of its one chunk, with the synthetic attribute copies
    the schema's indexing statements make."""
    types = fixture_metadata_types()
    documents = {}
    for record in records(FIXTURE):
        fields = chunk_fields("fixture", record, types)
        for source, copy in TEXT_ATTRIBUTE_COPIES.items():
            fields[copy] = fields[source]
        documents[record.chunk.document_id] = fields
    return documents
