"""Storage faults of the PostgreSQL run history, told by SQLSTATE: a table whose page the test
damaged on disk (a real XX001 data_corrupted from the embedded PostgreSQL) answers `GetRun` and
`ListRuns` DATA_LOSS naming the run or the history and the SQLSTATE, never INTERNAL; a write the
server refuses for a full disk (53100) is dropped and counted, and the run is not held by it.

A full disk cannot be made for the embedded server here (a tablespace on a tiny filesystem needs
a mount this machine does not allow): that case raises the real psycopg class `DiskFull` at the
connection boundary (`AsyncConnection.execute`), with a message that is not PostgreSQL's, so the
mapping is shown to depend on the SQLSTATE alone."""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest
from quarry.agent.v1 import agent_pb2

from services.agent.config import HistorySettings, ReplicaSettings
from services.agent.history_postgres import PostgresRunHistory
from services.agent.run_history import RunQuery
from services.common.errors import DataLoss, ResourceExhausted
from services.common.postgres import PostgresSettings
from tests.postgres_server import PostgresServer

pytestmark = pytest.mark.postgres

DSN_ENV = "QUARRY_TEST_AGENT_HISTORY_FAULTS_DSN"
Open = Callable[..., Awaitable[PostgresRunHistory]]


@pytest.fixture
async def opened(postgres_dsn: str, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Open]:
    monkeypatch.setenv(DSN_ENV, postgres_dsn)
    stores: list[PostgresRunHistory] = []

    async def open_store(statement_timeout_s: float = 30.0, **history: Any) -> PostgresRunHistory:
        settings = HistorySettings(
            kind="postgres",
            postgres=PostgresSettings(
                dsn_env=DSN_ENV,
                pool_timeout_s=2.0,
                connect_timeout_s=2,
                statement_timeout_s=statement_timeout_s,
            ),
            replica=ReplicaSettings(name="faults", heartbeat_interval_s=0.5, lease_s=5.0),
            **history,
        )
        store = PostgresRunHistory(settings)
        store.open()
        stores.append(store)
        assert await store.wait_ready(30)
        return store

    yield open_store
    for store in stores:
        await store.close()


async def _record_run(
    store: PostgresRunHistory, run_id: str, *, query: str = ""
) -> agent_pb2.RunRecord:
    record = agent_pb2.RunRecord(
        run_id=run_id,
        collection="docs",
        status=agent_pb2.RUN_STATUS_RUNNING,
        request=agent_pb2.RunRequest(query=query or f"q {run_id}", collection="docs"),
    )
    record.started_at.FromNanoseconds(time.time_ns())
    store.begin(record)
    record.status = agent_pb2.RUN_STATUS_COMPLETED
    record.ended_at.FromNanoseconds(time.time_ns())
    record.response.answer.text = f"answer of {run_id}"
    await store.finish(record, 1, [agent_pb2.StreamRunResponse()], [])
    return record


async def _until(check: Callable[[], Awaitable[bool]], timeout_s: float) -> None:
    async with asyncio.timeout(timeout_s):
        while not await check():  # noqa: ASYNC110
            await asyncio.sleep(0.05)


async def _damage_table(postgres_dsn: str, server: PostgresServer, table: str) -> Path:
    """Overwrite the first page of `table`'s file with garbage while the server is stopped (so
    no clean copy stays in its buffers), then start it again."""
    async with await psycopg.AsyncConnection.connect(postgres_dsn) as conn:
        cursor = await conn.execute("SELECT pg_relation_filepath(%s)", (table,))
        row = await cursor.fetchone()
    assert row is not None
    path = server.data_dir / str(row[0])
    server.stop()
    try:
        with path.open("r+b") as file:
            file.write(b"\xa5\x5a" * 4096)  # one 8 KiB page whose header is nonsense
    finally:
        server.start()
    return path


async def test_a_damaged_runs_table_answers_data_loss_naming_the_run_and_the_history(
    opened: Open, postgres_dsn: str, postgres_server: PostgresServer
) -> None:
    store = await opened()
    await _record_run(store, "run-1")
    assert (await store.get("run-1")) is not None
    await _damage_table(postgres_dsn, postgres_server, "agent_runs")

    async def database_back() -> bool:
        return store.database_up

    await _until(database_back, timeout_s=30)
    with pytest.raises(DataLoss) as damaged:
        await store.get("run-1")
    assert damaged.value.metadata["run_id"] == "run-1"
    assert damaged.value.metadata["sqlstate"] == "XX001"
    assert "the record of run run-1 is damaged" in damaged.value.message
    with pytest.raises(DataLoss) as listing:
        await store.list_runs(RunQuery(page_size=10))
    assert listing.value.metadata["sqlstate"] == "XX001"
    assert "list of runs is damaged" in listing.value.message


