"""The collection registry: one `collection` document per collection (embedding model,
dimensions, metadata key types, `revision`), the one document several search-tool replicas write.

It is only ever written with a test-and-set condition (`en/reference/api/document-v1.html`
"condition", 412 when it does not hold; `en/writing/document-v1-api-guide.html` "Conditional
updates and puts with create"): created with `condition=false&create=true` (a missing document is
written whatever the condition, an existing one never), widened with `collection.revision == n`
(read, widen, write back `n + 1`; on 412 read again), so replicas writing new metadata keys at
once never lose one another's. Entries are read by a document get (the newest acknowledged
version, unlike a query) and cached for `ttl_s`: another replica's change shows here at most that
much later; this process's own writes update the cache at once.

Deleting a collection fences the writers of other replicas: the entry is first marked (its
`revision` set to `DROPPING`, by test-and-set like any write, so a widening racing it is refused
and reads the mark), then the chunks are deleted, then the entry. Reads of a marked collection are
NotFound, creating or widening it is UNAVAILABLE (retry once the deletion ends), and an upsert
asks `still_there` after its chunk writes were acknowledged: when the entry is marked or gone, it
deletes what it wrote. Either its writes were acknowledged before the mark, so before the chunk
deletion began (which then removes them), or its check comes after the mark and sees it.

A collection deleted *and created again* between an upsert's writes and that check is told apart
by its incarnation: a random id written into the entry at creation (`incarnation`), never reused,
kept by every later write of the entry, and carried by each chunk (`chunk.incarnation`). An upsert
takes the incarnation from the entry it read before writing and (`condition_of`) writes each chunk
only if the stored chunk of that id, if any, is of the same incarnation (with `create`, so a new
chunk is written), deletes them with the same condition, and counts as fenced out when the entry
it checks afterwards is of another incarnation: so an upsert that began against incarnation A
leaves no chunk in B, and never overwrites or deletes one of B's. A chunk of another incarnation
found under the id while the entry is still the upsert's own is an older one's (a newer one exists
only once this entry is gone) and is replaced on condition that it is still the one read.
Entries written before incarnations existed (and chunks without the field) are the empty
incarnation, `== null` in a condition; a newer incarnation is never empty, so the change from such
an entry to a recreated one is seen as well.
"""

from __future__ import annotations

import json
import logging
import secrets
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from services.common.errors import FailedPrecondition, InvalidArgument, NotFound, Unavailable
from services.search_tool.documents import ChunkRecord, metadata_type, widen
from services.search_tool.engine.base import CollectionSpec
from services.search_tool.engine.vespa.package import CHUNK, COLLECTION
from services.search_tool.engine.vespa.transport import (
    RETRY_AFTER_S,
    ConditionFailed,
    VespaTransport,
)
from services.search_tool.filters import FieldType

log = logging.getLogger(__name__)

ATTEMPTS = 8
"""Test-and-set rounds of one registry write before giving up (Unavailable, retryable)."""
DROPPING = -1
"""The `revision` of an entry whose collection is being deleted."""
CREATE_ONLY = "false"
"""The condition at creation: with `create`, a missing document is written whatever the
condition, an existing one only if it holds, and `false` never does."""


@dataclass(frozen=True)
class Registered:
    """A collection's registry entry as read."""

    spec: CollectionSpec
    """Embedding model and dimensions, fixed at creation."""
    types: dict[str, FieldType]
    """Each metadata key's type."""
    revision: int
    """Bumped by every write; the test-and-set condition of the next one (`DROPPING` while the
    collection is being deleted)."""
    incarnation: str = ""
    """Random id written at creation and kept by every later write: a collection deleted and
    created again has another one. "" for an entry written before incarnations existed."""

    @property
    def dropping(self) -> bool:
        return self.revision == DROPPING


