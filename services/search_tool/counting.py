"""Counting documents under a filter, with breakdowns by field or date: aggregate questions
answered without vector search ("How many PDFs from Slack?").

Filters are decided as a search's are (`effective_filter`: the caller's AND the request's); the
matching chunks are scanned (`SearchEngine.scan`, at most `MAX_COUNT_CHUNKS`) and counted here, so
both engines count alike. A document counts once per value, whichever of its chunks matched.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum

from services.common.errors import FieldViolation, InvalidArgument, shown
from services.search_tool.documents import Chunk
from services.search_tool.filters import (
    METADATA_PREFIX,
    FieldType,
    RawFilter,
    effective_filter,
)
from services.search_tool.limits import RequestLimits
from services.search_tool.reading import ChunkScanner

MAX_COUNT_CHUNKS = 100_000
"""Chunks one count examines; beyond, the counts are lower bounds (`exact` false)."""
MAX_GROUP_BY = 3
DEFAULT_BUCKETS = 20
MAX_BUCKETS = 100
NONE_BUCKET = "(none)"
DATE_FIELDS = ("created_at", "updated_at")
_GROUPABLE = ("source", "entity_type", "title", *DATE_FIELDS)


class DateInterval(StrEnum):
    YEAR = "year"
    MONTH = "month"
    DAY = "day"


_DATE_FORMATS = {DateInterval.YEAR: "%Y", DateInterval.MONTH: "%Y-%m", DateInterval.DAY: "%Y-%m-%d"}


@dataclass(frozen=True)
class CountRequest:
    """One CountDocuments call, before validation."""

    collection: str
    """Collection to count in."""
    filter: RawFilter = field(default_factory=RawFilter)
    """Narrows the count, as sent."""
    caller_filter: RawFilter = field(default_factory=RawFilter)
    """The counting party's filter, as sent; `filter` only narrows it."""
    group_by: tuple[str, ...] = ()
    """Fields to break the count down by."""
    date_interval: DateInterval = DateInterval.MONTH
    """Bucket width of date breakdowns."""
    max_buckets: int = 0
    """1..100; 0 means 20."""


@dataclass(frozen=True)
class Breakdown:
    """Documents per value of one field."""

    field: str
    """The field."""
    buckets: list[tuple[str, int]]
    """(value, documents): most frequent first; dates in date order."""
    omitted: int
    """Values beyond the bucket limit."""


@dataclass(frozen=True)
class DocumentCount:
    """What CountDocuments answers."""

    document_count: int
    """Distinct documents with a matching chunk."""
    chunk_count: int
    """Matching chunks."""
    breakdowns: list[Breakdown]
    """One per `group_by` field, in request order."""
    exact: bool
    """False when the scan stopped at `MAX_COUNT_CHUNKS`."""


async def count_documents(
    engine: ChunkScanner,
    request: CountRequest,
    fields: Mapping[str, FieldType],
    limits: RequestLimits,
) -> DocumentCount:
    buckets = _validate(request, fields)
    where = effective_filter(request.caller_filter, request.filter, fields, limits=limits)
    chunks = await engine.scan(request.collection, where, limit=MAX_COUNT_CHUNKS + 1)
    exact = len(chunks) <= MAX_COUNT_CHUNKS
    # Up to 100,000 chunks tallied per breakdown: CPU work, kept off the event loop.
    return await asyncio.to_thread(_tally, chunks[:MAX_COUNT_CHUNKS], request, buckets, exact)


def _tally(chunks: Sequence[Chunk], request: CountRequest, most: int, exact: bool) -> DocumentCount:
    return DocumentCount(
        document_count=len({c.document_id for c in chunks}),
        chunk_count=len(chunks),
        breakdowns=[
            _breakdown(chunks, name, request.date_interval, most) for name in request.group_by
        ],
        exact=exact,
    )


def _validate(request: CountRequest, fields: Mapping[str, FieldType]) -> int:
    violations: list[FieldViolation] = []
    if len(request.group_by) > MAX_GROUP_BY:
        violations.append(FieldViolation("group_by", f"at most {MAX_GROUP_BY} fields"))
    for i, name in enumerate(request.group_by[:MAX_GROUP_BY]):
        metadata = name.startswith(METADATA_PREFIX) and name in fields
        if name not in _GROUPABLE and not metadata:
            violations.append(
                FieldViolation(
                    f"group_by[{i}]",
                    f"cannot group by {shown(name)}: use {', '.join(_GROUPABLE)} or a "
                    "metadata.<key> "
                    "the collection has",
                )
            )
    repeated = sorted({n for n in request.group_by if request.group_by.count(n) > 1})
    if repeated:
        violations.append(
            FieldViolation("group_by", f"named more than once: {', '.join(repeated)}")
        )
    most = request.max_buckets or DEFAULT_BUCKETS
    if not 1 <= most <= MAX_BUCKETS:
        violations.append(
            FieldViolation(
                "max_buckets", f"must be between 1 and {MAX_BUCKETS} (0 means {DEFAULT_BUCKETS})"
            )
        )
    if violations:
        raise InvalidArgument.for_violations(violations)
    return most


def _breakdown(chunks: Sequence[Chunk], name: str, interval: DateInterval, most: int) -> Breakdown:
    documents: dict[str, set[str]] = defaultdict(set)
    for chunk in chunks:
        documents[_bucket(chunk, name, interval)].add(chunk.document_id)
    counted = [(value, len(ids)) for value, ids in documents.items()]
    if name in DATE_FIELDS:
        dated = sorted(counted, key=lambda pair: (pair[0] == NONE_BUCKET, pair[0]))
        kept = dated[-most:] if len(dated) > most else dated
    else:
        kept = sorted(counted, key=lambda pair: (-pair[1], pair[0]))[:most]
    return Breakdown(field=name, buckets=kept, omitted=len(counted) - len(kept))


def _bucket(chunk: Chunk, name: str, interval: DateInterval) -> str:
    if name.startswith(METADATA_PREFIX):
        value: object = chunk.metadata.get(name.removeprefix(METADATA_PREFIX))
    else:
        value = getattr(chunk, name)
    if value is None or value == "":
        return NONE_BUCKET
    if isinstance(value, datetime):
        return value.strftime(_DATE_FORMATS[interval])
    return str(value).lower() if isinstance(value, bool) else str(value)
