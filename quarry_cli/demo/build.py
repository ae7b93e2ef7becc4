"""Builds the demo collection through the one ingest pipeline (`quarry_cli.ingest.sync`).

Each corpus document is a unit of the pipeline, hashed from its wire form: a first run stores the
whole corpus (the collection reports `building` meanwhile), an interrupted build is finished by
the next run, and a later run sends only documents whose text changed (a new Python version) and
deletes those the corpus no longer has. The demo owns its two sources in the collection.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

from google.protobuf import timestamp_pb2
from quarry.common.v1 import search_pb2
from quarry.searchtool.v1 import search_tool_pb2

from quarry_cli.demo.corpus import (
    SOURCE_DOCSTRINGS,
    SOURCE_TOPICS,
    Document,
    MetadataValue,
    build_corpus,
)
from quarry_cli.ingest.sync import BATCH_DOCUMENTS, ProgressCallback, Target, Unit, sync
from services.search_tool.client import SearchToolClient

DEFAULT_COLLECTION = "python-docs"


@dataclass(frozen=True)
class DemoCollectionStatus:
    """What `ensure_demo_collection` found or did."""

    collection: str
    """Name of the collection."""
    documents: int
    """Documents in the collection afterwards."""
    chunks: int
    """Chunks in the collection afterwards."""
    built: bool
    """True when documents were stored or deleted now; False when the collection was complete."""
    seconds: float
    """Wall time spent."""
    failed: int = 0
    """Documents the search tool refused (reported by the pipeline, never raised)."""


async def ensure_demo_collection(
    address: str,
    *,
    collection: str = DEFAULT_COLLECTION,
    progress: ProgressCallback | None = None,
    batch_size: int = BATCH_DOCUMENTS,
    timeout_s: float = 300.0,
    corpus: Sequence[Document] | None = None,
) -> DemoCollectionStatus:
    """Make `collection` hold exactly the demo corpus, storing only what is missing or changed.

    `timeout_s` bounds each request; `corpus` replaces the standard-library corpus (tests use a
    small one)."""
    documents = list(corpus) if corpus is not None else build_corpus()
    target = Target(
        collection=collection,
        sources=frozenset({SOURCE_DOCSTRINGS, SOURCE_TOPICS}),
        prune=True,
        batch_documents=batch_size,
    )
    async with SearchToolClient(address, timeout_s=timeout_s) as client:
        summary = await sync(client, target, demo_units(documents), progress=progress)
        final = await client.get_collection(collection)
    return DemoCollectionStatus(
        collection,
        final.document_count,
        final.chunk_count,
        built=bool(summary.new or summary.changed or summary.deleted),
        seconds=summary.seconds,
        failed=len(summary.failed),
    )


def demo_units(corpus: Sequence[Document]) -> list[Unit]:
    """Each demo document as a unit of the ingest pipeline, keyed by its id."""
    return [Unit(document.id, _reader(document)) for document in corpus]


def _reader(document: Document) -> Callable[[frozenset[str]], list[search_tool_pb2.Document]]:
    return lambda stored: [document_message(document)]


def document_message(document: Document) -> search_tool_pb2.Document:
    """The wire form of a demo document."""
    return search_tool_pb2.Document(
        id=document.id,
        title=document.title,
        text=document.text,
        source=document.source,
        entity_type=document.entity_type,
        created_at=_timestamp(document.created_at),
        updated_at=_timestamp(document.updated_at),
        url=document.url,
        breadcrumbs=[
            search_pb2.Breadcrumb(id=b.id, name=b.name, entity_type=b.entity_type)
            for b in document.breadcrumbs
        ],
        metadata={key: _metadata_value(value) for key, value in document.metadata.items()},
    )


def _timestamp(moment: datetime) -> timestamp_pb2.Timestamp:
    message = timestamp_pb2.Timestamp()
    message.FromDatetime(moment)
    return message


def _metadata_value(value: MetadataValue) -> search_pb2.MetadataValue:
    if isinstance(value, bool):
        return search_pb2.MetadataValue(bool_value=value)
    if isinstance(value, int):
        return search_pb2.MetadataValue(int_value=value)
    if isinstance(value, float):
        return search_pb2.MetadataValue(double_value=value)
    return search_pb2.MetadataValue(string_value=value)