class CollectionRegistry:
    """The registry entries, read through a cache with a bound on staleness."""

    def __init__(self, transport: VespaTransport, ttl_s: float) -> None:
        self._transport = transport
        self._ttl_s = ttl_s
        self._cached: dict[str, tuple[float, Registered | None]] = {}

    async def get(self, name: str, *, fresh: bool = False) -> Registered | None:
        """The entry: from the cache while younger than `ttl_s` (unless `fresh`), else by a
        document get."""
        now = time.monotonic()
        cached = self._cached.get(name)
        if not fresh and cached is not None and now - cached[0] < self._ttl_s:
            return cached[1]
        fields = await self._transport.get(COLLECTION, name)
        stored = None if fields is None else _registered(fields)
        self._cached[name] = (now, stored)
        return stored

    async def require(self, name: str) -> Registered:
        """The entry, or NotFound."""
        stored = await self.get(name)
        if stored is None or stored.dropping:
            raise _missing(name, stored)
        return stored

    async def still_there(self, name: str, incarnation: str) -> bool:
        """Whether the entry exists, is not marked for deletion and is still `incarnation`, read
        fresh (the fence an upsert passes after its writes)."""
        stored = await self.get(name, fresh=True)
        return stored is not None and not stored.dropping and stored.incarnation == incarnation

    async def mark_dropping(self, name: str) -> None:
        """Mark the entry `DROPPING` (test-and-set on its revision, at most `ATTEMPTS` rounds);
        already marked (a deletion that was interrupted) is fine; missing is NotFound."""
        for _ in range(ATTEMPTS):
            stored = await self.get(name, fresh=True)
            if stored is None:
                raise _missing(name, stored)
            if stored.dropping:
                return
            try:
                marked = Registered(stored.spec, stored.types, DROPPING, stored.incarnation)
                await self._put(name, marked, _unchanged(stored.revision))
                return
            except ConditionFailed:
                log.info("registry changed under a deletion", extra={"collection": name})
        raise _contended(name)

    async def ensure(self, name: str, spec: CollectionSpec) -> None:
        """Create the entry when missing (only a missing one is written, so two replicas
        creating the same collection keep one entry); an existing one must have `spec`."""
        stored = await self.get(name, fresh=True)
        if stored is None:
            try:
                entry = Registered(spec, {}, 1, new_incarnation())
                await self._put(name, entry, CREATE_ONLY)
                log.info("collection created", extra={"collection": name})
                return
            except ConditionFailed:  # another writer created it first
                stored = await self.get(name, fresh=True)
                if stored is None:
                    raise _contended(name) from None
        if stored.dropping:
            raise _being_dropped(name)
        if (stored.spec.embedding_model, stored.spec.dimensions) != (
            spec.embedding_model,
            spec.dimensions,
        ):
            raise FailedPrecondition(
                f"collection {name!r} holds {stored.spec.dimensions}-d vectors of "
                f"{stored.spec.embedding_model!r}; the embedder makes {spec.dimensions}-d vectors "
                f"of {spec.embedding_model!r}",
                reason="EMBEDDING_MISMATCH",
                metadata={"collection": name},
            )

    async def widen(self, name: str, records: Sequence[ChunkRecord]) -> Registered:
        """The entry once `records` are stored (their metadata key types, the incarnation they
        are written into), written when they widen it: read it (a get, not the cache), widen,
        put it back with `revision + 1` on condition that `revision` is unchanged; on 412 read
        again, at most `ATTEMPTS` rounds."""
        for _ in range(ATTEMPTS):
            stored = await self.get(name, fresh=True)
            if stored is None or stored.dropping:
                raise _missing(name, stored) if stored is None else _being_dropped(name)
            widened = widen_types(stored.types, records)
            if widened == stored.types:
                return stored
            try:
                entry = Registered(stored.spec, widened, stored.revision + 1, stored.incarnation)
                await self._put(name, entry, _unchanged(stored.revision))
                return entry
            except ConditionFailed:
                log.info(
                    "registry changed under a write, reading it again", extra={"collection": name}
                )
        raise _contended(name)

    async def delete(self, name: str) -> None:
        await self._transport.delete(COLLECTION, name)
        self._cached.pop(name, None)

    async def _put(self, name: str, entry: Registered, condition: str) -> None:
        """Write `entry` if `condition` (a document selection) holds for the stored one, else
        `ConditionFailed`; `CREATE_ONLY` writes only a missing entry. A put replaces the whole
        document, so the incarnation is written again each time (an entry without one stays
        without)."""
        fields: dict[str, Any] = {
            "name": name,
            "embedding_model": entry.spec.embedding_model,
            "dimensions": entry.spec.dimensions,
            "metadata_types": json.dumps({k: t.value for k, t in sorted(entry.types.items())}),
            "revision": entry.revision,
        }
        if entry.incarnation:
            fields["incarnation"] = entry.incarnation
        await self._transport.put(
            COLLECTION,
            name,
            fields,
            condition=condition,
            create=condition == CREATE_ONLY,
        )
        self._cached[name] = (time.monotonic(), entry)


