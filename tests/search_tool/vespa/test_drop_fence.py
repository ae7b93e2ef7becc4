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
from services.search_tool.engine.vespa.registry import DROPPING
from tests.search_tool.engine_fixtures import DIMENSIONS
from tests.search_tool.vespa.recording_server import Recorded, RecordingServer, Reply
from tests.search_tool.vespa.selection_reference import matches, parse
from tests.search_tool.vespa.test_http_contract import _root
from tests.search_tool.vespa.test_writes import CHUNK_PATH, RegistryStore, _record

SPEC = CollectionSpec("test-model", DIMENSIONS)


@dataclass
class Store(RegistryStore):
    chunks: dict[str, dict[str, Any]] = field(default_factory=dict)
    hold_puts: asyncio.Event | None = None
    """When set, chunk puts are stored and answered only once it is set."""
    puts_arrived: asyncio.Event = field(default_factory=asyncio.Event)
    hold_sweep: asyncio.Event | None = None
    """When set, the selection delete waits for it (and runs when it is set)."""
    sweep_arrived: asyncio.Event = field(default_factory=asyncio.Event)
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)

    def respond(self, request: Recorded) -> Reply:
        if request.path == CHUNK_PATH.rstrip("/") and "selection" in request.query:
            return self._sweep(request)
        if request.path.startswith(CHUNK_PATH):
            key = request.path[len(CHUNK_PATH) :]
            if request.method == "DELETE":
                self.chunks.pop(key, None)
                return Reply(200, {"pathId": request.path})
            self.puts_arrived.set()
            if self.hold_puts is not None:
                return Reply(200, {"pathId": request.path}, delay=self._store_later(key, request))
            self.chunks[key] = request.json()["fields"]
            return Reply(200, {"pathId": request.path})
        prefix = "/document/v1/quarry/collection/docid/"
        if request.path.startswith(prefix) and request.method == "DELETE":
            self.documents.pop(request.path[len(prefix) :], None)
            return Reply(200, {"pathId": request.path})
        if request.path.startswith(prefix):
            return super().respond(request)
        return _root([], 0)

    def _store_later(self, key: str, request: Recorded) -> asyncio.Event:
        """An event set once `hold_puts` is set and the put is stored (as Vespa acks after
        the write is applied)."""
        stored = asyncio.Event()
        assert self.hold_puts is not None
        held = self.hold_puts

        async def store() -> None:
            await held.wait()
            self.chunks[key] = request.json()["fields"]
            stored.set()

        task = asyncio.get_running_loop().create_task(store())
        self._tasks.add(task)
        return stored

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
