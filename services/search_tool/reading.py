"""Reading a document's chunks by index range, always inside the caller's filter.

The caller's filter is validated by the same rules as a search's (`validate_filters`), then joined
with `document_id = <id>`; a document with no chunk inside the filter is NOT_FOUND with the same
message as a document that does not exist, so a read never reveals what the caller cannot see.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from services.common.errors import FieldViolation, InvalidArgument, NotFound, shown
from services.search_tool.documents import Chunk, document_id_problem
from services.search_tool.filters import (
    Condition,
    FieldType,
    FilterExpression,
    FilterGroup,
    Operator,
    RawFilter,
    combine_filters,
    validate_filters,
)
from services.search_tool.limits import RequestLimits

DEFAULT_READ_CHUNKS = 20
MAX_READ_CHUNKS = 200
MAX_DOCUMENT_CHUNKS = 10_000
"""Chunks of one document a read looks at; later ones are never returned."""


class ChunkScanner(Protocol):
    """The one engine call a read needs (every `SearchEngine` has it)."""

    async def scan(self, name: str, where: FilterExpression, *, limit: int) -> list[Chunk]: ...


@dataclass(frozen=True)
class ReadRequest:
    """One ReadDocument call, before validation."""

    collection: str
    """Collection holding the document."""
    document_id: str
    """The document to read."""
    first_chunk: int = 0
    """Index of the first chunk returned."""
    max_chunks: int = 0
    """1..200; 0 means 20."""
    caller_filter: RawFilter = field(default_factory=RawFilter)
    """Only chunks matching it are returned or counted."""


@dataclass(frozen=True)
class DocumentRead:
    """The chunks read and how many the caller may see in all."""

    chunks: list[Chunk]
    """In chunk order, from `first_chunk`."""
    chunk_count: int
    """Chunks of the document inside the caller's filter."""


async def read_document(
    engine: ChunkScanner,
    request: ReadRequest,
    fields: Mapping[str, FieldType],
    limits: RequestLimits,
) -> DocumentRead:
    """The requested range of a document the caller may see, or NotFound."""
    most = _validate(request, limits)
    caller, _ = validate_filters(request.caller_filter, RawFilter(), fields, limits=limits)
    by_id = Condition("document_id", FieldType.STRING, Operator.EQUALS, request.document_id)
    where = combine_filters(
        caller, FilterExpression((FilterGroup((by_id,)),)), max_groups=limits.filter_groups
    )
    visible = await engine.scan(request.collection, where, limit=MAX_DOCUMENT_CHUNKS)
    if not visible:
        raise NotFound(
            f"document {shown(request.document_id)} not found in collection "
            f"{shown(request.collection)}",
            metadata={"collection": request.collection, "document_id": request.document_id},
        )
    ordered = sorted(visible, key=lambda chunk: chunk.chunk_index)
    chosen = [c for c in ordered if c.chunk_index >= request.first_chunk][:most]
    return DocumentRead(chunks=chosen, chunk_count=len(ordered))


def _validate(request: ReadRequest, limits: RequestLimits) -> int:
    """The one document-id rule of every RPC (`document_id_problem`), then the range."""
    violations: list[FieldViolation] = []
    problem = document_id_problem(request.document_id, limits.document_id_bytes)
    if problem is not None:
        violations.append(FieldViolation("document_id", problem))
    if request.first_chunk < 0:
        violations.append(FieldViolation("first_chunk", "must not be negative"))
    most = request.max_chunks or DEFAULT_READ_CHUNKS
    if not 1 <= most <= MAX_READ_CHUNKS:
        violations.append(
            FieldViolation(
                "max_chunks",
                f"must be between 1 and {MAX_READ_CHUNKS} (0 means {DEFAULT_READ_CHUNKS})",
            )
        )
    if violations:
        raise InvalidArgument.for_violations(violations)
    return most