async def test_a_write_refused_for_a_full_disk_is_counted_and_logged_with_its_cause(
    opened: Open, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    store = await opened()
    real = psycopg.AsyncConnection.execute

    async def full_on_insert(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        text = query if isinstance(query, str) else str(query)
        if "INSERT INTO agent_runs" in text:
            raise psycopg.errors.DiskFull("the test's disk is full")
        return await real(self, query, *args, **kwargs)

    monkeypatch.setattr(psycopg.AsyncConnection, "execute", full_on_insert)
    before = store.failed_writes
    with caplog.at_level(logging.ERROR, logger="services.agent.history_postgres"):
        await _record_run(store, "run-full")  # returns: a run is never held by its record
    assert store.failed_writes >= before + 1
    dropped = [r for r in caplog.records if r.getMessage() == "run history write dropped"]
    assert any("storage fault" in str(getattr(r, "why", "")) for r in dropped)
    assert any("SQLSTATE 53100" in str(getattr(r, "why", "")) for r in dropped)


async def test_a_read_on_a_full_disk_answers_resource_exhausted_storage_full(
    opened: Open, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sort that spills to a full disk fails the same way a write does."""
    store = await opened()
    await _record_run(store, "run-1")
    real = psycopg.AsyncConnection.execute

    async def full_on_list(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        text = query.decode() if isinstance(query, bytes) else str(query)
        if "ORDER BY started_at DESC" in text:
            raise psycopg.errors.DiskFull("the test's disk is full")
        return await real(self, query, *args, **kwargs)

    monkeypatch.setattr(psycopg.AsyncConnection, "execute", full_on_list)
    with pytest.raises(ResourceExhausted) as full:
        await store.list_runs(RunQuery(page_size=10))
    assert full.value.reason == "STORAGE_FULL"
    assert full.value.metadata["sqlstate"] == "53100"
    assert (await store.get("run-1")) is not None  # other reads go on


async def _blocks_of_runs(postgres_dsn: str) -> dict[str, int]:
    """Each run's heap block in `agent_runs` (from its row's `ctid`)."""
    async with await psycopg.AsyncConnection.connect(postgres_dsn) as conn:
        cursor = await conn.execute("SELECT run_id, ctid::text FROM agent_runs")
        rows = await cursor.fetchall()
    return {str(run_id): int(str(ctid).strip("()").split(",")[0]) for run_id, ctid in rows}


async def test_a_runs_table_damaged_before_start_is_reported_once_and_does_not_block_readiness(
    opened: Open,
    postgres_dsn: str,
    postgres_server: PostgresServer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The start-up work (this replica's leftover running runs, the retention sweep) scans the
    damaged table: each failure is a finding, logged once, counted; the history becomes ready,
    the runs on sound pages are read, new runs are recorded, the damaged ones answer DATA_LOSS."""
    first = await opened()
    leftover = agent_pb2.RunRecord(  # the first row: on the page damaged below
        run_id="run-left-running",
        collection="docs",
        status=agent_pb2.RUN_STATUS_RUNNING,
        request=agent_pb2.RunRequest(query="still running", collection="docs"),
    )
    leftover.started_at.FromNanoseconds(time.time_ns())
    first.begin(leftover)
    assert (await first.get("run-left-running")) is not None
    filler = os.urandom(400).hex()  # ~1 KB a row, incompressible: the table spans pages
    for n in range(30):
        await _record_run(first, f"run-{n}", query=f"{n} {filler}")
    await first.close()
    blocks = await _blocks_of_runs(postgres_dsn)
    assert max(blocks.values()) >= 2, blocks
    assert blocks["run-left-running"] == 0
    on_damaged = sorted(r for r, b in blocks.items() if b == 0 and r != "run-left-running")
    on_sound = sorted(r for r, b in blocks.items() if b > 0 and r.startswith("run-"))
    assert on_damaged
    assert on_sound
    await _damage_table(postgres_dsn, postgres_server, "agent_runs")

    with caplog.at_level(logging.INFO, logger="services.agent.history_postgres"):
        store = await opened()  # ready within 30 s, the damage notwithstanding
        assert store.findings, "start-up met no damage: the test damaged nothing it reads"
        assert all("SQLSTATE XX001" in f for f in store.findings), store.findings
        assert any(f.startswith("marking this replica's leftover") for f in store.findings)
        assert store.damage_errors == len(store.findings)
        assert any(f.startswith("applying retention at start") for f in store.findings)
        reports = [r for r in caplog.records if r.getMessage().startswith("run history is damaged")]
        assert len(reports) == 1, [r.getMessage() for r in reports]
        assert getattr(reports[0], "findings") == store.findings  # noqa: B009
        assert not [r for r in caplog.records if r.getMessage() == "run history database not ready"]

        with pytest.raises(DataLoss) as damaged:
            await store.get(on_damaged[0])
        assert damaged.value.metadata["run_id"] == on_damaged[0]
        assert damaged.value.metadata["sqlstate"] == "XX001"
        sound = await store.get(on_sound[0])
        assert sound is not None
        assert sound.response.answer.text == f"answer of {on_sound[0]}"
        with pytest.raises(DataLoss):
            await store.list_runs(RunQuery(page_size=100))

        await _record_run(store, "run-after-damage")
        assert store.failed_writes == 0
        after = await store.get("run-after-damage")
        assert after is not None
        assert after.status == agent_pb2.RUN_STATUS_COMPLETED
        assert store.damage_errors >= len(store.findings) + 2  # the two damaged reads

        await asyncio.sleep(3 * store.settings.replica.heartbeat_interval_s)  # heartbeats go on
        reports = [r for r in caplog.records if r.getMessage().startswith("run history is damaged")]
        assert [r for r in reports if getattr(r, "step", None)] == [], "a known cause re-logged"


async def test_a_start_up_retention_held_up_by_a_lock_is_cut_short_and_the_history_is_ready(
    opened: Open, postgres_dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Retention due at start runs before readiness: a sweep that cannot finish (here its DELETE
    waits on a lock another session holds) is cut at `START_SWEEP_S` a statement, logged, and
    left to the next interval; with an hour-long statement timeout configured, readiness would
    otherwise wait an hour."""
    first = await opened()
    for n in range(3):
        await _record_run(first, f"run-{n}")
    await first.close()
    holder = await psycopg.AsyncConnection.connect(postgres_dsn)
    async with holder, holder.transaction():
        await holder.execute("LOCK TABLE agent_run_events IN EXCLUSIVE MODE")
        with caplog.at_level(logging.WARNING, logger="services.agent.history_postgres"):
            store = await opened(statement_timeout_s=3600.0, max_runs=1)  # ready within 30 s
        failed = [r for r in caplog.records if r.getMessage() == "run history retention failed"]
        assert len(failed) == 1
        assert store.findings == []
    assert len((await store.list_runs(RunQuery(page_size=10)))[0]) == 3  # nothing swept yet
    assert await store.sweep() == 2  # the next sweep does the work


async def test_a_damaged_replicas_table_is_a_finding_and_runs_are_still_recorded(
    opened: Open,
    postgres_dsn: str,
    postgres_server: PostgresServer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The heartbeat's table damaged: the heartbeat cannot be recorded and no replica can tell
    who is alive (marking scans the same table), but the history still becomes ready, records and
    reads runs, and says once what is damaged instead of retrying the start for ever."""
    first = await opened()
    await _record_run(first, "run-before")
    await first.close()
    await _damage_table(postgres_dsn, postgres_server, "agent_replicas")

    with caplog.at_level(logging.INFO, logger="services.agent.history_postgres"):
        store = await opened()  # ready within 30 s, the damage notwithstanding
        assert any(
            f.startswith("recording this replica's heartbeat") and "SQLSTATE XX001" in f
            for f in store.findings
        ), store.findings
        await _record_run(store, "run-after")
        for run_id in ("run-before", "run-after"):
            run = await store.get(run_id)
            assert run is not None
            assert run.status == agent_pb2.RUN_STATUS_COMPLETED
        assert store.failed_writes == 0
        await asyncio.sleep(3 * store.settings.replica.heartbeat_interval_s)  # heartbeats go on
    messages = [r.getMessage() for r in caplog.records]
    assert "run history database not ready" not in messages
    assert "run history heartbeat failed" not in messages, "a known damage re-logged each beat"
    assert sum(m.startswith("run history is damaged") for m in messages) == 1
