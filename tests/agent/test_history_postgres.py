"""The run history in PostgreSQL, what only a shared database does: several replicas over one
database (each reads every run; a replica whose heartbeat stops has its running runs marked
`interrupted` by another within the lease), migrations applied once by replicas starting
together, retention, and the database going down and coming back (runs go on, lost writes are
counted, recording resumes). The RPC-level behaviour (GetRun / ListRuns filters, paging, access)
runs against both histories in tests/agent/test_run_history.py."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import psycopg
import pytest
from quarry.agent.v1 import agent_pb2

from services.agent.config import HistorySettings, ReplicaSettings
from services.agent.history_postgres import COMPONENT, PostgresRunHistory
from services.agent.run_history import RunQuery
from services.common.errors import Unavailable
from services.common.postgres import MIGRATIONS_TABLE, PostgresSettings
from tests.postgres_server import PostgresServer

DSN_ENV = "QUARRY_TEST_AGENT_HISTORY_DSN"
Open = Callable[..., Awaitable[PostgresRunHistory]]


@pytest.fixture
async def replica(
    postgres_dsn: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> AsyncIterator[Open]:
    monkeypatch.setenv(DSN_ENV, postgres_dsn)
    opened: list[PostgresRunHistory] = []

    async def open_replica(
        name: str, *, ready: bool = True, **history: object
    ) -> PostgresRunHistory:
        settings = HistorySettings(
            kind="postgres",
            postgres=PostgresSettings(dsn_env=DSN_ENV, pool_timeout_s=1.0, connect_timeout_s=1),
            replica=ReplicaSettings(name=name, heartbeat_interval_s=0.2, lease_s=1.0),
            **history,
        )
        store = PostgresRunHistory(settings)
        store.open()
        opened.append(store)
        if ready:
            assert await store.wait_ready(30)
        return store

    yield open_replica
    with caplog.at_level(logging.ERROR, logger="services.common.tasks"):
        for store in opened:
            await store.close()
    stuck = [r for r in caplog.records if r.name == "services.common.tasks"]
    assert stuck == [], "a replica's background task outlived its close"


def _record(run_id: str, started_at: float, collection: str = "docs") -> agent_pb2.RunRecord:
    record = agent_pb2.RunRecord(
        run_id=run_id,
        collection=collection,
        status=agent_pb2.RUN_STATUS_RUNNING,
        request=agent_pb2.RunRequest(query=f"q {run_id}", collection=collection),
    )
    record.started_at.FromNanoseconds(int(started_at * 1e9))
    return record


async def _finish(store: PostgresRunHistory, record: agent_pb2.RunRecord) -> None:
    record.status = agent_pb2.RUN_STATUS_COMPLETED
    record.ended_at.FromNanoseconds(time.time_ns())
    record.response.answer.text = f"answer of {record.run_id}"
    await store.finish(record, 1, [agent_pb2.StreamRunResponse()], [])


async def _until(check: Callable[[], Awaitable[bool]], timeout_s: float) -> None:
    """Asks the database again and again: what it holds changes on no event of this process."""
    async with asyncio.timeout(timeout_s):
        while not await check():  # noqa: ASYNC110
            await asyncio.sleep(0.05)


async def test_every_replica_reads_every_run_with_its_steps_events_and_response(
    replica: Open,
) -> None:
    a, b = await replica("agent-a"), await replica("agent-b")
    record = _record("run-on-a", time.time())
    a.begin(record)
    step = agent_pb2.StepRecord(index=1, text="searching")
    a.append("run-on-a", 0, [agent_pb2.StreamRunResponse()], [step])
    await _finish(a, record)
    for store in (a, b):
        run = await store.get("run-on-a")
        assert run is not None
        assert run.status == agent_pb2.RUN_STATUS_COMPLETED
        assert [s.text for s in run.steps] == ["searching"]
        assert len(run.events) == 2
        assert run.response.answer.text == "answer of run-on-a"
        runs, token = await store.list_runs(RunQuery(collections=["docs"]))
        assert [r.run_id for r in runs] == ["run-on-a"]
        assert token == ""


async def test_a_replica_whose_heartbeat_stops_has_its_running_runs_interrupted_by_another(
    replica: Open,
) -> None:
    a, b = await replica("agent-a"), await replica("agent-b")
    now = time.time()
    a.begin(_record("alive-when-a-died", now))
    a.append("alive-when-a-died", 0, [], [agent_pb2.StepRecord(index=1, text="searching")])
    finished = _record("finished-on-a", now + 1)
    a.begin(finished)
    await _finish(a, finished)
    b.begin(_record("running-on-b", now + 2))
    await a.close()  # its heartbeat stops (as SIGKILL would), its run row stays `running`
    started = time.monotonic()

    async def interrupted() -> bool:
        run = await b.get("alive-when-a-died")
        return run is not None and run.status == agent_pb2.RUN_STATUS_INTERRUPTED

    await _until(interrupted, timeout_s=10)
    assert time.monotonic() - started < 1.0 + 3 * 0.2 + 1.0  # the lease, heartbeats, margin
    run = await b.get("alive-when-a-died")
    assert run is not None
    assert "replica" in run.error_message
    assert [s.text for s in run.steps] == ["searching"]
    kept = await b.get("finished-on-a")
    assert kept is not None
    assert kept.status == agent_pb2.RUN_STATUS_COMPLETED
    alive = await b.get("running-on-b")
    assert alive is not None
    assert alive.status == agent_pb2.RUN_STATUS_RUNNING, "a live replica's runs are left alone"


async def test_a_restarted_replica_marks_its_own_leftover_running_runs_at_once(
    replica: Open,
) -> None:
    first = await replica("agent-0")
    first.begin(_record("left-running", time.time()))
    await first.close()
    again = await replica("agent-0")
    run = await again.get("left-running")
    assert run is not None
    assert run.status == agent_pb2.RUN_STATUS_INTERRUPTED


async def test_replicas_starting_together_apply_each_migration_once(
    replica: Open, postgres_dsn: str
) -> None:
    stores = await asyncio.gather(*(replica(f"agent-{n}", ready=False) for n in range(4)))
    ready = await asyncio.gather(*(s.wait_ready(30) for s in stores))
    assert all(ready)
    async with await psycopg.AsyncConnection.connect(postgres_dsn) as conn:
        cursor = await conn.execute(
            f"SELECT version FROM {MIGRATIONS_TABLE} WHERE component = %s", (COMPONENT,)
        )
        assert [r[0] for r in await cursor.fetchall()] == [1]


async def test_retention_deletes_runs_past_the_age_and_the_oldest_past_the_count(
    replica: Open,
) -> None:
    store = await replica("agent-a", max_age_days=1, max_runs=2, sweep_interval_s=10_000)
    now = time.time()
    for run_id, days in {"ancient": 3, "old": 0.5, "newer": 0.2, "newest": 0.1}.items():
        record = _record(run_id, now - days * 86_400)
        store.begin(record)
        await _finish(store, record)
    assert await store.sweep() == 2
    runs, _ = await store.list_runs(RunQuery())
    assert [r.run_id for r in runs] == ["newest", "newer"]
    assert await store.get("ancient") is None


async def test_with_the_database_down_runs_are_counted_not_recorded_then_recording_resumes(
    replica: Open, postgres_server: PostgresServer
) -> None:
    store = await replica("agent-a")
    # a fast stop: the test server runs with synchronous_commit off, so a crash could lose the
    # schema just written, which no real deployment would
    postgres_server.stop()
    try:
        lost = _record("during-the-outage", time.time())
        started = time.monotonic()
        store.begin(lost)
        await _finish(store, lost)  # returns: a run is never held by its record
        assert time.monotonic() - started < 5
        assert store.failed_writes >= 1
        with pytest.raises(Unavailable):
            await store.get("during-the-outage")
    finally:
        postgres_server.start()

    async def database_back() -> bool:
        return store.database_up

    await _until(database_back, timeout_s=30)
    after = _record("after-the-outage", time.time())
    store.begin(after)
    await _finish(store, after)
    run = await store.get("after-the-outage")
    assert run is not None
    assert run.status == agent_pb2.RUN_STATUS_COMPLETED


async def test_a_run_refused_before_it_started_is_forgotten_on_every_replica(
    replica: Open,
) -> None:
    a, b = await replica("agent-a"), await replica("agent-b")
    a.begin(_record("refused", time.time()))
    assert await a.get("refused") is not None  # recorded once begun (a reads its own writes)
    await a.forget("refused")
    for store in (a, b):
        assert await store.get("refused") is None
        runs, _ = await store.list_runs(RunQuery())
        assert "refused" not in [r.run_id for r in runs]
