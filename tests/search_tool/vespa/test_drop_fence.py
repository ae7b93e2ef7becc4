"""DeleteCollection on one replica racing an Upsert on another (two `VespaEngine` instances, one
recording server): the deletion marks the registry entry, deletes the chunks, deletes the entry;
the upsert checks the entry after its writes and deletes what it wrote when the collection is
marked or gone. The store below applies the test-and-set conditions, the document selection
deletes (`DELETE …/chunk/docid?selection=…`, answered in one round: `{"pathId",
"documentCount"}`, `en/reference/api/document-v1.html` "Delete where") and deletes by id as
documented; chunk puts can be held open, so each interleaving is forced, not hoped for."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from services.common.errors import NotFound, Unavailable
from services.search_tool.engine.base import CollectionSpec
from services.search_tool.engine.vespa import Endpoint, VespaEngine
from services.search_tool.engine.vespa.documents import chunk_document_id
from services.search_tool.engine.vespa.package import application_package
from services.search_tool.engine.vespa.registry import ATTEMPTS, DROPPING
from tests.search_tool.engine_fixtures import DIMENSIONS
from tests.search_tool.vespa.recording_server import Recorded, RecordingServer, Reply
from tests.search_tool.vespa.selection_reference import matches, parse
from tests.search_tool.vespa.test_http_contract import _root
from tests.search_tool.vespa.test_writes import CHUNK_PATH, RegistryStore, _record

SPEC = CollectionSpec("test-model", DIMENSIONS)
_REFUSED = "TEST_AND_SET_CONDITION_FAILED"


@dataclass
class Store(RegistryStore):
    chunks: dict[str, dict[str, Any]] = field(default_factory=dict)
    hold_puts: asyncio.Event | None = None
    """When set, chunk puts arriving now are applied and answered only once it is set (the
    condition is evaluated then, against what is stored then, as Vespa applies a write)."""
    puts_arrived: asyncio.Event = field(default_factory=asyncio.Event)
    hold_sweep: asyncio.Event | None = None
    """When set, the selection delete waits for it (and runs when it is set)."""
    sweep_arrived: asyncio.Event = field(default_factory=asyncio.Event)
    chunk_refused: int = 0
    """Chunk puts and deletes answered 412."""
    put_conditions: list[str | None] = field(default_factory=list)
    """The `condition` of each chunk put applied or refused, in that order."""
    refuse_puts: bool = False
    """When set, every conditional chunk put is refused (412), as if the chunk changed again
    between each read and each write."""
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)

    def respond(self, request: Recorded) -> Reply:
        if request.path == CHUNK_PATH.rstrip("/") and "selection" in request.query:
            return self._sweep(request)
        if request.path.startswith(CHUNK_PATH):
            key = request.path[len(CHUNK_PATH) :]
            if request.method == "GET":
                stored = self.chunks.get(key)
                if stored is None:
                    return Reply(404, {"pathId": request.path})
                return Reply(200, {"pathId": request.path, "fields": dict(stored)})
            if request.method == "DELETE":
                return self._delete_chunk(key, request)
            self.puts_arrived.set()
            if self.hold_puts is not None:
                return Reply(200, delay=self.hold_puts, then=lambda: self._put_chunk(key, request))
            return self._put_chunk(key, request)
        prefix = "/document/v1/quarry/collection/docid/"
        if request.path.startswith(prefix) and request.method == "DELETE":
            self.documents.pop(request.path[len(prefix) :], None)
            return Reply(200, {"pathId": request.path})
        if request.path.startswith(prefix):
            return super().respond(request)
        return _root([], 0)

    def _put_chunk(self, key: str, request: Recorded) -> Reply:
        """A put under its test-and-set `condition` (a document selection over the stored
        chunk); with `create`, a missing chunk is written whatever the condition."""
        condition = request.query.get("condition")
        self.put_conditions.append(condition)
        stored = self.chunks.get(key)
        if condition is not None:
            create = request.query.get("create") == "true"
            if (
                self.refuse_puts
                or (stored is None and not create)
                or (stored is not None and not matches(parse(condition), stored))
            ):
                self.chunk_refused += 1
                return Reply(412, {"pathId": request.path, "message": _REFUSED})
        self.chunks[key] = request.json()["fields"]
        return Reply(200, {"pathId": request.path})

    def _delete_chunk(self, key: str, request: Recorded) -> Reply:
        """A delete, under its `condition` when it has one (a missing chunk then answers 412,
        which the engine takes like 200)."""
        condition = request.query.get("condition")
        stored = self.chunks.get(key)
        if condition is not None and (stored is None or not matches(parse(condition), stored)):
            self.chunk_refused += 1
            return Reply(412, {"pathId": request.path, "message": _REFUSED})
        self.chunks.pop(key, None)
        return Reply(200, {"pathId": request.path})

    def _sweep(self, request: Recorded) -> Reply:
        self.sweep_arrived.set()
        selection = parse(request.query["selection"])
        if self.hold_sweep is None:
            return Reply(200, self._remove_selected(selection, request))
        done = asyncio.Event()
        held = self.hold_sweep
        body: dict[str, Any] = {}

        async def sweep() -> None:
            await held.wait()
            body.update(self._remove_selected(selection, request))
            done.set()

        self._tasks.add(asyncio.get_running_loop().create_task(sweep()))
        return Reply(200, body, delay=done)

    def _remove_selected(self, selection: Any, request: Recorded) -> dict[str, Any]:
        selected = [k for k, f in self.chunks.items() if matches(selection, f)]
        for key in selected:
            del self.chunks[key]
        return {"pathId": request.path, "documentCount": len(selected)}


@pytest.fixture
async def replicas() -> AsyncIterator[tuple[Store, VespaEngine, VespaEngine]]:
    store = Store()
    server = RecordingServer(store.respond)
    await server.start()
    first = await VespaEngine.open(Endpoint(server.url, query_timeout_s=2.0), facts_ttl_s=0)
    second = await VespaEngine.open(Endpoint(server.url, query_timeout_s=2.0), facts_ttl_s=0)
    try:
        await first.ensure_collection("fixture", SPEC)
        yield store, first, second
    finally:
        await first.close()
        await second.close()
        await server.close()


def _fixture_chunks(store: Store) -> list[str]:
    return [k for k, f in store.chunks.items() if f.get("collection") == "fixture"]


def _incarnation(store: Store) -> str | None:
    return store.documents["fixture"].get("incarnation")


async def test_an_upsert_whose_writes_land_after_the_deletion_swept_deletes_them_again(
    replicas: tuple[Store, VespaEngine, VespaEngine],
) -> None:
    """The upsert's puts are in flight while the other replica deletes the collection from
    start to end (its sweep finds none of them); they land afterwards. The upsert finds the
    entry gone, deletes its chunks and fails NotFound: nothing outlives the collection."""
    store, dropper, writer = replicas
    store.hold_puts = asyncio.Event()
    upsert = asyncio.create_task(writer.upsert("fixture", [_record(f"c{i}") for i in range(4)]))
    await store.puts_arrived.wait()
    await dropper.drop_collection("fixture")
    assert "fixture" not in store.documents
    store.hold_puts.set()
    with pytest.raises(NotFound) as dropped:
        await upsert
    assert dropped.value.reason == "VESPA_COLLECTION_DROPPED"
    assert _fixture_chunks(store) == []


async def test_an_upsert_that_checks_while_the_deletion_runs_sees_the_mark(
    replicas: tuple[Store, VespaEngine, VespaEngine],
) -> None:
    """The upsert's puts are in flight; the other replica marks the entry and its sweep is
    held; the puts land and the upsert's check reads the mark (the entry still exists): it
    deletes its chunks itself, before the sweep runs. Then the deletion ends; nothing is left."""
    store, dropper, writer = replicas
    store.hold_puts = asyncio.Event()
    store.hold_sweep = asyncio.Event()
    upsert = asyncio.create_task(writer.upsert("fixture", [_record(f"c{i}") for i in range(4)]))
    await store.puts_arrived.wait()
    drop = asyncio.create_task(dropper.drop_collection("fixture"))
    await store.sweep_arrived.wait()
    assert store.documents["fixture"]["revision"] == DROPPING
    store.hold_puts.set()
    with pytest.raises(NotFound):
        await upsert
    assert _fixture_chunks(store) == []  # the upsert's own deletes, the sweep is still held
    store.hold_sweep.set()
    await drop
    assert "fixture" not in store.documents


async def test_widening_a_marked_collection_is_unavailable_and_writes_nothing(
    replicas: tuple[Store, VespaEngine, VespaEngine],
) -> None:
    store, dropper, writer = replicas
    store.hold_sweep = asyncio.Event()
    drop = asyncio.create_task(dropper.drop_collection("fixture"))
    await store.sweep_arrived.wait()
    with pytest.raises(Unavailable) as refused:
        await writer.upsert("fixture", [_record("late", {"team": "x"})])
    assert refused.value.reason == "VESPA_COLLECTION_DROPPING"
    assert _fixture_chunks(store) == []
    store.hold_sweep.set()
    await drop


async def test_a_marked_collection_reads_as_missing_and_refuses_creation_until_deleted(
    replicas: tuple[Store, VespaEngine, VespaEngine],
) -> None:
    """A deletion interrupted after the mark: reads say NotFound, creating it again is
    UNAVAILABLE (retryable); DeleteCollection again finishes it, and then it can be created."""
    store, first, second = replicas
    store.documents["fixture"] = {**store.documents["fixture"], "revision": DROPPING}
    with pytest.raises(NotFound, match="being deleted"):
        await second.fields("fixture")
    with pytest.raises(Unavailable) as refused:
        await second.ensure_collection("fixture", SPEC)
    assert refused.value.reason == "VESPA_COLLECTION_DROPPING"
    await second.drop_collection("fixture")
    assert "fixture" not in store.documents
    await first.ensure_collection("fixture", SPEC)
    assert store.documents["fixture"]["revision"] == 1


async def test_the_mark_and_a_widening_racing_it_are_both_conditional_writes(
    replicas: tuple[Store, VespaEngine, VespaEngine],
) -> None:
    """Both replicas read revision 1 before either writes (the store holds both gets until both
    arrived): one conditional write is refused (412) and re-reads. Whichever came first, the
    collection ends deleted with none of the upsert's chunks. The upsert fails when the mark came
    first; when its widening came first it may also finish (its fence read before the mark), and
    then it is simply ordered before the deletion, which removes its chunk."""
    store, dropper, writer = replicas
    store.hold_gets = store._gets + 2
    results = await asyncio.gather(
        dropper.drop_collection("fixture"),
        writer.upsert("fixture", [_record("a", {"team": "search"})]),
        return_exceptions=True,
    )
    assert results[0] is None
    assert results[1] == 1 or isinstance(results[1], NotFound | Unavailable), results[1]
    assert store.refused == 1
    assert _fixture_chunks(store) == []
    assert "fixture" not in store.documents


async def test_an_upsert_whose_collection_is_recreated_before_its_check_leaves_nothing_in_it(
    replicas: tuple[Store, VespaEngine, VespaEngine],
) -> None:
    """The upsert's puts into incarnation A are held while the other replica deletes the
    collection and creates it again (incarnation B, revision 1, no chunks); then they land,
    under the same name. Its check finds an entry, not marked, but of B: it deletes what it
    wrote (only where still of A) and fails NotFound. The new collection holds nothing of it."""
    store, dropper, writer = replicas
    first = _incarnation(store)
    store.hold_puts = asyncio.Event()
    upsert = asyncio.create_task(writer.upsert("fixture", [_record(f"c{i}") for i in range(4)]))
    await store.puts_arrived.wait()
    await dropper.drop_collection("fixture")
    await dropper.ensure_collection("fixture", SPEC)
    second = _incarnation(store)
    assert first is not None
    assert second not in (None, first)
    store.hold_puts.set()
    with pytest.raises(NotFound) as dropped:
        await upsert
    assert dropped.value.reason == "VESPA_COLLECTION_DROPPED"
    assert _fixture_chunks(store) == []
    assert store.documents["fixture"]["revision"] == 1
    assert _incarnation(store) == second


async def test_a_late_put_of_the_old_incarnation_neither_replaces_nor_deletes_the_new_ones_chunk(
    replicas: tuple[Store, VespaEngine, VespaEngine],
) -> None:
    """The collection is deleted and created again while the upsert's put of chunk x is held,
    and the new incarnation writes its own x. The late put is conditional on the old incarnation:
    refused (412); the engine reads x and the entry (another incarnation: this upsert is the
    older one), fails NotFound, and its conditional delete of x is refused too. x stays the new
    incarnation's, as it wrote it."""
    store, dropper, writer = replicas
    store.hold_puts = held = asyncio.Event()
    upsert = asyncio.create_task(writer.upsert("fixture", [_record("x", {"team": "old"})]))
    await store.puts_arrived.wait()
    store.hold_puts = None  # puts arriving from now on are answered at once
    await dropper.drop_collection("fixture")
    await dropper.ensure_collection("fixture", SPEC)
    await dropper.upsert("fixture", [_record("x", {"team": "new"})])
    held.set()
    with pytest.raises(NotFound) as dropped:
        await upsert
    assert dropped.value.reason == "VESPA_COLLECTION_DROPPED"
    [kept] = store.chunks.values()
    assert kept["incarnation"] == _incarnation(store)
    assert kept["meta_str"] == {"team": "new"}
    assert store.chunk_refused == 2  # the late put, then its delete


