"""Bring a collection in line with files on disk, through the search tool's public client.

1. List what the collection holds for the run's sources (ListDocuments: id, `metadata.path`,
   `metadata.content_sha256`).
2. Walk the files. A file whose stored documents all carry its current SHA-256 is unchanged and
   is not even parsed; others are parsed, and only documents whose hash differs are sent.
3. Send in batches, up to two requests in flight so the search tool's embedder never waits for
   this process to parse; every request but the last says `building`, so the collection reports
   it is still being built until the run is over.
4. Delete documents a changed file no longer produces and, with `prune`, those whose file is gone.

Upserts are idempotent by id: an interrupted run, run again, finishes without duplicates.
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from google.protobuf import struct_pb2
from quarry.common.v1 import search_pb2
from quarry.searchtool.v1 import search_tool_pb2

from quarry_cli.ingest.files import (
    HASH_KEY,
    PATH_KEY,
    SourceFile,
    file_facts,
    to_document,
    walk,
)
from quarry_cli.ingest.formats import ParseError, format_of, looks_binary, read
from services.common.errors import InvalidArgument, NotFound
from services.search_tool.client import SearchToolClient

BATCH_DOCUMENTS = 64
BATCH_CHARS = 40_000
IN_FLIGHT = 2


@dataclass(frozen=True)
class IngestOptions:
    """What to ingest and how."""

    collection: str
    """Target collection (created when missing)."""
    paths: Sequence[Path]
    """Files and folders."""
    source: str = ""
    """The documents' `source`; empty: each argument's folder name."""
    base_url: str = ""
    """Url prefix for documents instead of `file://` paths."""
    prune: bool = False
    """Delete documents of the run's sources whose file is gone."""
    dry_run: bool = False
    """Plan only: read and compare, send and delete nothing."""
    batch_documents: int = BATCH_DOCUMENTS
    """Most documents per request."""


@dataclass
class IngestSummary:
    """What a run did (or, in a dry run, would do)."""

    collection: str
    files: int = 0
    new: int = 0
    changed: int = 0
    unchanged: int = 0
    deleted: int = 0
    chunks: int = 0
    skipped: list[tuple[str, str]] = field(default_factory=list)
    """(path, reason) of files not read: unknown format, binary, empty."""
    failed: list[tuple[str, str]] = field(default_factory=list)
    """(path, reason) of files or documents that could not be parsed or were refused."""
    seconds: float = 0.0
    dry_run: bool = False

    def as_json(self) -> dict[str, object]:
        return {
            "collection": self.collection,
            "dry_run": self.dry_run,
            "files": self.files,
            "new": self.new,
            "changed": self.changed,
            "unchanged": self.unchanged,
            "skipped": len(self.skipped),
            "failed": len(self.failed),
            "deleted": self.deleted,
            "chunks": self.chunks,
            "seconds": round(self.seconds, 3),
            "skipped_files": [{"path": p, "reason": r} for p, r in self.skipped],
            "failures": [{"path": p, "reason": r} for p, r in self.failed],
        }


@dataclass(frozen=True)
class Progress:
    """Reported after each file and each stored batch."""

    files_done: int
    files_total: int
    chunks: int
    """Chunks stored so far."""
    elapsed_s: float


ProgressCallback = Callable[[Progress], None]


@dataclass(frozen=True)
class _Stored:
    path: str
    sha256: str


async def ingest(
    client: SearchToolClient,
    options: IngestOptions,
    *,
    progress: ProgressCallback | None = None,
) -> IngestSummary:
    """Run one ingest; files that fail are reported in the summary, never raised."""
    started = time.monotonic()
    summary = IngestSummary(options.collection, dry_run=options.dry_run)
    files = list(walk(options.paths, source=options.source))
    summary.files = len(files)
    stored = await _stored(client, options.collection, {f.source for f in files} or {"-"})
    by_path: defaultdict[str, dict[str, _Stored]] = defaultdict(dict)
    for document_id, info in stored.items():
        by_path[info.path][document_id] = info
    sender = _Sender(client, options, summary, progress, started, len(files))
    stale: list[str] = []
    for n, file in enumerate(files, start=1):
        documents = _read(file, options, by_path.get(file.relative, {}), summary)
        if documents is not None:
            wanted = {d.id for d in documents}
            stale.extend(i for i in by_path.get(file.relative, {}) if i not in wanted)
            for document in documents:
                previous = stored.get(document.id)
                if (
                    previous is not None
                    and previous.sha256 == document.metadata[HASH_KEY].string_value
                ):
                    summary.unchanged += 1
                    continue
                if previous is None:
                    summary.new += 1
                else:
                    summary.changed += 1
                await sender.add(document, file.relative)
        sender.files_done = n
        sender.report()
    await sender.finish()
    if options.prune:
        present = {f.relative for f in files}
        stale.extend(i for i, info in stored.items() if info.path not in present)
    summary.deleted = len(set(stale))
    if stale and not options.dry_run:
        await client.delete_documents(options.collection, sorted(set(stale)))
    summary.seconds = time.monotonic() - started
    return summary


