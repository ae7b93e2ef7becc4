"""Run history: every run the agent serves, persisted in an embedded SQLite database.

A run is written when it starts (status `running`, its request), once per finished step (the
step record and the events streamed since the last write), and when it ends (status, final
response with the full step records, error). So a run killed with the process leaves a `running`
row with every finished step; the next process to open the database marks it `interrupted`.

All database work happens on ONE thread owned by the store (sqlite3 from the standard library,
WAL mode): the event loop never blocks on disk, writes keep their order, and one connection is
never shared between threads. Writes a run does not wait for (start, steps) are queued on that
thread; the final write is awaited before the caller is told the run is done, so `GetRun` right
after a run sees it complete. Retention (`max_age_days`, `max_runs`) is enforced on the same
thread when the store opens and then at most every `sweep_interval_s`, after a run ends.

This is the first implementation of `run_history.RunHistory` (its contract: that module).

Faults never fail a run. A write that fails (a full disk, a damaged page) is logged with the run's
id and counted (`failed_writes`, and the `quarry.agent.run_history.failed_writes` counter): the run
still answers, only its record has a gap. `open` runs SQLite's `quick_check` and logs what it
found; a damaged record answers DATA_LOSS naming the run (`GetRun`) or the history (`ListRuns`),
and every other run keeps working.

The rows hold protobuf messages (`quarry.agent.v1`): this module is a persistence edge, as
`convert.py` is the wire edge. Several agent replicas need a shared database instead: see the agent
README ("Run history").
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import sqlite3
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from google.protobuf.message import DecodeError
from opentelemetry import metrics
from quarry.agent.v1 import agent_pb2

from services.agent.config import HistorySettings
from services.agent.run_history import (
    INTERRUPTED,
    INTERRUPTED_MESSAGE,
    RUNNING,
    RunQuery,
    copy_record,
    decode_page_token,
    encode_page_token,
    response_without_steps,
    run_summary,
    stamp_seconds,
)
from services.common.errors import DataLoss, Unavailable

log = logging.getLogger(__name__)
T = TypeVar("T")

__all__ = ["RunQuery", "RunStore", "decode_page_token"]

QUICK_CHECK_FINDINGS = 20
"""Most problems `quick_check` reports at open (it stops there)."""
_DAMAGE_CODES = frozenset({sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB})

_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY,
    collection TEXT NOT NULL,
    query TEXT NOT NULL,
    status INTEGER NOT NULL,
    started_at REAL NOT NULL,
    ended_at REAL,
    caller TEXT NOT NULL DEFAULT '',
    route TEXT NOT NULL DEFAULT '',
    stop_reason INTEGER NOT NULL DEFAULT 0,
    steps INTEGER NOT NULL DEFAULT 0,
    input_tokens INTEGER NOT NULL DEFAULT 0,
    output_tokens INTEGER NOT NULL DEFAULT 0,
    error_code TEXT NOT NULL DEFAULT '',
    error_message TEXT NOT NULL DEFAULT '',
    loop_settings TEXT NOT NULL DEFAULT '',
    context_window_tokens INTEGER NOT NULL DEFAULT 0,
    request BLOB NOT NULL,
    response BLOB
);
CREATE INDEX IF NOT EXISTS runs_by_time ON runs (started_at DESC, run_id DESC);
CREATE INDEX IF NOT EXISTS runs_by_collection ON runs (collection, started_at DESC);
CREATE INDEX IF NOT EXISTS runs_by_status ON runs (status);
CREATE TABLE IF NOT EXISTS run_steps (
    run_id TEXT NOT NULL,
    step INTEGER NOT NULL,
    record BLOB NOT NULL,
    PRIMARY KEY (run_id, step)
);
CREATE TABLE IF NOT EXISTS run_events (
    run_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    event BLOB NOT NULL,
    PRIMARY KEY (run_id, seq)
);
"""