@pytest.mark.parametrize("left", ["a-crashed-upsert-s", None], ids=["older", "without"])
async def test_a_chunk_an_older_incarnation_left_under_the_id_is_replaced(
    replicas: tuple[Store, VespaEngine, VespaEngine], left: str | None
) -> None:
    """A chunk of an earlier incarnation (an upsert that never reached its check) or one written
    before incarnations existed sits under the id: the put is refused (412), the engine reads
    the chunk and the entry (still its own, so the chunk is older) and replaces it on condition
    that it is still the chunk read."""
    store, _, writer = replicas
    key = chunk_document_id("fixture", "x")
    store.chunks[key] = {"collection": "fixture", "chunk_id": "x"}
    if left is not None:
        store.chunks[key]["incarnation"] = left
    await writer.upsert("fixture", [_record("x")])
    assert store.chunks[key]["incarnation"] == _incarnation(store)
    assert store.put_conditions == [
        f'chunk.incarnation == "{_incarnation(store)}"',
        f'chunk.incarnation == "{left}"' if left else "chunk.incarnation == null",
    ]


async def test_every_write_of_the_entry_keeps_its_incarnation(
    replicas: tuple[Store, VespaEngine, VespaEngine],
) -> None:
    """Created with 32 random hex digits; widening and the deletion mark write it again (a put
    replaces the whole entry); the chunks carry it."""
    store, dropper, writer = replicas
    incarnation = _incarnation(store)
    assert incarnation is not None
    assert len(incarnation) == 32
    int(incarnation, 16)
    await writer.upsert("fixture", [_record("a", {"team": "search"})])
    assert store.documents["fixture"]["revision"] == 2
    assert _incarnation(store) == incarnation
    assert [c["incarnation"] for c in store.chunks.values()] == [incarnation]
    # every field written is one the deployed schemas declare (a misspelt one Vespa refuses)
    package = application_package()
    [chunk] = store.chunks.values()
    written: list[tuple[str, dict[str, Any]]] = [
        ("collection", store.documents["fixture"]),
        ("chunk", chunk),
    ]
    for schema, fields in written:
        declared = {f.name for f in package.get_schema(schema).document.fields}
        assert fields.keys() <= declared, schema
    store.hold_sweep = asyncio.Event()
    drop = asyncio.create_task(dropper.drop_collection("fixture"))
    await store.sweep_arrived.wait()
    assert store.documents["fixture"]["revision"] == DROPPING
    assert _incarnation(store) == incarnation
    store.hold_sweep.set()
    await drop


