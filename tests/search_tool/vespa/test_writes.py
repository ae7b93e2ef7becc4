"""Document writes through pyvespa's real async client against the recording server (L4): how
many times a write is sent while Vespa answers 429/503 and what the caller gets at the end, that a
failed write leaves nothing of itself in flight, and that two engines (two search-tool replicas)
widening one collection's registry entry at once lose neither's metadata keys.

Answers follow `en/reference/api/document-v1.html` (200 `{"pathId", "id"}`; 429 "too many inflight
feed operations"; 503; 400 with `message`; 412 "condition is not met … also the result when a
condition is specified, but the document does not exist"; 404 on a get of a missing document) and
`en/writing/document-v1-api-guide.html` ("Conditional updates and puts with create": with `create`,
a missing document is written whatever the condition). The registry store below models exactly
the conditions the engine sends; the live suite proves Vespa agrees."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from services.common.errors import FailedPrecondition, Unavailable
from services.search_tool.documents import Chunk, ChunkRecord
from services.search_tool.engine.base import CollectionSpec
from services.search_tool.engine.vespa import Endpoint, VespaEngine
from tests.search_tool.engine_fixtures import DIMENSIONS, vector_for
from tests.search_tool.vespa.recording_server import Recorded, RecordingServer, Reply
from tests.search_tool.vespa.test_http_contract import REGISTRY_FIELDS, REGISTRY_PATH, _root

CHUNK_PATH = "/document/v1/quarry/chunk/docid/"


def _record(chunk_id: str, metadata: dict[str, Any] | None = None) -> ChunkRecord:
    chunk = Chunk(id=chunk_id, document_id="d", chunk_index=0, text="t", metadata=metadata or {})
    return ChunkRecord(chunk, vector_for(chunk_id), "h")


def _chunk_puts(server: RecordingServer) -> list[Recorded]:
    return [r for r in server.requests if r.method == "POST" and r.path.startswith(CHUNK_PATH)]


def _registry_get(request: Recorded) -> Reply | None:
    if request.method == "GET" and request.path == REGISTRY_PATH:
        return Reply(200, {"pathId": request.path, "fields": REGISTRY_FIELDS})
    return None


@pytest.fixture
async def vespa() -> AsyncIterator[Callable[..., Any]]:
    servers: list[RecordingServer] = []
    engines: list[VespaEngine] = []

    async def start(
        respond: Callable[[Recorded], Reply], **endpoint: Any
    ) -> tuple[RecordingServer, VespaEngine]:
        server = RecordingServer(respond)
        await server.start()
        servers.append(server)
        engine = await VespaEngine.open(
            Endpoint(server.url, query_timeout_s=2.0, retry_pause_s=0.001, **endpoint)
        )
        engines.append(engine)
        return server, engine

    yield start
    for engine in engines:
        await engine.close()
    for server in servers:
        await server.close()


def _answers(statuses: Sequence[int]) -> Callable[[Recorded], Reply]:
    """Chunk puts answered with `statuses` in turn (the last one repeated)."""
    sent = iter(statuses)
    last = [statuses[0]]

    def respond(request: Recorded) -> Reply:
        registry = _registry_get(request)
        if registry is not None:
            return registry
        status = next(sent, last[0])
        last[0] = status
        body = {"pathId": request.path, "message": f"status {status}"}
        return Reply(status, body)

    return respond


@pytest.mark.parametrize(
    ("statuses", "attempts"),
    [((429, 429, 200), 3), ((503, 200), 2), ((429, 503, 200), 3), ((200,), 1)],
)
async def test_a_write_answered_429_or_503_is_sent_again_until_accepted_within_the_bound(
    vespa: Any, statuses: tuple[int, ...], attempts: int
) -> None:
    server, engine = await vespa(_answers(statuses), feed_retries=3)
    assert await engine.upsert("fixture", [_record("a")]) == 1
    assert len(_chunk_puts(server)) == attempts


@pytest.mark.parametrize("status", [429, 503])
async def test_a_write_vespa_keeps_refusing_stops_after_feed_retries_attempts_as_unavailable(
    vespa: Any, status: int
) -> None:
    """pyvespa alone retries 429 forever (`THROTTLE_RETRY`) and 503 three times around that:
    with `docv1_retry_policy=NO_RETRY` each attempt is one request, and we stop at the bound."""
    server, engine = await vespa(_answers((status,)), feed_retries=4)
    with pytest.raises(Unavailable) as raised:
        await engine.upsert("fixture", [_record("a")])
    assert len(_chunk_puts(server)) == 4
    assert raised.value.reason == "VESPA_OVERLOADED"
    assert raised.value.retry_after_s is not None
    assert f"answered {status}" in raised.value.message
    assert "attempt 4 of 4" in raised.value.message


@pytest.mark.parametrize(("status", "error"), [(400, FailedPrecondition), (507, Unavailable)])
async def test_a_write_vespa_refuses_for_good_is_sent_once(
    vespa: Any, status: int, error: type[Exception]
) -> None:
    server, engine = await vespa(_answers((status,)), feed_retries=5)
    with pytest.raises(error):
        await engine.upsert("fixture", [_record("a")])
    assert len(_chunk_puts(server)) == 1


async def test_a_failed_put_cancels_its_hanging_siblings_before_the_lock_is_released(
    vespa: Any,
) -> None:
    """One chunk is refused (400) while Vespa holds the other four open: the upsert fails with
    the refusal, and by then none of the four is still in flight (each held a write slot), so
    the next write of the collection cannot interleave with orphans of this one."""
    never = asyncio.Event()
    four_waiting = asyncio.Event()
    waiting: list[Recorded] = []
    refused = "/document/v1/quarry/chunk/docid/fixture.YmFk"  # base64url("bad")

    def respond(request: Recorded) -> Reply:
        registry = _registry_get(request)
        if registry is not None:
            return registry
        if request.path == refused:
            return Reply(400, {"pathId": request.path, "message": "bad field"})
        waiting.append(request)
        if len(waiting) == 4:
            four_waiting.set()
        return Reply(200, {"pathId": request.path}, delay=never)

    server, engine = await vespa(respond)
    ok = [_record(f"ok{i}") for i in range(4)]
    upsert = asyncio.ensure_future(engine.upsert("fixture", [*ok, _record("bad")]))
    await four_waiting.wait()
    with pytest.raises(FailedPrecondition, match="bad field"):
        await upsert
    assert engine.transport.writes_in_flight == 0
    assert len(_chunk_puts(server)) == 5
    # the collection is writable again at once
    server.respond = lambda r: _registry_get(r) or Reply(200, {"pathId": r.path})
    assert await engine.upsert("fixture", [_record("next")]) == 1


@dataclass
class RegistryStore:
    """The `collection` documents of a Vespa: get, and put under the test-and-set conditions the
    engine sends (`false` with `create`, `collection.revision == <n>`, `… == null`)."""

    documents: dict[str, dict[str, Any]] = field(default_factory=dict)
    refused: int = 0
    hold_gets: int = 0
    """The first this many registry gets are answered only once all of them have arrived."""
    _gets: int = 0
    _all_in: asyncio.Event = field(default_factory=asyncio.Event)

    def respond(self, request: Recorded) -> Reply:
        prefix = "/document/v1/quarry/collection/docid/"
        if request.path.startswith(prefix):
            name = request.path[len(prefix) :]
            return self._get(name, request) if request.method == "GET" else self._put(name, request)
        if request.path.startswith(CHUNK_PATH):
            return Reply(200, {"pathId": request.path})
        return _root([], 0)

    def _get(self, name: str, request: Recorded) -> Reply:
        self._gets += 1
        delay = None
        if self._gets <= self.hold_gets:
            delay = self._all_in
            if self._gets == self.hold_gets:
                self._all_in.set()
        stored = self.documents.get(name)
        if stored is None:
            return Reply(404, {"pathId": request.path}, delay=delay)
        return Reply(200, {"pathId": request.path, "fields": dict(stored)}, delay=delay)

    def _put(self, name: str, request: Recorded) -> Reply:
        stored = self.documents.get(name)
        condition = request.query.get("condition")
        create = request.query.get("create") == "true"
        applies = condition is not None and not (stored is None and create)
        if applies and (stored is None or not _holds(str(condition), stored)):
            self.refused += 1
            return Reply(412, {"pathId": request.path, "message": "TEST_AND_SET_CONDITION_FAILED"})
        self.documents[name] = request.json()["fields"]
        return Reply(200, {"pathId": request.path})


def _holds(condition: str, stored: dict[str, Any]) -> bool:
    if condition == "false":
        return False
    field_name, value = condition.split(" == ")
    assert field_name == "collection.revision", condition
    return stored.get("revision") == (None if value == "null" else int(value))


async def test_two_engines_widening_one_registry_at_once_lose_neither_key(vespa: Any) -> None:
    """Both replicas read revision 1 before either writes (the store holds both gets until both
    arrived); the second conditional put is refused (412), read again and written on top of the
    first: the entry ends with both new keys at revision 3. Without the condition the second
    put would silently replace the first one's key."""
    store = RegistryStore()
    server, first = await vespa(store.respond)
    second = await VespaEngine.open(Endpoint(server.url, query_timeout_s=2.0))
    try:
        await first.ensure_collection("fixture", CollectionSpec("test-model", DIMENSIONS))
        store.hold_gets = store._gets + 2
        await asyncio.gather(
            first.upsert("fixture", [_record("a", {"team": "search"})]),
            second.upsert("fixture", [_record("b", {"year": 2024})]),
        )
    finally:
        await second.close()
    entry = store.documents["fixture"]
    assert json.loads(entry["metadata_types"]) == {"team": "string", "year": "integer"}
    assert entry["revision"] == 3
    assert store.refused == 1
    assert (await second_fields(server.url)) == {"team", "year"}