class RunStore:
    """The run history in SQLite, a `RunHistory`; `open` before use, `close` when done (see the
    module docstring)."""

    def __init__(
        self,
        settings: HistorySettings,
        *,
        clock: Callable[[], float] = time.time,
        meter: metrics.Meter | None = None,
    ):
        self.settings = settings
        self.failed_writes = 0
        """Writes that failed since the store opened (each a gap in one run's record)."""
        self.findings: list[str] = []
        """What `quick_check` found at open; empty when the database is sound."""
        self._failed_writes = (meter or metrics.NoOpMeter(__name__)).create_counter(
            "quarry.agent.run_history.failed_writes",
            unit="{write}",
            description="Run history writes that failed; each leaves a gap in one run's record",
        )
        self._clock = clock
        self._thread = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="run-history")
        self._db: sqlite3.Connection | None = None
        self._last_sweep = 0.0
        self._pending: set[concurrent.futures.Future[Any]] = set()

    # --- lifecycle ---------------------------------------------------------------------------

    def open(self) -> int:
        """Create the schema, mark runs left `running` by a previous process `interrupted`, and
        apply retention; returns how many runs were interrupted. Called once while the agent
        starts, before it serves (it waits for the store's thread)."""
        return self._thread.submit(self._open).result()

    async def close(self) -> None:
        """Finish every queued write, then close the database."""
        await self._call(self._close)
        self._thread.shutdown(wait=True)

    def _open(self) -> int:
        path = self.settings.path
        path.parent.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(path, isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        db.executescript(_SCHEMA)
        self._db = db
        self.findings = self._quick_check()
        try:
            interrupted = self._mark_interrupted()
            self._sweep()
        except sqlite3.Error as error:
            log.error(
                "run history: marking interrupted runs and retention failed; serving anyway",
                extra={"path": str(path), "error": str(error)},
            )
            return 0
        return interrupted

    def _mark_interrupted(self) -> int:
        """One process owns the file: every run still `running` belonged to a stopped agent."""
        with self._transaction() as tx:
            interrupted = tx.execute(
                "UPDATE runs SET status = ?, ended_at = ?, error_message = ? WHERE status = ?",
                (INTERRUPTED, self._clock(), INTERRUPTED_MESSAGE, RUNNING),
            ).rowcount
        if interrupted:
            log.warning("runs interrupted by a stopped agent", extra={"runs": interrupted})
        return int(interrupted)

    async def mark_interrupted(self) -> int:
        """Mark the runs left `running` by a stopped agent `interrupted`; returns how many. Only
        while no run of this process is going (the store opens with it)."""
        return await self._call(self._mark_interrupted)

    def _quick_check(self) -> list[str]:
        """SQLite's `quick_check`, logged: the problems it found, [] when it says ok."""
        path = str(self.settings.path)
        try:
            rows = self._connection().execute(f"PRAGMA quick_check({QUICK_CHECK_FINDINGS})")
            findings = [str(r[0]) for r in rows]
        except sqlite3.DatabaseError as error:
            findings = [str(error)]
        if findings == ["ok"]:
            log.info("run history checked: ok", extra={"path": path})
            return []
        log.error(
            "run history is damaged: runs whose records are hit answer DATA_LOSS, the others "
            "keep working; restore the file from a backup or move it aside to start afresh",
            extra={"path": path, "findings": findings},
        )
        return findings

    def _close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None

    # --- writes (queued on the store's thread) -----------------------------------------------

    def begin(self, run: agent_pb2.RunRecord) -> None:
        """A run started (`run.status` running): queued, not awaited."""
        self._queue(self._guarded, self._begin, run.run_id, copy_record(run))

    def append(
        self,
        run_id: str,
        first_seq: int,
        events: Sequence[agent_pb2.StreamRunResponse],
        steps: Sequence[agent_pb2.StepRecord],
    ) -> None:
        """Events (numbered from `first_seq`) and finished steps of a running run: queued."""
        self._queue(
            self._guarded, self._append, run_id, run_id, first_seq, list(events), list(steps)
        )

    async def finish(
        self,
        run: agent_pb2.RunRecord,
        first_seq: int,
        events: Sequence[agent_pb2.StreamRunResponse],
        steps: Sequence[agent_pb2.StepRecord],
    ) -> None:
        """The run's end (status, response, error) with its last events and steps; awaited.
        Never raises for the database: a failed write is logged and counted."""
        await self._call(
            self._guarded, self._finish, run.run_id, run, first_seq, list(events), list(steps)
        )

    def finish_soon(
        self,
        run: agent_pb2.RunRecord,
        first_seq: int,
        events: Sequence[agent_pb2.StreamRunResponse],
        steps: Sequence[agent_pb2.StepRecord],
    ) -> None:
        """`finish` from a task being cancelled, which cannot wait: queued."""
        self._queue(
            self._guarded,
            self._finish,
            run.run_id,
            copy_record(run),
            first_seq,
            list(events),
            list(steps),
        )

    def _guarded(self, write: Callable[..., None], run_id: str, *args: Any) -> None:
        """`write(*args)`; a database failure is logged and counted, never raised: the run
        goes on and its record has a gap."""
        try:
            write(*args)
        except sqlite3.Error as error:
            self.failed_writes += 1
            self._failed_writes.add(1, {"error": type(error).__name__})
            log.error(
                "run history write failed: the run goes on, its record has a gap",
                extra={
                    "run_id": run_id,
                    "path": str(self.settings.path),
                    "error": str(error),
                    "failed_writes": self.failed_writes,
                },
            )

    async def forget(self, run_id: str) -> None:
        """Delete a run that was refused before it started (begun, never stepped); awaited."""
        await self._call(self._guarded, self._delete, run_id, [(run_id,)])

    def _delete(self, ids: list[tuple[str]]) -> None:
        with self._transaction() as tx:
            for table in ("run_events", "run_steps", "runs"):
                tx.executemany(f"DELETE FROM {table} WHERE run_id = ?", ids)

    def _begin(self, run: agent_pb2.RunRecord) -> None:
        with self._transaction() as tx:
            tx.execute(
                "INSERT INTO runs (run_id, collection, query, status, started_at, caller, route,"
                " loop_settings, request) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    run.run_id,
                    run.collection,
                    run.request.query,
                    run.status,
                    stamp_seconds(run.started_at),
                    run.caller,
                    run.route,
                    run.loop_settings_json,
                    run.request.SerializeToString(),
                ),
            )

    def _append(
        self,
        run_id: str,
        first_seq: int,
        events: list[agent_pb2.StreamRunResponse],
        steps: list[agent_pb2.StepRecord],
    ) -> None:
        with self._transaction() as tx:
            self._insert_parts(tx, run_id, first_seq, events, steps)

    def _finish(
        self,
        run: agent_pb2.RunRecord,
        first_seq: int,
        events: list[agent_pb2.StreamRunResponse],
        steps: list[agent_pb2.StepRecord],
    ) -> None:
        response = run.response if run.HasField("response") else None
        with self._transaction() as tx:
            self._insert_parts(tx, run.run_id, first_seq, events, steps)
            step_count = tx.execute(
                "SELECT COUNT(*) FROM run_steps WHERE run_id = ?", (run.run_id,)
            ).fetchone()[0]
            tx.execute(
                "UPDATE runs SET status = ?, ended_at = ?, stop_reason = ?, steps = ?,"
                " input_tokens = ?, output_tokens = ?, error_code = ?, error_message = ?,"
                " context_window_tokens = ?, response = ? WHERE run_id = ?",
                (
                    run.status,
                    stamp_seconds(run.ended_at),
                    response.stop_reason if response else 0,
                    step_count,
                    response.usage.input_tokens if response else 0,
                    response.usage.output_tokens if response else 0,
                    run.error_code,
                    run.error_message,
                    run.context_window_tokens,
                    response_without_steps(response),
                    run.run_id,
                ),
            )
        if self._clock() - self._last_sweep >= self.settings.sweep_interval_s:
            self._sweep()

    def _insert_parts(
        self,
        tx: sqlite3.Connection,
        run_id: str,
        first_seq: int,
        events: list[agent_pb2.StreamRunResponse],
        steps: list[agent_pb2.StepRecord],
    ) -> None:
        tx.executemany(
            "INSERT OR REPLACE INTO run_events (run_id, seq, event) VALUES (?, ?, ?)",
            [(run_id, first_seq + n, e.SerializeToString()) for n, e in enumerate(events)],
        )
        tx.executemany(
            "INSERT OR REPLACE INTO run_steps (run_id, step, record) VALUES (?, ?, ?)",
            [(run_id, s.index, s.SerializeToString()) for s in steps],
        )

    def _sweep(self) -> int:
        """Retention: runs past `max_age_days`, then the oldest past `max_runs`."""
        self._last_sweep = self._clock()
        doomed: list[str] = []
        db = self._connection()
        if self.settings.max_age_days:
            cutoff = self._clock() - self.settings.max_age_days * 86_400
            doomed += [
                r[0]
                for r in db.execute(
                    "SELECT run_id FROM runs WHERE started_at < ? AND status != ?",
                    (cutoff, RUNNING),
                )
            ]
        if self.settings.max_runs:
            doomed += [
                r[0]
                for r in db.execute(
                    "SELECT run_id FROM runs ORDER BY started_at DESC, run_id DESC"
                    " LIMIT -1 OFFSET ?",
                    (self.settings.max_runs,),
                )
            ]
        ids = [(run_id,) for run_id in dict.fromkeys(doomed)]
        if ids:
            self._delete(ids)
            log.info("run history retention", extra={"deleted_runs": len(ids)})
        return len(ids)

    async def sweep(self) -> int:
        """Apply retention now; returns how many runs were deleted."""
        return await self._call(self._sweep)

    # --- reads ---------------------------------------------------------------------------------

    async def get(self, run_id: str) -> agent_pb2.RunRecord | None:
        """The run's record; DATA_LOSS naming the run when its record is damaged."""
        try:
            return await self._call(self._get, run_id)
        except (sqlite3.DatabaseError, DecodeError) as error:
            if isinstance(error, sqlite3.DatabaseError) and not _is_damage(error):
                raise _unavailable(error) from error
            log.error("run record is damaged", extra={"run_id": run_id, "error": str(error)})
            raise DataLoss(
                f"the record of run {run_id} is damaged in the run history ({error}); "
                "other runs are not affected",
                metadata={"run_id": run_id},
            ) from None
        except (sqlite3.Error, OSError, RuntimeError) as error:
            raise _unavailable(error) from error

    async def list_runs(self, query: RunQuery) -> tuple[list[agent_pb2.RunSummary], str]:
        """A page of summaries, newest first, and the next page's token ("" on the last)."""
        return await self._read(self._list, query)

    async def collections(self) -> list[str]:
        """Every collection with a recorded run."""
        return await self._read(self._collections)

    async def _read(self, read: Callable[..., T], *args: Any) -> T:
        """A read of the list: DATA_LOSS when the file is damaged, UNAVAILABLE when the database
        cannot answer (see `RunHistory`)."""
        try:
            return await self._call(read, *args)
        except sqlite3.DatabaseError as error:
            if not _is_damage(error):
                raise _unavailable(error) from error
            log.error("run history index is damaged", extra={"error": str(error)})
            raise DataLoss(
                f"the run history's list of runs is damaged ({error}); GetRun still reads "
                "each undamaged run",
                metadata={"store": "run_history"},
            ) from None
        except (sqlite3.Error, OSError, RuntimeError) as error:
            raise _unavailable(error) from error

    def _get(self, run_id: str) -> agent_pb2.RunRecord | None:
        db = self._connection()
        row = db.execute(
            "SELECT run_id, collection, status, started_at, ended_at, caller, route,"
            " error_code, error_message, loop_settings, context_window_tokens, request, response"
            " FROM runs WHERE run_id = ?",
            (run_id,),
        ).fetchone()
        if row is None:
            return None
        record = agent_pb2.RunRecord(
            run_id=row[0],
            collection=row[1],
            status=row[2],
            caller=row[5],
            route=row[6],
            error_code=row[7],
            error_message=row[8],
            loop_settings_json=row[9],
            context_window_tokens=row[10],
            request=agent_pb2.RunRequest.FromString(row[11]),
        )
        record.started_at.FromNanoseconds(int(row[3] * 1e9))
        if row[4] is not None:
            record.ended_at.FromNanoseconds(int(row[4] * 1e9))
        steps = [
            agent_pb2.StepRecord.FromString(r[0])
            for r in db.execute(
                "SELECT record FROM run_steps WHERE run_id = ? ORDER BY step", (run_id,)
            )
        ]
        record.steps.extend(steps)
        record.events.extend(
            agent_pb2.StreamRunResponse.FromString(r[0])
            for r in db.execute(
                "SELECT event FROM run_events WHERE run_id = ? ORDER BY seq", (run_id,)
            )
        )
        if row[12] is not None:
            record.response.ParseFromString(row[12])
            record.response.steps.extend(steps)
        return record

    def _list(self, query: RunQuery) -> tuple[list[agent_pb2.RunSummary], str]:
        where: list[str] = []
        values: list[Any] = []
        if query.collections is not None:
            if not query.collections:
                return [], ""
            where.append(f"collection IN ({', '.join('?' * len(query.collections))})")
            values += list(query.collections)
        if query.started_after is not None:
            where.append("started_at >= ?")
            values.append(query.started_after)
        if query.started_before is not None:
            where.append("started_at < ?")
            values.append(query.started_before)
        if query.status:
            where.append("status = ?")
            values.append(query.status)
        if query.page_token:
            started_at, run_id = decode_page_token(query.page_token)
            where.append("(started_at < ? OR (started_at = ? AND run_id < ?))")
            values += [started_at, started_at, run_id]
        sql = (
            "SELECT run_id, collection, query, status, started_at, ended_at, stop_reason, steps,"
            " input_tokens, output_tokens, error_code, caller FROM runs"
            + (" WHERE " + " AND ".join(where) if where else "")
            + " ORDER BY started_at DESC, run_id DESC LIMIT ?"
        )
        rows = self._connection().execute(sql, [*values, query.page_size + 1]).fetchall()
        page = rows[: query.page_size]
        summaries = [run_summary(r) for r in page]
        more = len(rows) > query.page_size
        return summaries, encode_page_token(page[-1][4], page[-1][0]) if more and page else ""

    def _collections(self) -> list[str]:
        rows = self._connection().execute("SELECT DISTINCT collection FROM runs").fetchall()
        return [r[0] for r in rows]

    # --- plumbing ------------------------------------------------------------------------------

    def _connection(self) -> sqlite3.Connection:
        if self._db is None:
            raise RuntimeError("the run store is not open")
        return self._db

    def _transaction(self) -> _Transaction:
        return _Transaction(self._connection())

    async def _call(self, function: Callable[..., T], *args: Any) -> T:
        return await asyncio.wrap_future(self._thread.submit(function, *args))

    def _queue(self, function: Callable[..., None], *args: Any) -> None:
        future = self._thread.submit(function, *args)
        self._pending.add(future)
        future.add_done_callback(self._written)

    def _written(self, future: concurrent.futures.Future[Any]) -> None:
        self._pending.discard(future)
        error = future.exception()
        if error is not None:
            log.error("run history write failed", exc_info=error)


class _Transaction:
    """BEGIN IMMEDIATE ... COMMIT (ROLLBACK on error) on an autocommit connection."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    def __enter__(self) -> sqlite3.Connection:
        self._db.execute("BEGIN IMMEDIATE")
        return self._db

    def __exit__(self, kind: object, *rest: object) -> None:
        if kind is None:
            try:
                self._db.execute("COMMIT")
                return
            except sqlite3.Error:
                self._rollback()  # a failed COMMIT (a full disk) leaves the transaction open
                raise
        self._rollback()

    def _rollback(self) -> None:
        if self._db.in_transaction:
            self._db.execute("ROLLBACK")


def _unavailable(error: BaseException) -> Unavailable:
    log.error("run history read failed", extra={"error": str(error)})
    return Unavailable(f"the run history cannot be read: {error}")


def _is_damage(error: sqlite3.Error) -> bool:
    """A damaged file (SQLITE_CORRUPT, SQLITE_NOTADB), not a busy or full one."""
    return (getattr(error, "sqlite_errorcode", 0) & 0xFF) in _DAMAGE_CODES