async def test_a_collection_from_before_incarnations_writes_none_and_is_still_fenced_when_recreated(
    replicas: tuple[Store, VespaEngine, VespaEngine],
) -> None:
    """An entry written before incarnations existed has none, and keeps none (widening writes
    none); its chunks are written without one, on condition that the stored chunk has none
    (`== null`). Deleted and created again (now with an incarnation) under a held upsert: the
    upsert is fenced out as for any other incarnation."""
    store, dropper, writer = replicas
    del store.documents["fixture"]["incarnation"]
    await writer.upsert("fixture", [_record("a", {"team": "search"})])
    assert store.documents["fixture"]["revision"] == 2
    assert "incarnation" not in store.documents["fixture"]
    [written] = store.chunks.values()
    assert "incarnation" not in written
    assert store.put_conditions == ["chunk.incarnation == null"]
    store.puts_arrived = asyncio.Event()  # the first upsert's put set it: wait for the next one
    store.hold_puts = asyncio.Event()
    upsert = asyncio.create_task(writer.upsert("fixture", [_record("b")]))
    await store.puts_arrived.wait()
    await dropper.drop_collection("fixture")
    await dropper.ensure_collection("fixture", SPEC)
    store.hold_puts.set()
    with pytest.raises(NotFound):
        await upsert
    assert _fixture_chunks(store) == []
    assert _incarnation(store) is not None


