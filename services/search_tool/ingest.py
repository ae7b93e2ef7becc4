"""Ingest: validate a whole request, then chunk, embed and upsert documents batch by batch.

Nothing is written until every document of the request is valid. Each batch is chunked and
embedded first (concurrently with other requests, and with the write of the request's previous
batch), then written under a per-collection lock in two steps, upsert then removal of stale chunks
(those beyond a changed document's new chunk count; what is stored is read again under the lock
when the collection was written since the batch read it, so concurrent rewrites of one document
leave exactly one version). A crash
between or during the steps never loses a document that was stored before: at worst stale chunks
linger until the document is ingested again. A document whose content fingerprint and chunk ids
match what is stored is skipped without being embedded.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import re
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from services.common import keyword_form
from services.common.errors import FieldViolation, InvalidArgument
from services.search_tool.chunking import Chunker
from services.search_tool.documents import (
    Chunk,
    ChunkRecord,
    Document,
    chunk_id,
    document_id_problem,
    metadata_type,
    widen,
)
from services.search_tool.embedding import Embedder
from services.search_tool.engine.base import (
    CollectionSpec,
    DocumentReplacing,
    SearchEngine,
    StoredVersion,
)
from services.search_tool.filters import METADATA_PREFIX, FieldType
from services.search_tool.limits import DEFAULT_LIMITS, DOCUMENT_TOO_LARGE, RequestLimits

log = logging.getLogger(__name__)

METADATA_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")


@dataclass(frozen=True)
class IngestLimits:
    """Bounds on one request."""

    max_document_bytes: int
    """Largest text, in UTF-8 bytes."""
    max_documents: int
    """Most documents per request."""
    batch_documents: int
    """Documents embedded and written together."""
    chunking_recipe: str = ""
    """Identifies the chunk sizes, so that changing them re-ingests unchanged documents."""
    sizes: RequestLimits = DEFAULT_LIMITS
    """How large a document's title, labels, url, breadcrumbs and metadata may be, and how many
    word pieces one call may give the model (`upsert_total_word_pieces`)."""
    model_max_tokens: int = 256
    """The embedder reads at most this many word pieces of a chunk (`embedding.max_tokens`)."""


@dataclass(frozen=True)
class IngestResult:
    """What an upsert did."""

    documents_upserted: int
    """Documents now stored as sent (unchanged ones included)."""
    chunks_upserted: int
    """Chunks written."""
    chunks_deleted: int
    """Chunks of earlier versions removed."""


class _Split(NamedTuple):
    """One chunk of a document and the text its keyword index sees after the title."""

    chunk: Chunk
    keyword_text: str


class _Chunked(NamedTuple):
    """A document's chunks and content fingerprint."""

    splits: list[_Split]
    fingerprint: str


@dataclass(frozen=True)
class _Prepared:
    """A batch chunked and embedded, waiting for the write lock."""

    pending: list[tuple[Document, list[_Split], str]]
    """Changed documents with their chunks and content fingerprints."""
    records: list[ChunkRecord]
    """The embedded chunks of `pending`."""
    stored: Mapping[str, StoredVersion]
    """What was stored for the batch's documents when it was read."""
    generation: int
    """The collection's write generation at that read; `stored` is current while it holds."""


