"""Builds the demo collection through the search tool's gRPC API, once.

`ensure_demo_collection` asks `GetCollection`; when the collection is missing (or holds fewer
documents than the corpus, e.g. after an interrupted first build) it upserts the corpus in batches,
reporting progress. Upserts are idempotent, so finishing an interrupted build is safe.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from types import TracebackType

import grpc
from quarry.searchtool.v1 import search_tool_pb2, search_tool_pb2_grpc
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)

from services.common.channels import open_channel
from services.search_tool.convert import document_to_proto
from services.search_tool.demo.corpus import build_corpus
from services.search_tool.documents import Document

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
    channel_or_address: grpc.aio.Channel | str,
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
    if isinstance(channel_or_address, str):
        async with open_channel(channel_or_address) as channel:
            return await _ensure(channel, collection, progress, batch_size, timeout_s, corpus)
    return await _ensure(channel_or_address, collection, progress, batch_size, timeout_s, corpus)


async def _ensure(
    channel: grpc.aio.Channel,
    collection: str,
    progress: ProgressCallback | None,
    batch_size: int,
    timeout_s: float,
    documents: Sequence[Document] | None,
) -> DemoCollectionStatus:
    started = time.monotonic()
    stub = search_tool_pb2_grpc.SearchToolServiceStub(channel)
    corpus = list(documents) if documents is not None else build_corpus()
    existing = await _describe(stub, collection, timeout_s)
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
        await stub.UpsertDocuments(
            search_tool_pb2.UpsertDocumentsRequest(
                collection=collection, documents=[document_to_proto(d) for d in batch]
            ),
            timeout=timeout_s,
        )
        done += len(batch)
        if progress is not None:
            progress(done, len(corpus))
    final = await _describe(stub, collection, timeout_s)
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


async def _describe(
    stub: search_tool_pb2_grpc.SearchToolServiceStub, collection: str, timeout_s: float
) -> search_tool_pb2.Collection | None:
    try:
        response = await stub.GetCollection(
            search_tool_pb2.GetCollectionRequest(collection=collection), timeout=timeout_s
        )
    except grpc.aio.AioRpcError as error:
        if error.code() == grpc.StatusCode.NOT_FOUND:
            return None
        raise
    result: search_tool_pb2.Collection = response.collection
    return result


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