async def test_an_entry_rewritten_without_its_incarnation_by_an_older_replica_fences_the_upsert(
    replicas: tuple[Store, VespaEngine, VespaEngine],
) -> None:
    """A replica running a version from before incarnations widens the entry with a put that
    does not know the field (so it drops it) while an upsert's puts are held. The upsert cannot
    tell that from a deletion and creation by such a replica, and takes the safe side: it deletes
    what it wrote and fails NotFound (retried, it writes into the entry as it now is)."""
    store, _, writer = replicas
    store.hold_puts = asyncio.Event()
    upsert = asyncio.create_task(writer.upsert("fixture", [_record("a")]))
    await store.puts_arrived.wait()
    entry = store.documents["fixture"]
    store.documents["fixture"] = {
        **{k: v for k, v in entry.items() if k != "incarnation"},
        "revision": entry["revision"] + 1,
    }
    store.hold_puts.set()
    with pytest.raises(NotFound):
        await upsert
    assert _fixture_chunks(store) == []
    await writer.upsert("fixture", [_record("a")])
    assert [c.get("incarnation") for c in store.chunks.values()] == [None]


async def test_a_chunk_that_keeps_changing_under_the_put_ends_unavailable_after_bounded_rounds(
    replicas: tuple[Store, VespaEngine, VespaEngine],
) -> None:
    """Every conditional put refused while the entry stays this incarnation: the engine reads
    and tries again at most `ATTEMPTS` times, then UNAVAILABLE (retryable) naming the chunk."""
    store, _, writer = replicas
    store.chunks[chunk_document_id("fixture", "x")] = {"collection": "fixture", "incarnation": "z"}
    store.refuse_puts = True
    with pytest.raises(Unavailable) as contended:
        await writer.upsert("fixture", [_record("x")])
    assert contended.value.reason == "VESPA_CHUNK_CONTENDED"
    assert len(store.put_conditions) == ATTEMPTS
    assert store.chunks[chunk_document_id("fixture", "x")]["incarnation"] == "z"