class Ingestor:
    """Turns documents into stored, embedded chunks."""

    def __init__(
        self,
        engine: SearchEngine,
        embedder: Embedder,
        chunker: Chunker,
        limits: IngestLimits,
        *,
        language_of: Callable[[str], str] = lambda _collection: keyword_form.ENGLISH,
    ) -> None:
        self._engine = engine
        self._embedder = embedder
        self._chunker = chunker
        self._limits = limits
        self._language_of = language_of
        """A collection's language, which its keyword text is stemmed in (`keyword_form`)."""
        self._write_locks: defaultdict[str, asyncio.Lock] = defaultdict(asyncio.Lock)
        self._generations: defaultdict[str, int] = defaultdict(int)

    async def upsert(self, collection: str, documents: Sequence[Document]) -> IngestResult:
        """Validate everything, then write batch by batch. A collection this call created is
        dropped again when the call fails before anything is stored in it (a full disk must not
        leave an empty collection behind)."""
        existed = collection in await self._engine.list_collections()
        known = await self._engine.fields(collection) if existed else {}
        validate_documents(documents, known, self._limits)
        # Tokenising is CPU work (about a second per megabyte): never on the event loop.
        language = self._language_of(collection)
        chunked = await asyncio.to_thread(self._chunk_all, documents, language)
        try:
            return await self._upsert(collection, documents, chunked, language)
        except Exception:
            if not existed:
                await self._drop_if_empty(collection)
            raise

    async def _drop_if_empty(self, collection: str) -> None:
        try:
            if collection not in await self._engine.list_collections():
                return
            stats = await self._engine.describe(collection)
            if stats.chunk_count == 0:
                await self._engine.drop_collection(collection)
                log.warning(
                    "collection dropped after its first write failed",
                    extra={"collection": collection},
                )
        except Exception:  # the write's own error is the one to report
            log.exception("could not drop the collection a failed first write created")

    async def _upsert(
        self,
        collection: str,
        documents: Sequence[Document],
        chunked: Sequence[_Chunked],
        language: str,
    ) -> IngestResult:
        await self._engine.ensure_collection(
            collection, CollectionSpec(self._embedder.model_name, self._embedder.dimensions)
        )
        size = self._limits.batch_documents
        batches = [
            list(zip(documents[start : start + size], chunked[start : start + size], strict=True))
            for start in range(0, len(documents), size)
        ]
        written = deleted = 0
        prepared = await self._prepare(collection, batches[0], language)
        for following in [*batches[1:], None]:
            async with asyncio.TaskGroup() as group:
                writing = group.create_task(self._write(collection, prepared))
                if following is not None:
                    preparing = group.create_task(self._prepare(collection, following, language))
            batch_written, batch_deleted = writing.result()
            written += batch_written
            deleted += batch_deleted
            if following is not None:
                prepared = preparing.result()
        log.info(
            "documents upserted",
            extra={"collection": collection, "documents": len(documents), "chunks": written},
        )
        return IngestResult(len(documents), written, deleted)

    async def _prepare(
        self, collection: str, batch: Sequence[tuple[Document, _Chunked]], language: str
    ) -> _Prepared:
        """Embed the documents of a batch that changed (no lock held)."""
        generation = self._generations[collection]
        stored = await self._engine.stored_versions(collection, [d.id for d, _ in batch])
        pending: list[tuple[Document, list[_Split], str]] = []
        for document, (chunks, fingerprint) in batch:
            previous = stored.get(document.id)
            if (
                previous is not None
                and previous.content_hash == fingerprint
                and previous.chunk_ids == {c.chunk.id for c in chunks}
            ):
                continue
            pending.append((document, chunks, fingerprint))
        records = await self._embed(pending, language)
        return _Prepared(pending, records, stored, generation)

    async def _write(self, collection: str, prepared: _Prepared) -> tuple[int, int]:
        """Upsert, then delete chunks the new versions no longer have (under the write lock); an
        engine written by many replicas replaces the documents in one step instead."""
        if isinstance(self._engine, DocumentReplacing):
            async with self._write_locks[collection]:
                self._generations[collection] += 1
                return await self._engine.replace_documents(collection, prepared.records)
        async with self._write_locks[collection]:
            current = prepared.stored
            if self._generations[collection] != prepared.generation:
                current = await self._engine.stored_versions(
                    collection, [d.id for d, _, _ in prepared.pending]
                )
            stale = [
                chunk
                for document, chunks, _ in prepared.pending
                if document.id in current
                for chunk in sorted(current[document.id].chunk_ids - {c.chunk.id for c in chunks})
            ]
            self._generations[collection] += 1
            absent = {
                split.chunk.id
                for document, chunks, _ in prepared.pending
                if document.id not in current
                for split in chunks
            }
            await self._engine.upsert(collection, prepared.records, absent=absent)
            deleted = await self._engine.delete_chunks(collection, stale)
        return len(prepared.records), deleted

    def _chunk_all(
        self, documents: Sequence[Document], language: str = keyword_form.ENGLISH
    ) -> list[_Chunked]:
        """Each document's chunks and content fingerprint, once the model's work for all of them
        is within `upsert_total_word_pieces` (pure CPU: run in a worker thread)."""
        chunked = [_Chunked(self._chunks(d), self._fingerprint(d, language)) for d in documents]
        self._check_model_work(chunked)
        return chunked

    def _check_model_work(self, chunked: Sequence[_Chunked]) -> None:
        """INVALID_ARGUMENT when the embedder would read more than `upsert_total_word_pieces`
        word pieces for the call: each chunk's embedding text (title and chunk) and its two
        markers, at most `model_max_tokens`, as `Embed` counts its texts. Unchanged documents
        count too: a request's verdict does not depend on what is stored."""
        budget = self._limits.sizes.upsert_total_word_pieces
        most, tokenizer = self._limits.model_max_tokens, self._embedder.tokenizer
        pieces = [
            sum(min(len(tokenizer.spans(embedding_text(s.chunk))) + 2, most) for s in c.splits)
            for c in chunked
        ]
        setting = f"search_tool.limits.upsert_total_word_pieces is {budget}"
        alone = [(i, n) for i, n in enumerate(pieces) if n > budget]
        if alone:
            refused = InvalidArgument.for_violations(
                [
                    FieldViolation(
                        f"documents[{i}].text",
                        f"{n} word pieces for the model to read (its chunks with the title); "
                        f"{setting} (split the document)",
                    )
                    for i, n in alone
                ],
                shown=10,
            )
            raise InvalidArgument(
                refused.message, violations=refused.violations, reason=DOCUMENT_TOO_LARGE
            )
        if sum(pieces) > budget:
            raise InvalidArgument.for_field(
                "documents",
                f"{sum(pieces)} word pieces for the model to read in all; {setting} "
                "(send fewer documents per call)",
            )

    def _chunks(self, document: Document) -> list[_Split]:
        chunks: list[_Split] = []
        for piece in self._chunker.split(document.text):
            chunk = Chunk(
                id=chunk_id(document.id, piece.index),
                document_id=document.id,
                chunk_index=piece.index,
                text=piece.text,
                title=document.title,
                source=document.source,
                entity_type=document.entity_type,
                created_at=document.created_at,
                updated_at=document.updated_at,
                url=document.url,
                breadcrumbs=document.breadcrumbs,
                metadata=dict(document.metadata),
            )
            chunks.append(_Split(chunk, piece.keyword_text))
        return chunks

    async def _embed(
        self, pending: list[tuple[Document, list[_Split], str]], language: str
    ) -> list[ChunkRecord]:
        chunks = [
            (split, fingerprint) for _, doc_chunks, fingerprint in pending for split in doc_chunks
        ]
        if not chunks:
            return []
        vectors = await self._embedder.embed([embedding_text(s.chunk) for s, _ in chunks])
        records = [
            ChunkRecord(
                chunk=s.chunk,
                vector=vectors[i],
                content_hash=fingerprint,
                keyword_text=s.keyword_text,
                keyword_language=language,
            )
            for i, (s, fingerprint) in enumerate(chunks)
        ]
        # the keyword form (stems, character pairs: about a millisecond a chunk in another
        # language) is made here, off the event loop the engine writes the records on
        await asyncio.to_thread(lambda: [r.indexed_text for r in records])
        return records

    def _fingerprint(self, document: Document, language: str) -> str:
        recipe = f"{self._embedder.model_name}/{self._limits.chunking_recipe}"
        form = keyword_form.form_of(document.title, language) or keyword_form.form_of(
            document.text, language
        )
        if form is not None:
            # its keyword text is indexed in that form: one stored before it was, or in another
            # language, is rewritten when sent again, changed or not; every other document keeps
            # its hash
            recipe += f"/{form}"
        return content_fingerprint(document, recipe)