async def second_fields(url: str) -> set[str]:
    """What a third replica, with nothing cached, reads as the collection's metadata keys."""
    engine = await VespaEngine.open(Endpoint(url, query_timeout_s=2.0))
    try:
        fields = await engine.fields("fixture")
    finally:
        await engine.close()
    return {f.removeprefix("metadata.") for f in fields if f.startswith("metadata.")}


async def test_two_engines_creating_one_collection_at_once_keep_one_entry(vespa: Any) -> None:
    """Both see no entry; both put with `condition=false&create=true`; Vespa writes the missing
    document for the first and refuses the second (the condition never holds for an existing
    one), which reads the entry back and finds its own model."""
    store = RegistryStore(hold_gets=2)
    server, first = await vespa(store.respond)
    second = await VespaEngine.open(Endpoint(server.url, query_timeout_s=2.0))
    spec = CollectionSpec("test-model", DIMENSIONS)
    try:
        await asyncio.gather(
            first.ensure_collection("fixture", spec), second.ensure_collection("fixture", spec)
        )
    finally:
        await second.close()
    puts = [r for r in server.requests if r.method == "POST" and "collection/docid" in r.path]
    assert [(r.query["condition"], r.query["create"]) for r in puts] == [("false", "true")] * 2
    assert store.refused == 1
    assert store.documents["fixture"]["revision"] == 1


