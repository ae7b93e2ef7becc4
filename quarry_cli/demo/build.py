"""Builds the demo collection through the search tool's public client, once.

`ensure_demo_collection` asks `GetCollection`; when the collection is missing (or holds fewer
documents than the corpus, e.g. after an interrupted first build) it upserts the corpus in batches,
reporting progress. Upserts are idempotent, so finishing an interrupted build is safe.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from types import TracebackType

from google.protobuf import timestamp_pb2
from quarry.common.v1 import search_pb2
from quarry.searchtool.v1 import search_tool_pb2
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)

from quarry_cli.demo.corpus import Document, MetadataValue, build_corpus
from services.common.errors import NotFound
from services.search_tool.client import SearchToolClient

DEFAULT_COLLECTION = "python-docs"
_BATCH_CHARS = 40_000

ProgressCallback = Callable[[int, int], None]
"""Called after each batch with (documents ingested so far, documents in the corpus)."""


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
    """True when documents were ingested now; False when the collection was already complete."""
    seconds: float
    """Wall time spent."""


async def ensure_demo_collection(
    address: str,
    *,
    collection: str = DEFAULT_COLLECTION,
    progress: ProgressCallback | None = None,
    batch_size: int = 64,
    timeout_s: float = 300.0,
    corpus: Sequence[Document] | None = None,
) -> DemoCollectionStatus:
    """Make sure `collection` holds the demo corpus; ingest it when missing or incomplete.

    Requests carry at most `batch_size` documents and about `_BATCH_CHARS` characters of text,
    so each call stays short and progress moves steadily even through the long pydoc topics.
    `corpus` replaces the standard-library corpus (tests use a small one).
    """
    async with SearchToolClient(address, timeout_s=timeout_s) as client:
        return await _ensure(client, collection, progress, batch_size, corpus)


async def _ensure(
    client: SearchToolClient,
    collection: str,
    progress: ProgressCallback | None,
    batch_size: int,
    documents: Sequence[Document] | None,
) -> DemoCollectionStatus:
    started = time.monotonic()
    corpus = list(documents) if documents is not None else build_corpus()
    existing = await _describe(client, collection)
    if existing is not None and existing.document_count >= len(corpus):
        return DemoCollectionStatus(
            collection,
            existing.document_count,
            existing.chunk_count,
            built=False,
            seconds=time.monotonic() - started,
        )
    done = 0
    for batch in _batches(corpus, batch_size):
        await client.upsert_documents(collection, [document_message(d) for d in batch])
        done += len(batch)
        if progress is not None:
            progress(done, len(corpus))
    final = await _describe(client, collection)
    if final is None:
        raise RuntimeError(f"collection {collection!r} vanished while it was being built")
    return DemoCollectionStatus(
        collection,
        final.document_count,
        final.chunk_count,
        built=True,
        seconds=time.monotonic() - started,
    )


def _batches(corpus: Sequence[Document], batch_size: int) -> Iterator[list[Document]]:
    batch: list[Document] = []
    chars = 0
    for document in corpus:
        if batch and (len(batch) >= batch_size or chars + len(document.text) > _BATCH_CHARS):
            yield batch
            batch, chars = [], 0
        batch.append(document)
        chars += len(document.text)
    if batch:
        yield batch


async def _describe(client: SearchToolClient, collection: str) -> search_tool_pb2.Collection | None:
    try:
        return await client.get_collection(collection)
    except NotFound:
        return None


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


class ProgressBar:
    """A rich progress bar on stderr, shown only once the first batch is reported."""

    def __init__(self, description: str = "Building demo collection") -> None:
        self._description = description
        self._progress: Progress | None = None
        self._task = TaskID(0)

    def __enter__(self) -> ProgressBar:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        if self._progress is not None:
            self._progress.stop()

    def __call__(self, done: int, total: int) -> None:
        if self._progress is None:
            self._progress = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("documents"),
                TimeElapsedColumn(),
                console=Console(stderr=True),
            )
            self._progress.start()
            self._task = self._progress.add_task(self._description, total=total)
        self._progress.update(self._task, completed=done)


def print_lines(done: int, total: int) -> None:
    """A plain progress reporter: one line per batch (for logs and non-terminals)."""
    print(f"demo collection: {done}/{total} documents", flush=True)