def widen_types(
    types: Mapping[str, FieldType], records: Sequence[ChunkRecord]
) -> dict[str, FieldType]:
    """Each metadata key's type once `records` are stored; a conflicting value is
    InvalidArgument naming `metadata.<key>` (the embedded engine's rule)."""
    merged = dict(types)
    for record in records:
        for key, value in record.chunk.metadata.items():
            incoming = metadata_type(value)
            if key not in merged:
                merged[key] = incoming
                continue
            wider = widen(merged[key], incoming)
            if key in types and wider is not types[key]:
                raise InvalidArgument.for_field(
                    f"metadata.{key}", f"is {types[key]} in this collection, not {incoming}"
                )
            if wider is None:
                raise InvalidArgument.for_field(
                    f"metadata.{key}", f"mixes {merged[key]} and {incoming} values"
                )
            merged[key] = wider
    return merged


def new_incarnation() -> str:
    """A fresh incarnation id: 128 random bits as hex (never reused, never empty)."""
    return secrets.token_hex(16)


def condition_of(incarnation: str) -> str:
    """The condition that a stored chunk belongs to `incarnation` (the empty one: a chunk
    without the field, `== null`, the only comparison defined on a missing field)."""
    value = f'"{incarnation}"' if incarnation else "null"
    return f"{CHUNK}.incarnation == {value}"


def _unchanged(revision: int) -> str:
    """The condition that the stored entry is still at `revision` (0: written before entries
    had one, the field is missing, which only `== null` tests without turning invalid)."""
    value = "null" if revision == 0 else str(revision)
    return f"{COLLECTION}.revision == {value}"


def _registered(fields: Mapping[str, Any]) -> Registered:
    types = json.loads(fields.get("metadata_types") or "{}")
    return Registered(
        CollectionSpec(str(fields["embedding_model"]), int(fields["dimensions"])),
        {k: FieldType(v) for k, v in types.items()},
        int(fields.get("revision") or 0),
        str(fields.get("incarnation") or ""),
    )


def _missing(name: str, stored: Registered | None) -> NotFound:
    being = " (it is being deleted)" if stored is not None else ""
    return NotFound(f"collection {name!r} does not exist{being}", metadata={"collection": name})


def _being_dropped(name: str) -> Unavailable:
    return Unavailable(
        f"collection {name!r} is being deleted; retry once the deletion ends (a deletion that "
        "was interrupted ends by DeleteCollection again)",
        retry_after_s=RETRY_AFTER_S,
        reason="VESPA_COLLECTION_DROPPING",
        metadata={"collection": name},
    )


def _contended(name: str) -> Unavailable:
    return Unavailable(
        f"the registry entry of collection {name!r} kept changing under this write "
        f"({ATTEMPTS} test-and-set rounds); retry",
        retry_after_s=RETRY_AFTER_S,
        reason="VESPA_REGISTRY_CONTENDED",
        metadata={"collection": name},
    )
