"""Bring a collection in line with a set of documents, through the search tool's public client.

This is the one ingest pipeline: `quarry ingest` feeds it the files on disk (`files.file_units`),
the demo collection feeds it the standard library's documentation (`quarry_cli.demo.build`).

A *unit* is what produces documents together: a file (a Markdown file gives one document per
section), or one demo document. Its documents list back under its key (`metadata.path` when they
carry one, else their id).

1. List what the collection holds for the run's sources (ListDocuments: id, `metadata.path`,
   `metadata.content_sha256`); documents without a content hash were not written here.
2. Read each unit. A unit may tell from the stored hashes alone that it is unchanged (a file whose
   stored documents all carry its current SHA-256 is not even parsed); otherwise only documents
   whose hash differs are sent. A document without a hash gets the SHA-256 of its wire form.
3. Send in batches within the search tool's per-call limits (`parts`: text bytes and the word
   pieces its model reads; a document that alone passes them is sent as parts `<id>#part-N`), up
   to two requests in flight so the search tool's embedder never waits for
   this process to read; every request but the last says `building`, so the collection reports
   it is still being built until the run is over.
4. Delete documents a changed unit no longer produces and, with `prune`, those whose unit is gone.

A document counts as new or changed once the search tool has stored it; one it refused counts
only as failed. Upserts are idempotent by id: an interrupted run, run again, finishes without
duplicates.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from google.protobuf import struct_pb2
from quarry.common.v1 import search_pb2
from quarry.searchtool.v1 import search_tool_pb2

from quarry_cli.ingest import parts
from services.common.errors import InvalidArgument, NotFound
from services.search_tool.client import SearchToolClient

BATCH_DOCUMENTS = 64
IN_FLIGHT = 2
HASH_KEY = "content_sha256"
"""The metadata key holding the SHA-256 of what a document was made from (see the proto)."""
PATH_KEY = "path"
"""The metadata key holding the unit (the file's relative path) a document came from."""

StoredHashes = frozenset[str]
UnitReader = Callable[[StoredHashes], list[search_tool_pb2.Document] | None]
"""A unit's documents, given the hashes its stored documents carry; None when the unit can tell
from those alone that nothing changed. Raises `Skipped` or `Failed`."""


class Skipped(Exception):
    """A unit with nothing to store (unknown format, binary, no text); the message says why."""


class Failed(Exception):
    """A unit that could not be read; the message says why."""


@dataclass(frozen=True)
class Unit:
    """What produces documents together: a file, or one demo document."""

    key: str
    """Its documents' `metadata.path`, or their id when they carry no path."""
    read: UnitReader
    """Its documents (see `UnitReader`)."""


@dataclass(frozen=True)
class Target:
    """Where a run stores, and what it owns there."""

    collection: str
    """Target collection (created when missing)."""
    sources: frozenset[str]
    """The `source` values whose stored documents the run compares against and may delete."""
    prune: bool = False
    """Delete stored documents of `sources` whose unit is not in the run."""
    dry_run: bool = False
    """Plan only: read and compare, send and delete nothing."""
    batch_documents: int = BATCH_DOCUMENTS
    """Most documents per request."""


@dataclass
class IngestSummary:
    """What a run did (or, in a dry run, would do)."""

    collection: str
    files: int = 0
    """Units read: files, or demo documents."""
    new: int = 0
    changed: int = 0
    unchanged: int = 0
    deleted: int = 0
    chunks: int = 0
    skipped: list[tuple[str, str]] = field(default_factory=list)
    """(unit, reason) of units not read: unknown format, binary, empty."""
    failed: list[tuple[str, str]] = field(default_factory=list)
    """(unit, reason) of units that could not be read, or documents the search tool refused."""
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
    """Reported after each unit and each stored batch."""

    files_done: int
    """Units finished: read, and every document they sent stored (the embedding is most of the
    time, so a file counts only once its chunks are in)."""
    files_total: int
    chunks: int
    """Chunks stored so far."""
    elapsed_s: float


ProgressCallback = Callable[[Progress], None]
Change = Literal["new", "changed"]


@dataclass(frozen=True)
class _Stored:
    key: str
    sha256: str


async def sync(
    client: SearchToolClient,
    target: Target,
    units: Sequence[Unit],
    *,
    progress: ProgressCallback | None = None,
) -> IngestSummary:
    """Run one ingest; units that fail are reported in the summary, never raised."""
    started = time.monotonic()
    summary = IngestSummary(target.collection, files=len(units), dry_run=target.dry_run)
    stored = await _stored(client, target.collection, target.sources)
    by_key: defaultdict[str, dict[str, _Stored]] = defaultdict(dict)
    for document_id, info in stored.items():
        by_key[info.key][document_id] = info
    sender = _Sender(client, target, summary, progress, started, len(units))
    stale: list[str] = []
    for unit in units:
        mine = by_key.get(unit.key, {})
        documents = _read(unit, mine, summary)
        changed: list[tuple[search_tool_pb2.Document, Change]] = []
        if documents is not None:
            wanted = {d.id for d in documents}
            stale.extend(i for i in mine if i not in wanted)
            for document in documents:
                previous = stored.get(document.id)
                sha256 = document.metadata[HASH_KEY].string_value
                if previous is not None and previous.sha256 == sha256:
                    summary.unchanged += 1
                    continue
                changed.append((document, "new" if previous is None else "changed"))
        sender.expect(unit.key, len(changed))
        for document, change in changed:
            await sender.add(document, unit.key, change)
        sender.report()
    await sender.finish()
    if target.prune:
        present = {u.key for u in units}
        stale.extend(i for i, info in stored.items() if info.key not in present)
    summary.deleted = len(set(stale))
    if stale and not target.dry_run:
        await client.delete_documents(target.collection, sorted(set(stale)))
    summary.seconds = time.monotonic() - started
    return summary


def content_hash(document: search_tool_pb2.Document) -> str:
    """SHA-256 of a document's deterministic wire form (its own hash left out)."""
    if HASH_KEY in document.metadata:
        document = search_tool_pb2.Document.FromString(document.SerializeToString())
        del document.metadata[HASH_KEY]
    return hashlib.sha256(document.SerializeToString(deterministic=True)).hexdigest()


def _read(
    unit: Unit, stored: dict[str, _Stored], summary: IngestSummary
) -> list[search_tool_pb2.Document] | None:
    """The unit's documents, hashed; None when it is skipped, failed, or unchanged as a whole."""
    try:
        documents = unit.read(frozenset(s.sha256 for s in stored.values()))
    except Skipped as reason:
        summary.skipped.append((unit.key, str(reason)))
        return None
    except Failed as reason:
        summary.failed.append((unit.key, str(reason)))
        return None
    if documents is None:
        summary.unchanged += len(stored)
        return None
    for document in documents:
        if HASH_KEY not in document.metadata:
            document.metadata[HASH_KEY].string_value = content_hash(document)
    return [part for document in documents for part in parts.split(document)]


async def _stored(
    client: SearchToolClient, collection: str, sources: frozenset[str]
) -> dict[str, _Stored]:
    condition = search_pb2.FilterCondition(
        field="source",
        operator=search_pb2.FILTER_OPERATOR_IN,
        value=_list_value(sorted(sources) or ["-"]),
    )
    only_sources = search_pb2.Filter(groups=[search_pb2.FilterGroup(conditions=[condition])])
    try:
        documents = await client.list_documents(collection, filter=only_sources)
    except NotFound:
        return {}
    return {
        d.id: _Stored(
            d.metadata[PATH_KEY].string_value if PATH_KEY in d.metadata else parts.whole_id(d.id),
            d.metadata[HASH_KEY].string_value,
        )
        for d in documents
        if HASH_KEY in d.metadata
    }


def _list_value(values: list[str]) -> struct_pb2.Value:
    value = struct_pb2.Value()
    value.list_value.extend(values)
    return value


@dataclass(frozen=True)
class _Pending:
    document: search_tool_pb2.Document
    unit: str
    change: Change


class _Sender:
    """Batches documents and keeps up to IN_FLIGHT upserts running."""

    def __init__(
        self,
        client: SearchToolClient,
        target: Target,
        summary: IngestSummary,
        progress: ProgressCallback | None,
        started: float,
        files_total: int,
    ) -> None:
        self._client = client
        self._target = target
        self._summary = summary
        self._progress = progress
        self._started = started
        self._files_total = files_total
        self.files_done = 0
        self._unstored: dict[str, int] = {}
        """Documents per unit sent but not stored yet; the unit is done when it reaches 0."""
        self._batch: list[_Pending] = []
        self._bytes = self._word_pieces = 0
        self._running: set[asyncio.Task[None]] = set()

    def expect(self, unit: str, documents: int) -> None:
        """`unit` was read and sends `documents` (none: it is done now)."""
        if documents:
            self._unstored[unit] = documents
        else:
            self.files_done += 1

    def _stored(self, unit: str) -> None:
        """One of `unit`'s documents was stored (or refused): the unit is done after its last."""
        self._unstored[unit] -= 1
        if not self._unstored[unit]:
            del self._unstored[unit]
            self.files_done += 1

    async def add(self, document: search_tool_pb2.Document, unit: str, change: Change) -> None:
        if self._target.dry_run:
            self._count(change)
            self._stored(unit)
            return
        size, pieces = len(document.text.encode()), parts.model_word_pieces(document)
        full = len(self._batch) >= self._target.batch_documents
        if self._batch and (
            full
            or self._bytes + size > parts.REQUEST_BYTES
            or self._word_pieces + pieces > parts.REQUEST_WORD_PIECES
        ):
            await self._flush(building=True)
        self._batch.append(_Pending(document, unit, change))
        self._bytes += size
        self._word_pieces += pieces

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
        batch, self._batch, self._bytes, self._word_pieces = self._batch, [], 0, 0
        if not batch:
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

    async def _send(self, batch: list[_Pending], building: bool) -> None:
        try:
            await self._upsert(batch, building)
        except InvalidArgument:
            for pending in batch:
                await self._send_alone(pending, building)
        self.report()

    async def _send_alone(self, pending: _Pending, building: bool) -> None:
        try:
            await self._upsert([pending], building)
        except InvalidArgument as error:
            reason = "; ".join(
                f"{v.field.removeprefix('documents[0].')}: {v.description}"
                for v in error.violations
            )
            reason = reason or error.message
            self._summary.failed.append(
                (f"{pending.unit} ({pending.document.id})", f"refused: {reason}")
            )
            self._stored(pending.unit)

    async def _upsert(self, batch: list[_Pending], building: bool) -> None:
        reply = await self._client.upsert_documents(
            self._target.collection, [p.document for p in batch], building=building
        )
        self._summary.chunks += reply.chunks_upserted
        for pending in batch:
            self._count(pending.change)
            self._stored(pending.unit)

    def _count(self, change: Change) -> None:
        if change == "new":
            self._summary.new += 1
        else:
            self._summary.changed += 1
