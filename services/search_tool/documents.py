"""Domain types: documents as callers send them, chunks as the engine stores them."""

from __future__ import annotations

import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import cached_property

import numpy as np
import numpy.typing as npt

from services.common.keyword_form import ENGLISH, keyword_form
from services.search_tool.filters import FieldType

MetadataValue = str | int | float | bool
"""A scalar metadata value; the type of a key is fixed by the first value a collection sees."""


def metadata_type(value: MetadataValue) -> FieldType:
    """The field type a metadata value gives its key."""
    if isinstance(value, bool):
        return FieldType.BOOL
    if isinstance(value, int):
        return FieldType.INTEGER
    if isinstance(value, float):
        return FieldType.DOUBLE
    return FieldType.STRING


def widen(stored: FieldType, incoming: FieldType) -> FieldType | None:
    """The type a key keeps when `incoming` meets `stored`; None when they cannot mix.

    Integers fit a double key; a new key seen as both integer and double becomes double.
    """
    if stored is incoming:
        return stored
    if {stored, incoming} == {FieldType.INTEGER, FieldType.DOUBLE}:
        return FieldType.DOUBLE
    return None


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


def epoch_microseconds(moment: datetime) -> int:
    """Microseconds since the Unix epoch (a naive `moment` is taken as UTC), exact."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return (moment - _EPOCH) // _MICROSECOND


def from_epoch_microseconds(microseconds: int) -> datetime:
    """The UTC instant `microseconds` after the Unix epoch."""
    return _EPOCH + microseconds * _MICROSECOND


def document_id_problem(document_id: str, max_bytes: int) -> str | None:
    """Why `document_id` cannot name a document, or None when it can.

    Any non-empty UTF-8 string of at most `max_bytes` bytes without control characters (Unicode
    category Cc: C0, DEL, C1) is a document id: URLs, file paths, `<dbpedia:Foo_(bar)>`,
    `Ærø, Denmark`, e-mail message ids. Engines never turn an id into syntax (LanceDB literals are
    quoted by `engine/lancedb/sql.py`, Vespa document ids encode it).
    """
    if not document_id:
        return "must not be empty"
    size = len(document_id.encode("utf-8", errors="surrogatepass"))
    if size > max_bytes:
        return f"{size} bytes of UTF-8; the limit is {max_bytes}"
    for position, character in enumerate(document_id):
        category = unicodedata.category(character)
        if category in ("Cc", "Cs"):
            kind = "a control character" if category == "Cc" else "a lone surrogate"
            return f"{kind} (U+{ord(character):04X}) at position {position}"
    return None


CHUNK_SEPARATOR = "__chunk_"


def chunk_id(document_id: str, index: int) -> str:
    """The id of chunk `index` of a document: `{document_id}__chunk_{index}`.

    Unambiguous for every document id, even one containing `__chunk_`: the index is written in
    canonical decimal, which never contains the separator, so the *last* separator of a chunk id
    is the one this function put there (`parse_chunk_id` inverts it).
    """
    if index < 0:
        raise ValueError("chunk index must be >= 0")
    return f"{document_id}{CHUNK_SEPARATOR}{index}"


def parse_chunk_id(chunk: str) -> tuple[str, int]:
    """(document id, chunk index) of a chunk id made by `chunk_id`; ValueError otherwise."""
    document_id, separator, index = chunk.rpartition(CHUNK_SEPARATOR)
    if not separator or not index.isascii() or not index.isdigit() or str(int(index)) != index:
        raise ValueError(f"not a chunk id: {chunk!r}")
    return document_id, int(index)


@dataclass(frozen=True)
class Breadcrumb:
    """A step in the path from the source root to a document."""

    id: str
    """Stable id of the step (a space, a folder, a page ...)."""
    name: str
    """Human-readable name."""
    entity_type: str = ""
    """What kind of thing the step is."""


@dataclass(frozen=True)
class Document:
    """A document to ingest."""

    id: str
    """Stable id; chunk ids derive from it."""
    text: str
    """The body that is chunked, embedded and indexed."""
    title: str = ""
    """Title; indexed for keyword search together with each chunk's text."""
    source: str = ""
    """Where the document comes from (`confluence`, `stdlib` ...)."""
    entity_type: str = ""
    """What the document is (`page`, `function` ...)."""
    created_at: datetime | None = None
    """Creation time, timezone-aware."""
    updated_at: datetime | None = None
    """Last change, timezone-aware."""
    url: str = ""
    """Where a person can read it."""
    breadcrumbs: tuple[Breadcrumb, ...] = ()
    """Path from the source root to the document."""
    metadata: Mapping[str, MetadataValue] = field(default_factory=dict)
    """Scalar metadata, filterable as `metadata.<key>`."""


@dataclass(frozen=True)
class Chunk:
    """One chunk of one document: the unit a search returns."""

    id: str
    """`{document_id}__chunk_{chunk_index}`."""
    document_id: str
    """The document it belongs to."""
    chunk_index: int
    """Position within the document, from 0."""
    text: str
    """The chunk's text."""
    title: str = ""
    """The document's title."""
    source: str = ""
    """The document's source."""
    entity_type: str = ""
    """The document's entity type."""
    created_at: datetime | None = None
    """The document's creation time."""
    updated_at: datetime | None = None
    """The document's last change."""
    url: str = ""
    """The document's url."""
    breadcrumbs: tuple[Breadcrumb, ...] = ()
    """The document's breadcrumbs."""
    metadata: Mapping[str, MetadataValue] = field(default_factory=dict)
    """The document's metadata."""


@dataclass(frozen=True)
class ChunkRecord:
    """A chunk as the engine stores it: with its dense vector and its content fingerprint."""

    chunk: Chunk
    """The chunk itself."""
    vector: npt.NDArray[np.float32]
    """L2-normalised embedding of the chunk, shape `(dimensions,)`."""
    content_hash: str = ""
    """Fingerprint of the document version the chunk came from; unchanged documents skip work."""
    keyword_text: str = ""
    """What the keyword (BM25) index sees after the title: the chunk's text and its neighbourhood
    (`chunking.TextChunk.keyword_text`); empty means the chunk's text alone."""
    keyword_language: str = ENGLISH
    """The language of its collection, which its keyword text is stemmed in (`keyword_form`)."""

    @property
    def keyword_body(self) -> str:
        """The keyword text, or the chunk's own text when it has none (what every engine
        indexes beside the title)."""
        return self.keyword_text or self.chunk.text

    @cached_property
    def indexed_text(self) -> str:
        """The text the keyword index scores: the title, then the keyword body, in the keyword
        form (`keyword_form`: Chinese, Japanese and Korean as character pairs, Cyrillic words
        stemmed, words stemmed in `keyword_language`; as a query's `EngineQuery.keyword_query`).
        Made once: stemming a chunk and its neighbours' text takes about a millisecond, which
        `ingest` spends in a worker thread before an engine writes the record on the loop."""
        body = self.keyword_body
        text = f"{self.chunk.title}\n{body}" if self.chunk.title else body
        return keyword_form(text, self.keyword_language)