def embedding_text(chunk: Chunk) -> str:
    """What the dense side sees for a chunk: its document's title, then its text."""
    return f"{chunk.title}\n{chunk.text}" if chunk.title else chunk.text


def content_fingerprint(document: Document, recipe: str) -> str:
    """A hash of everything stored for a document, and of how it was chunked and embedded."""
    payload = {
        "recipe": recipe,
        "title": document.title,
        "text": document.text,
        "source": document.source,
        "entity_type": document.entity_type,
        "created_at": document.created_at.isoformat() if document.created_at else None,
        "updated_at": document.updated_at.isoformat() if document.updated_at else None,
        "url": document.url,
        "breadcrumbs": [[b.id, b.name, b.entity_type] for b in document.breadcrumbs],
        "metadata": sorted((k, type(v).__name__, v) for k, v in document.metadata.items()),
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def validate_documents(
    documents: Sequence[Document], known: Mapping[str, FieldType], limits: IngestLimits
) -> None:
    """Raise InvalidArgument naming every bad `documents[i].<field>`; nothing is written before."""
    if not documents:
        raise InvalidArgument.for_field("documents", "at least one document is required")
    if len(documents) > limits.max_documents:
        raise InvalidArgument.for_field(
            "documents",
            f"at most {limits.max_documents} documents per request (max_documents_per_request)",
        )
    total, budget = sum(len(d.text.encode()) for d in documents), limits.sizes.upsert_total_bytes
    if total > budget:
        raise InvalidArgument.for_field(
            "documents",
            f"{total} bytes of text in all; search_tool.limits.upsert_total_bytes is {budget} "
            "(send fewer documents per call)",
        )
    violations: list[FieldViolation] = []
    seen: dict[str, int] = {}
    stored = {
        k[len(METADATA_PREFIX) :]: t for k, t in known.items() if k.startswith(METADATA_PREFIX)
    }
    introduced: dict[str, FieldType] = {}
    for i, document in enumerate(documents):
        path = f"documents[{i}]"
        violations.extend(_id_violations(document.id, path, seen, i, limits.sizes))
        violations.extend(_text_violations(document.text, path, limits.max_document_bytes))
        violations.extend(_size_violations(document, path, limits.sizes))
        violations.extend(_metadata_violations(document.metadata, path, stored, introduced))
    keys = len(stored) + len(introduced)
    if keys > limits.sizes.collection_metadata_keys:
        violations.append(
            FieldViolation(
                "documents",
                f"the collection would have {keys} metadata keys; "
                f"the limit is {limits.sizes.collection_metadata_keys}",
            )
        )
    if violations:
        raise InvalidArgument.for_violations(violations, shown=10)


def _id_violations(
    document_id: str, path: str, seen: dict[str, int], index: int, sizes: RequestLimits
) -> list[FieldViolation]:
    problem = document_id_problem(document_id, sizes.document_id_bytes)
    if problem is not None:
        return [FieldViolation(f"{path}.id", problem)]
    if document_id in seen:
        return [FieldViolation(f"{path}.id", f"duplicates documents[{seen[document_id]}].id")]
    seen[document_id] = index
    return []


def _text_violations(text: str, path: str, max_bytes: int) -> list[FieldViolation]:
    if not text.strip():
        return [FieldViolation(f"{path}.text", "must not be empty")]
    size = len(text.encode("utf-8"))
    if size > max_bytes:
        return [
            FieldViolation(f"{path}.text", f"is {size} bytes; max_document_bytes is {max_bytes}")
        ]
    return []


def _size_violations(document: Document, path: str, sizes: RequestLimits) -> list[FieldViolation]:
    """Every part of a document within its documented limit (`limits.py`)."""
    texts = [
        (f"{path}.title", document.title, sizes.title_chars),
        (f"{path}.source", document.source, sizes.label_chars),
        (f"{path}.entity_type", document.entity_type, sizes.label_chars),
        (f"{path}.url", document.url, sizes.url_chars),
    ]
    for b, crumb in enumerate(document.breadcrumbs[: sizes.breadcrumbs]):
        for name in ("id", "name", "entity_type"):
            texts.append(
                (f"{path}.breadcrumbs[{b}].{name}", getattr(crumb, name), sizes.label_chars)
            )
    for key, value in document.metadata.items():
        if isinstance(value, str):
            texts.append((f'{path}.metadata["{key}"]', value, sizes.metadata_string_chars))
    violations = [
        FieldViolation(field, f"{len(text)} characters; the limit is {most}")
        for field, text, most in texts
        if len(text) > most
    ]
    counts = [
        (f"{path}.breadcrumbs", len(document.breadcrumbs), sizes.breadcrumbs, "breadcrumbs"),
        (f"{path}.metadata", len(document.metadata), sizes.metadata_keys, "metadata keys"),
    ]
    violations += [
        FieldViolation(field, f"{count} {what}; the limit is {most}")
        for field, count, most, what in counts
        if count > most
    ]
    return violations


def _metadata_violations(
    metadata: Mapping[str, object],
    path: str,
    stored: Mapping[str, FieldType],
    introduced: dict[str, FieldType],
) -> list[FieldViolation]:
    """Keys are well formed; a stored key keeps its type, a new key may only widen int to double."""
    violations: list[FieldViolation] = []
    for key, value in metadata.items():
        field_path = f'{path}.metadata["{key}"]'
        if not METADATA_KEY.match(key):
            violations.append(
                FieldViolation(field_path, "keys are a letter or _, then letters, digits or _")
            )
            continue
        if not isinstance(value, str | int | float | bool):
            violations.append(FieldViolation(field_path, "must be a string, number or bool"))
            continue
        incoming = metadata_type(value)
        if key in stored:
            if widen(stored[key], incoming) is not stored[key]:
                violations.append(
                    FieldViolation(field_path, f"is {incoming}; the collection holds {stored[key]}")
                )
            continue
        merged = widen(introduced[key], incoming) if key in introduced else incoming
        if merged is None:
            violations.append(
                FieldViolation(
                    field_path, f"is {incoming}; earlier documents gave {introduced[key]}"
                )
            )
            continue
        introduced[key] = merged
    return violations