async def test_a_registry_changing_under_every_attempt_is_unavailable_not_overwritten(
    vespa: Any,
) -> None:
    """Every conditional put is refused: after the bounded rounds the write fails retryably and
    no chunk was written."""

    def respond(request: Recorded) -> Reply:
        registry = _registry_get(request)
        if registry is not None:
            return registry
        if "collection/docid" in request.path:
            return Reply(412, {"pathId": request.path, "message": "condition not met"})
        return Reply(200, {"pathId": request.path})

    server, engine = await vespa(respond)
    with pytest.raises(Unavailable) as raised:
        await engine.upsert("fixture", [_record("a", {"new_key": 1})])
    assert raised.value.reason == "VESPA_REGISTRY_CONTENDED"
    registry_puts = [r for r in server.requests if r.method == "POST" and "collection" in r.path]
    assert len(registry_puts) == 8
    assert all(r.query["condition"] == "collection.revision == 3" for r in registry_puts)
    assert not _chunk_puts(server)


async def test_with_a_feed_url_documents_go_to_the_feed_cluster_and_queries_to_the_query_one(
    vespa: Any,
) -> None:
    """A multi-node package (`topology.py`) has the document API on `feed` and search on
    `query`: writes, gets and visits go to `feed_url`, queries to `url`."""
    feed, _ = await vespa(lambda r: _registry_get(r) or Reply(200, {"pathId": r.path}))
    query, _ = await vespa(lambda r: _root([], 0))
    engine = await VespaEngine.open(Endpoint(query.url, feed_url=feed.url, query_timeout_s=2.0))
    try:
        await engine.upsert("fixture", [_record("a")])
        await engine.list_collections()
    finally:
        await engine.close()
    assert {r.path.split("/")[1] for r in feed.requests} == {"document"}
    assert {r.path for r in query.requests} == {"/search/"}
    assert len(_chunk_puts(feed)) == 1


async def test_with_the_feed_cluster_apart_readiness_also_needs_the_feed_cluster(
    vespa: Any,
) -> None:
    """The query cluster answers, the feed cluster is overloaded (503): not ready, naming it;
    once the feed cluster answers (a 404 for the probe id is an answer), ready."""
    feed_status = [503]
    feed, _ = await vespa(lambda r: Reply(feed_status[0], {"pathId": r.path, "message": "busy"}))
    query, _ = await vespa(lambda r: _root([], 0))
    engine = await VespaEngine.open(Endpoint(query.url, feed_url=feed.url, query_timeout_s=2.0))
    try:
        reason = await engine.unready_reason()
        assert reason is not None
        assert "503" in reason
        feed_status[0] = 404
        assert await engine.unready_reason() is None
    finally:
        await engine.close()
    assert [r.path for r in feed.requests] == [
        "/document/v1/quarry/collection/docid/quarry-readiness-probe"
    ] * 2