async def _stored(
    client: SearchToolClient, collection: str, sources: set[str]
) -> dict[str, _Stored]:
    condition = search_pb2.FilterCondition(
        field="source",
        operator=search_pb2.FILTER_OPERATOR_IN,
        value=_list_value(sorted(sources)),
    )
    only_sources = search_pb2.Filter(groups=[search_pb2.FilterGroup(conditions=[condition])])
    try:
        documents = await client.list_documents(collection, filter=only_sources)
    except NotFound:
        return {}
    return {
        d.id: _Stored(d.metadata[PATH_KEY].string_value, d.metadata[HASH_KEY].string_value)
        for d in documents
        if PATH_KEY in d.metadata
    }


def _list_value(values: list[str]) -> struct_pb2.Value:
    value = struct_pb2.Value()
    value.list_value.extend(values)
    return value


def _read(
    file: SourceFile,
    options: IngestOptions,
    stored: dict[str, _Stored],
    summary: IngestSummary,
) -> list[search_tool_pb2.Document] | None:
    """The file's documents; None when it is skipped, failed, or unchanged as a whole."""
    kind = format_of(file.path)
    if kind is None:
        summary.skipped.append((file.relative, "unsupported file type"))
        return None
    try:
        data = file.path.read_bytes()
    except OSError as error:
        summary.failed.append((file.relative, f"cannot read: {error.strerror or error}"))
        return None
    if kind not in {"pdf", "docx"} and looks_binary(data):
        summary.skipped.append((file.relative, "binary content"))
        return None
    facts = file_facts(file, kind, data, base_url=options.base_url)
    if kind != "record" and stored and all(s.sha256 == facts.sha256 for s in stored.values()):
        summary.unchanged += len(stored)
        return None
    try:
        parts = read(kind, data, file.path)
    except ParseError as error:
        summary.failed.append((file.relative, str(error)))
        return None
    documents = [to_document(facts, p) for p in parts if p.text.strip()]
    if not documents:
        summary.skipped.append((file.relative, "no text"))
        return None
    return documents


class _Sender:
    """Batches documents and keeps up to IN_FLIGHT upserts running."""

    def __init__(
        self,
        client: SearchToolClient,
        options: IngestOptions,
        summary: IngestSummary,
        progress: ProgressCallback | None,
        started: float,
        files_total: int,
    ) -> None:
        self._client = client
        self._options = options
        self._summary = summary
        self._progress = progress
        self._started = started
        self._files_total = files_total
        self.files_done = 0
        self._batch: list[tuple[search_tool_pb2.Document, str]] = []
        self._chars = 0
        self._running: set[asyncio.Task[None]] = set()

    async def add(self, document: search_tool_pb2.Document, path: str) -> None:
        full = len(self._batch) >= self._options.batch_documents
        if self._batch and (full or self._chars + len(document.text) > BATCH_CHARS):
            await self._flush(building=True)
        self._batch.append((document, path))
        self._chars += len(document.text)

    async def finish(self) -> None:
        """Send the last batch once the others are stored, without `building`."""
        await self._drain(0)
        await self._flush(building=False, wait=True)

    def report(self) -> None:
        if self._progress is not None:
            self._progress(
                Progress(
                    self.files_done,
                    self._files_total,
                    self._summary.chunks,
                    time.monotonic() - self._started,
                )
            )

    async def _flush(self, *, building: bool, wait: bool = False) -> None:
        batch, self._batch, self._chars = self._batch, [], 0
        if not batch or self._options.dry_run:
            return
        await self._drain(IN_FLIGHT - 1)
        task = asyncio.create_task(self._send(batch, building))
        self._running.add(task)
        if wait:
            await self._drain(0)

    async def _drain(self, keep: int) -> None:
        while len(self._running) > keep:
            done, _ = await asyncio.wait(self._running, return_when=asyncio.FIRST_COMPLETED)
            self._running -= done
            for task in done:
                task.result()

    async def _send(
        self, batch: list[tuple[search_tool_pb2.Document, str]], building: bool
    ) -> None:
        collection = self._options.collection
        try:
            reply = await self._client.upsert_documents(
                collection, [d for d, _ in batch], building=building
            )
            self._summary.chunks += reply.chunks_upserted
        except InvalidArgument:
            for document, path in batch:
                await self._send_alone(document, path, building)
        self.report()

    async def _send_alone(
        self, document: search_tool_pb2.Document, path: str, building: bool
    ) -> None:
        try:
            reply = await self._client.upsert_documents(
                self._options.collection, [document], building=building
            )
            self._summary.chunks += reply.chunks_upserted
        except InvalidArgument as error:
            reason = "; ".join(v.description for v in error.violations) or error.message
            self._summary.failed.append((f"{path} ({document.id})", f"refused: {reason}"))
