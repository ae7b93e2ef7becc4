"""Run history in PostgreSQL: the second `RunHistory` (run_history.py), shared by every replica.

The same records as the SQLite store (`history.py`): one row per run with its request and final
response (protobuf bytes), its steps and its events, written when the run starts, once per
finished step, and when it ends. Any replica answers `GetRun` / `ListRuns` for every run.

    replica A ──begin/append/finish──▶ writer tasks ──pool──▶ agent_runs, agent_run_steps,
                                                               agent_run_events
    replica A ──heartbeat every heartbeat_interval_s──▶ agent_replicas (name, heartbeat_at)
    any replica: a replica whose heartbeat is older than lease_s is gone → its `running` runs
                 become `interrupted` (and its open questions are forgotten)

* **Replicas.** Each run row names the replica that runs it (`replica.name`, default host name
  and pid: the pod). A replica refreshes its heartbeat row every `heartbeat_interval_s`; at the
  same time it marks `interrupted` the running runs of every replica whose heartbeat is older
  than `lease_s` (the database's clock decides, so replicas' clocks need not agree). When it
  starts it marks its own leftover running runs (a restarted container keeps its name).
* **Schema** versions through `services.common.postgres.migrate` (component `agent`), under the
  advisory lock, so replicas starting together apply each migration once.
* **The database down.** Writes are queued on `WRITERS` writer tasks, each run's writes always
  on the same one (by its id), so one run's writes keep their order while runs write in
  parallel; they are best-effort: a write that fails is counted (`failed_writes`) and logged, never
  retried and never a reason to fail a run; while the database is known down (`DatabaseHealth`)
  writes are dropped at once (counted) instead of waiting for a connection, and readiness is
  logged as degraded; when it answers again recording resumes, and a run's end is written in
  full (an upsert of the whole row), so a run that began during the outage is still recorded
  with its response. Reads raise `Unavailable` (retryable) while it is down.
* **Storage faults**, told by SQLSTATE (`services.common.storage_faults`): a write refused by a
  full disk (53100) is dropped and counted like any failed write, its log line naming the cause;
  a read hitting a damaged table or index (XX001 / XX002) answers DATA_LOSS naming the run
  (`GetRun`) or the history (`ListRuns`), one on a full disk (a sort spilling to it)
  RESOURCE_EXHAUSTED `STORAGE_FULL`; either names the SQLSTATE. Damage met by the history's own
  work (marking this replica's leftover runs at start, retention, the heartbeat's marking of
  stopped replicas' runs) never keeps it from becoming ready: it is counted (`damage_errors`),
  what start-up found is kept in `findings` and logged once ("run history is damaged", naming
  the step and the server's message, as the SQLite history's `quick_check` report), a later
  damage is logged once per cause; runs go on, rows on sound pages are written and read.
* **Retention** by age and count, at most every `sweep_interval_s` per replica and by one replica
  at a time (a transaction-level advisory lock; the others skip).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from psycopg import AsyncConnection
from psycopg.rows import TupleRow
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
from services.common.errors import DataLoss, QuarryError, ResourceExhausted
from services.common.postgres import (
    DatabaseHealth,
    Migration,
    Pool,
    migrate,
    open_pool,
    transaction,
)
from services.common.storage_faults import database_cause, database_damaged, database_full
from services.common.tasks import stop_tasks

log = logging.getLogger(__name__)

COMPONENT = "agent"
"""The agent's name in the migrations table (the search tool's tables are its own)."""
WRITERS = 4
"""Writer tasks (and so pooled connections) writing at once; a run's writes all go to one."""
START_SWEEP_S = 5.0
"""Each statement of the retention applied at start (before readiness) ends within this; a
backlog it cannot clear in time is cleared by the next sweep (`sweep_interval_s`)."""
RETENTION_LOCK_KEY = 0x51_41_52_52_59_52_45_54  # "QARRYRET"
"""Transaction advisory lock: one replica at a time applies retention."""
DEAD_REPLICA_MESSAGE = (
    "the agent replica running it stopped (no heartbeat within the lease) during the run"
)

MIGRATIONS = (
    Migration(
        1,
        "run history, replicas and questions",
        (
            """CREATE TABLE agent_runs (
                run_id text PRIMARY KEY,
                collection text NOT NULL,
                query text NOT NULL,
                status integer NOT NULL,
                started_at double precision NOT NULL,
                ended_at double precision,
                caller text NOT NULL DEFAULT '',
                route text NOT NULL DEFAULT '',
                stop_reason integer NOT NULL DEFAULT 0,
                steps integer NOT NULL DEFAULT 0,
                input_tokens bigint NOT NULL DEFAULT 0,
                output_tokens bigint NOT NULL DEFAULT 0,
                error_code text NOT NULL DEFAULT '',
                error_message text NOT NULL DEFAULT '',
                loop_settings text NOT NULL DEFAULT '',
                context_window_tokens integer NOT NULL DEFAULT 0,
                replica text NOT NULL,
                request bytea NOT NULL,
                response bytea
            )""",
            "CREATE INDEX agent_runs_by_time ON agent_runs (started_at DESC, run_id DESC)",
            "CREATE INDEX agent_runs_by_collection ON agent_runs (collection, started_at DESC)",
            "CREATE INDEX agent_runs_running ON agent_runs (replica) WHERE status = 1",
            """CREATE TABLE agent_run_steps (
                run_id text NOT NULL, step integer NOT NULL, record bytea NOT NULL,
                PRIMARY KEY (run_id, step))""",
            """CREATE TABLE agent_run_events (
                run_id text NOT NULL, seq integer NOT NULL, event bytea NOT NULL,
                PRIMARY KEY (run_id, seq))""",
            """CREATE TABLE agent_replicas (
                replica text PRIMARY KEY,
                started_at timestamptz NOT NULL DEFAULT now(),
                heartbeat_at timestamptz NOT NULL DEFAULT now())""",
            """CREATE TABLE agent_question_runs (
                run_id text PRIMARY KEY,
                replica text NOT NULL,
                owner text,
                answer_window_s double precision,
                deadline_at double precision)""",
            """CREATE TABLE agent_questions (
                run_id text NOT NULL,
                question_id text NOT NULL,
                text text NOT NULL,
                acknowledged boolean NOT NULL DEFAULT false,
                outcome text,
                answer text NOT NULL DEFAULT '',
                asked_at timestamptz NOT NULL DEFAULT now(),
                PRIMARY KEY (run_id, question_id))""",
        ),
    ),
)
"""The agent's tables; a later change is a new `Migration`, never an edit of one applied."""

assert RUNNING == 1, "the partial index agent_runs_running names RUNNING as 1"


@dataclass
class _Write:
    """One queued write: the coroutine function and its arguments, and who waits for it."""

    name: str
    args: tuple[Any, ...]
    done: asyncio.Future[None] | None = None


class PostgresRunHistory:
    """See the module docstring. `open` inside the running event loop; `close` when done."""

    def __init__(self, settings: HistorySettings, *, pool: Pool | None = None) -> None:
        self.settings = settings
        self.replica = settings.replica.resolved_name()
        self._given_pool = pool
        self._pool: Pool | None = pool
        self._queues: list[asyncio.Queue[_Write | None]] = [asyncio.Queue() for _ in range(WRITERS)]
        self._writers: list[asyncio.Task[None]] = []
        self._tasks: list[asyncio.Task[None]] = []
        self._prepared = asyncio.Event()
        self._closing = False
        self._health: DatabaseHealth | None = None
        self._last_sweep = 0.0
        self._enqueued = [0] * WRITERS
        self._handled = [0] * WRITERS
        self._handled_changed = asyncio.Condition()
        self._database_down = False
        self.failed_writes = 0
        """Writes that did not reach the database (failed, or dropped while it was down)."""
        self.damage_errors = 0
        """Damaged pages (SQLSTATE XX001 / XX002) met: by start-up, maintenance, reads, writes."""
        self.findings: list[str] = []
        """The damage start-up met (step: the server's message); empty when it met none."""
        self._damage_logged: set[str] = set()
        self.interrupted_runs = 0
        """Runs this replica marked `interrupted` (its own leftovers, and dead replicas')."""
        self.on_replicas_gone: list[Any] = []
        """Callbacks `async f(replicas: list[str])` told which replicas were found gone."""

    # --- lifecycle ---------------------------------------------------------------------------

    @property
    def pool(self) -> Pool:
        if self._pool is None:
            raise RuntimeError("the run history is not open")
        return self._pool

    @property
    def database_up(self) -> bool:
        return self._health is not None and self._health.up

    def open(self) -> int:
        """Start the pool (it does not wait for the database), the writer and the heartbeat;
        the schema, this replica's leftover runs and retention are handled as soon as the
        database answers. Returns 0: what is marked is logged when it is (asynchronously)."""
        loop = asyncio.get_running_loop()
        self._tasks.append(loop.create_task(self._maintain(), name="run history heartbeat"))
        for shard in range(WRITERS):
            self._writers.append(
                loop.create_task(self._write_loop(shard), name=f"run history writer {shard}")
            )
        return 0

    async def wait_ready(self, timeout_s: float) -> bool:
        """Whether the schema is in place within `timeout_s` (tests, benches, start-up)."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):
                await self._prepared.wait()
        return self._prepared.is_set()

    async def close(self) -> None:
        """Finish the queued writes (while the database answers), stop the heartbeat, close."""
        self._closing = True
        for queue in self._queues:
            await queue.put(None)
        if self._writers:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.settings.postgres.statement_timeout_s):
                    await asyncio.shield(asyncio.gather(*self._writers, return_exceptions=True))
        await stop_tasks(
            [*self._tasks, *self._writers],
            timeout_s=self.settings.postgres.statement_timeout_s,
            owner="run history",
        )
        self._tasks.clear()
        self._writers.clear()
        if self._health is not None:
            await self._health.close()
        if self._pool is not None and self._given_pool is None:
            await self._pool.close()
        self._pool = None

    async def _ensure_pool(self) -> Pool:
        if self._pool is None:
            self._pool = await open_pool(self.settings.postgres, name="agent-history")
        if self._health is None:
            self._health = DatabaseHealth(
                self._pool,
                self._health_changed,
                interval_s=self.settings.replica.heartbeat_interval_s,
            )
            self._health.start()
        return self._pool

    async def _health_changed(self, up: bool) -> None:
        self._database_down = not up
        if up:
            log.info("run history database reachable: recording runs", extra=self._counts())
        else:
            log.warning(
                "readiness degraded: the run history database is unreachable; runs go on, "
                "their records are dropped and counted until it answers",
                extra=self._counts(),
            )

    def _counts(self) -> dict[str, Any]:
        return {
            "replica": self.replica,
            "failed_writes": self.failed_writes,
            "damage_errors": self.damage_errors,
        }

    async def _maintain(self) -> None:
        """Prepare the schema once the database answers, then heartbeat for ever."""
        pool = await self._ensure_pool()
        interval = self.settings.replica.heartbeat_interval_s
        while not self._prepared.is_set() and not self._closing:
            try:
                async with pool.connection() as conn:
                    await migrate(conn, COMPONENT, MIGRATIONS)
                await self._heartbeat_checked()
                await self._start_marking()
            except Exception as error:  # the database is not there yet: try again
                log.warning("run history database not ready", extra={"error": str(error)[:300]})
                await asyncio.sleep(interval)
                continue
            # retention due at start runs before the replica is ready, so it never races the
            # first runs this replica records (the loop below sweeps once per interval after);
            # it is bounded and cannot fail the start
            await self._sweep_logged(START_SWEEP_S, "applying retention at start")
            if self.findings:
                log.error(
                    "run history is damaged: runs whose records are hit answer DATA_LOSS, the "
                    "others keep working and new runs are recorded on sound pages; restore the "
                    "database from a backup (or drop the damaged rows) to repair it",
                    extra={"findings": list(self.findings), **self._counts()},
                )
            self._prepared.set()
        while not self._closing:  # the flag, not only the cancellation (services/common/tasks.py)
            try:
                await self._heartbeat_checked()
                try:
                    await self.mark_interrupted()
                except Exception as error:
                    if not database_damaged(error):
                        raise
                    self._damage_met("marking stopped replicas' runs interrupted", error)
                if time.monotonic() - self._last_sweep >= self.settings.sweep_interval_s:
                    await self._sweep_logged(None, "applying retention")
            except Exception as error:
                if self._health is not None:
                    self._health.failed(error)
                log.warning("run history heartbeat failed", extra={"error": str(error)[:300]})
            await asyncio.sleep(interval)

    async def _start_marking(self) -> None:
        """Mark this replica's leftover running runs; a damaged page is a finding, not a reason
        to stay unready (those runs stay `running` until the damage is repaired)."""
        try:
            own = await self._mark_own_running()
        except Exception as error:
            if not database_damaged(error):
                raise
            self._damage_met("marking this replica's leftover running runs interrupted", error)
            return
        if own:
            log.warning(
                "runs interrupted by this replica's previous process",
                extra={"runs": own, "replica": self.replica},
            )

    async def _sweep_logged(self, timeout_s: float | None, step: str) -> None:
        try:
            await self.sweep(timeout_s=timeout_s)
        except Exception as error:  # retention can wait for the next interval
            if database_damaged(error):
                self._damage_met(step, error)
            else:
                log.warning("run history retention failed", extra={"error": str(error)[:300]})

    def _damage_met(self, step: str, error: BaseException) -> None:
        """Count a damaged page the history's own work met; before it is ready it is a finding
        (logged once with the others), after it is logged once per cause."""
        self.damage_errors += 1
        cause = database_cause(error)
        if not self._prepared.is_set():
            self.findings.append(f"{step}: {cause}")
            self._damage_logged.add(cause)
            return
        if cause in self._damage_logged:
            return
        self._damage_logged.add(cause)
        log.error(
            "run history is damaged",
            extra={"step": step, "error": cause, **self._counts()},
        )

    async def _heartbeat_checked(self) -> None:
        """Record the heartbeat; a damaged replicas table is a finding, not a reason to stay
        unready or to stop recording runs. Meanwhile no replica can tell who is alive (marking a
        stopped replica's runs scans the same table and fails as damaged too), so this replica's
        runs are not marked `interrupted` by mistake; the error log says to repair it."""
        try:
            await self._heartbeat()
        except Exception as error:
            if not database_damaged(error):
                raise
            self._damage_met("recording this replica's heartbeat", error)

    async def _heartbeat(self) -> None:
        async with transaction(self.pool, self.settings.postgres) as conn:
            await conn.execute(
                "INSERT INTO agent_replicas (replica) VALUES (%s) ON CONFLICT (replica)"
                " DO UPDATE SET heartbeat_at = now()",
                (self.replica,),
            )

    async def _mark_own_running(self) -> int:
        async with transaction(self.pool, self.settings.postgres) as conn:
            cursor = await conn.execute(
                "UPDATE agent_runs SET status = %s, ended_at = %s, error_message = %s"
                " WHERE status = %s AND replica = %s",
                (INTERRUPTED, time.time(), INTERRUPTED_MESSAGE, RUNNING, self.replica),
            )
            await conn.execute(
                "DELETE FROM agent_question_runs WHERE replica = %s", (self.replica,)
            )
            marked = cursor.rowcount
        self.interrupted_runs += marked
        return marked

    async def mark_interrupted(self) -> int:
        """Mark `interrupted` the running runs of every replica whose heartbeat is older than
        the lease (or that never sent one), forget those replicas' live question runs, and drop
        their heartbeat rows; returns how many runs were marked."""
        lease = self.settings.replica.lease_s
        async with transaction(self.pool, self.settings.postgres) as conn:
            cursor = await conn.execute(
                "DELETE FROM agent_replicas WHERE heartbeat_at < now() - make_interval(secs => %s)"
                " AND replica <> %s RETURNING replica",
                (lease, self.replica),
            )
            gone = [str(row[0]) for row in await cursor.fetchall()]
            live = "SELECT replica FROM agent_replicas"
            cursor = await conn.execute(
                "UPDATE agent_runs SET status = %s, ended_at = %s, error_message = %s"
                f" WHERE status = %s AND replica <> %s AND replica NOT IN ({live})"
                " RETURNING replica",
                (INTERRUPTED, time.time(), DEAD_REPLICA_MESSAGE, RUNNING, self.replica),
            )
            gone += [str(row[0]) for row in await cursor.fetchall()]
            marked = cursor.rowcount
            await conn.execute(
                "DELETE FROM agent_questions q USING agent_question_runs r WHERE"
                f" q.run_id = r.run_id AND r.replica <> %s AND r.replica NOT IN ({live})",
                (self.replica,),
            )
            await conn.execute(
                f"DELETE FROM agent_question_runs WHERE replica <> %s AND replica NOT IN ({live})",
                (self.replica,),
            )
        if marked:
            self.interrupted_runs += marked
            log.warning(
                "runs of stopped replicas marked interrupted",
                extra={"runs": marked, "replicas": sorted(set(gone)), "replica": self.replica},
            )
        return int(marked)

    # --- writes (queued on the writer task) ----------------------------------------------------

    def begin(self, run: agent_pb2.RunRecord) -> None:
        self._enqueue(_Write("begin", (copy_record(run),)))

    def append(
        self,
        run_id: str,
        first_seq: int,
        events: Sequence[agent_pb2.StreamRunResponse],
        steps: Sequence[agent_pb2.StepRecord],
    ) -> None:
        self._enqueue(_Write("append", (run_id, first_seq, list(events), list(steps))))

    async def finish(
        self,
        run: agent_pb2.RunRecord,
        first_seq: int,
        events: Sequence[agent_pb2.StreamRunResponse],
        steps: Sequence[agent_pb2.StepRecord],
    ) -> None:
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self._enqueue(
            _Write("finish", (copy_record(run), first_seq, list(events), list(steps)), done)
        ):
            await done

    def finish_soon(
        self,
        run: agent_pb2.RunRecord,
        first_seq: int,
        events: Sequence[agent_pb2.StreamRunResponse],
        steps: Sequence[agent_pb2.StepRecord],
    ) -> None:
        self._enqueue(_Write("finish", (copy_record(run), first_seq, list(events), list(steps))))

    async def forget(self, run_id: str) -> None:
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self._enqueue(_Write("forget", (run_id,), done)):
            await done

    async def _forget(self, conn: AsyncConnection[TupleRow], run_id: str) -> None:
        for table in ("agent_run_events", "agent_run_steps", "agent_runs"):
            await conn.execute(f"DELETE FROM {table} WHERE run_id = %s", (run_id,))

    def _enqueue(self, write: _Write) -> bool:
        if sum(q.qsize() for q in self._queues) >= self.settings.queue_limit:
            self._dropped(write, "the write queue is full")
            return False
        first = write.args[0]  # a run id, or the run's record
        shard = hash(first if isinstance(first, str) else first.run_id) % WRITERS
        self._queues[shard].put_nowait(write)
        self._enqueued[shard] += 1
        return True

    async def _caught_up(self) -> None:
        """Wait (briefly) until this replica's writes queued so far are handled, so a read here
        sees them: a run is found by `GetRun` from its own replica as soon as it started."""
        target = list(self._enqueued)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.settings.postgres.pool_timeout_s):
                async with self._handled_changed:
                    await self._handled_changed.wait_for(
                        lambda: all(h >= n for h, n in zip(self._handled, target, strict=True))
                    )

    def _dropped(self, write: _Write, why: str, error: BaseException | None = None) -> None:
        self.failed_writes += 1
        log.error(
            "run history write dropped",
            extra={"write": write.name, "why": why, **self._counts()},
            exc_info=error,
        )
        if write.done is not None and not write.done.done():
            write.done.set_result(None)

    async def _write_loop(self, shard: int) -> None:
        while (write := await self._queues[shard].get()) is not None:
            await self._handle(write)
            self._handled[shard] += 1
            async with self._handled_changed:
                self._handled_changed.notify_all()

    async def _handle(self, write: _Write) -> None:
        if not self._prepared.is_set():  # starting: the schema may be a moment away
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.settings.postgres.pool_timeout_s):
                    await self._prepared.wait()
        if self._database_down or not self._prepared.is_set():
            self._dropped(write, "the database is unreachable")
            return
        try:
            async with transaction(self.pool, self.settings.postgres) as conn:
                await getattr(self, "_" + write.name)(conn, *write.args)
        except Exception as error:
            if self._health is not None:
                self._health.failed(error)
            why = str(error)[:300]
            if database_damaged(error):
                self.damage_errors += 1
            if database_full(error) or database_damaged(error):
                why = f"storage fault: {database_cause(error)}"
            self._dropped(write, why, None if isinstance(error, QuarryError) else error)
            return
        if write.done is not None and not write.done.done():
            write.done.set_result(None)

    async def _begin(self, conn: AsyncConnection[TupleRow], run: agent_pb2.RunRecord) -> None:
        await conn.execute(
            "INSERT INTO agent_runs (run_id, collection, query, status, started_at, caller, route,"
            " loop_settings, replica, request) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
            " ON CONFLICT (run_id) DO NOTHING",
            (
                run.run_id,
                run.collection,
                run.request.query,
                run.status,
                stamp_seconds(run.started_at),
                run.caller,
                run.route,
                run.loop_settings_json,
                self.replica,
                run.request.SerializeToString(),
            ),
        )

    async def _append(
        self,
        conn: AsyncConnection[TupleRow],
        run_id: str,
        first_seq: int,
        events: list[agent_pb2.StreamRunResponse],
        steps: list[agent_pb2.StepRecord],
    ) -> None:
        async with conn.cursor() as cursor:
            if events:
                await cursor.executemany(
                    "INSERT INTO agent_run_events (run_id, seq, event) VALUES (%s, %s, %s)"
                    " ON CONFLICT (run_id, seq) DO UPDATE SET event = EXCLUDED.event",
                    [(run_id, first_seq + n, e.SerializeToString()) for n, e in enumerate(events)],
                )
            if steps:
                await cursor.executemany(
                    "INSERT INTO agent_run_steps (run_id, step, record) VALUES (%s, %s, %s)"
                    " ON CONFLICT (run_id, step) DO UPDATE SET record = EXCLUDED.record",
                    [(run_id, s.index, s.SerializeToString()) for s in steps],
                )

    async def _finish(
        self,
        conn: AsyncConnection[TupleRow],
        run: agent_pb2.RunRecord,
        first_seq: int,
        events: list[agent_pb2.StreamRunResponse],
        steps: list[agent_pb2.StepRecord],
    ) -> None:
        await self._append(conn, run.run_id, first_seq, events, steps)
        cursor = await conn.execute(
            "SELECT count(*) FROM agent_run_steps WHERE run_id = %s", (run.run_id,)
        )
        row = await cursor.fetchone()
        step_count = int(row[0]) if row else 0
        response = run.response if run.HasField("response") else None
        await conn.execute(
            "INSERT INTO agent_runs (run_id, collection, query, status, started_at, ended_at,"
            " caller, route, stop_reason, steps, input_tokens, output_tokens, error_code,"
            " error_message, loop_settings, context_window_tokens, replica, request, response)"
            " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
            " ON CONFLICT (run_id) DO UPDATE SET status = EXCLUDED.status,"
            " ended_at = EXCLUDED.ended_at, stop_reason = EXCLUDED.stop_reason,"
            " steps = EXCLUDED.steps, input_tokens = EXCLUDED.input_tokens,"
            " output_tokens = EXCLUDED.output_tokens, error_code = EXCLUDED.error_code,"
            " error_message = EXCLUDED.error_message,"
            " context_window_tokens = EXCLUDED.context_window_tokens,"
            " response = EXCLUDED.response",
            (
                run.run_id,
                run.collection,
                run.request.query,
                run.status,
                stamp_seconds(run.started_at),
                stamp_seconds(run.ended_at),
                run.caller,
                run.route,
                response.stop_reason if response else 0,
                step_count,
                response.usage.input_tokens if response else 0,
                response.usage.output_tokens if response else 0,
                run.error_code,
                run.error_message,
                run.loop_settings_json,
                run.context_window_tokens,
                self.replica,
                run.request.SerializeToString(),
                response_without_steps(response),
            ),
        )

    async def sweep(self, *, timeout_s: float | None = None) -> int:
        """Retention now (by one replica at a time; the others return 0); each statement is
        bounded by `timeout_s` (else the configured statement timeout)."""
        self._last_sweep = time.monotonic()
        age_s = self.settings.max_age_days * 86_400
        async with transaction(self.pool, self.settings.postgres, timeout_s=timeout_s) as conn:
            cursor = await conn.execute(
                "SELECT pg_try_advisory_xact_lock(%s)", (RETENTION_LOCK_KEY,)
            )
            row = await cursor.fetchone()
            if not row or not row[0]:
                return 0
            doomed: list[str] = []
            if self.settings.max_age_days:
                cursor = await conn.execute(
                    "SELECT run_id FROM agent_runs WHERE started_at < %s AND status <> %s",
                    (time.time() - age_s, RUNNING),
                )
                doomed += [str(r[0]) for r in await cursor.fetchall()]
            if self.settings.max_runs:
                cursor = await conn.execute(
                    "SELECT run_id FROM agent_runs ORDER BY started_at DESC, run_id DESC OFFSET %s",
                    (self.settings.max_runs,),
                )
                doomed += [str(r[0]) for r in await cursor.fetchall()]
            ids = list(dict.fromkeys(doomed))
            if ids:
                for table in ("agent_run_events", "agent_run_steps", "agent_runs"):
                    await conn.execute(f"DELETE FROM {table} WHERE run_id = ANY(%s)", (ids,))
        if ids:
            log.info("run history retention", extra={"deleted_runs": len(ids)})
        return len(ids)

    # --- reads -----------------------------------------------------------------------------------

    @contextlib.contextmanager
    def _storage_faults(self, damaged: str, metadata: dict[str, str]) -> Iterator[None]:
        """A read's storage faults as statuses (see the module docstring); `damaged` says what
        a damaged page takes away."""
        try:
            yield
        except QuarryError:
            raise
        except Exception as error:
            if database_damaged(error):
                self.damage_errors += 1
                log.error("run history is damaged", extra={**metadata, "error": str(error)})
                raise DataLoss(
                    f"{damaged} is damaged in the PostgreSQL run history ({database_cause(error)})",
                    metadata={**metadata, "sqlstate": str(getattr(error, "sqlstate", ""))},
                ) from error
            if database_full(error):
                log.error("run history disk full", extra={**metadata, "error": str(error)})
                raise ResourceExhausted(
                    f"the PostgreSQL run history's disk is full ({database_cause(error)})",
                    reason="STORAGE_FULL",
                    metadata={**metadata, "sqlstate": str(getattr(error, "sqlstate", ""))},
                    retry_after_s=60.0,
                ) from error
            raise

    async def get(self, run_id: str) -> agent_pb2.RunRecord | None:
        await self._caught_up()
        with self._storage_faults(f"the record of run {run_id}", {"run_id": run_id}):
            return await self._get(run_id)

    async def _get(self, run_id: str) -> agent_pb2.RunRecord | None:
        async with transaction(self.pool, self.settings.postgres) as conn:
            cursor = await conn.execute(
                "SELECT run_id, collection, status, started_at, ended_at, caller, route,"
                " error_code, error_message, loop_settings, context_window_tokens, request,"
                " response FROM agent_runs WHERE run_id = %s",
                (run_id,),
            )
            row = await cursor.fetchone()
            if row is None:
                return None
            cursor = await conn.execute(
                "SELECT record FROM agent_run_steps WHERE run_id = %s ORDER BY step", (run_id,)
            )
            steps = [agent_pb2.StepRecord.FromString(r[0]) for r in await cursor.fetchall()]
            cursor = await conn.execute(
                "SELECT event FROM agent_run_events WHERE run_id = %s ORDER BY seq", (run_id,)
            )
            events = [agent_pb2.StreamRunResponse.FromString(r[0]) for r in await cursor.fetchall()]
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
        record.steps.extend(steps)
        record.events.extend(events)
        if row[12] is not None:
            record.response.ParseFromString(row[12])
            record.response.steps.extend(steps)
        return record

    async def list_runs(self, query: RunQuery) -> tuple[list[agent_pb2.RunSummary], str]:
        await self._caught_up()
        where: list[str] = []
        values: list[Any] = []
        if query.collections is not None:
            if not query.collections:
                return [], ""
            where.append("collection = ANY(%s)")
            values.append(list(query.collections))
        if query.started_after is not None:
            where.append("started_at >= %s")
            values.append(query.started_after)
        if query.started_before is not None:
            where.append("started_at < %s")
            values.append(query.started_before)
        if query.status:
            where.append("status = %s")
            values.append(query.status)
        if query.page_token:
            started_at, run_id = decode_page_token(query.page_token)
            where.append("(started_at, run_id) < (%s, %s)")
            values += [started_at, run_id]
        sql = (
            "SELECT run_id, collection, query, status, started_at, ended_at, stop_reason, steps,"
            " input_tokens, output_tokens, error_code, caller FROM agent_runs"
            + (" WHERE " + " AND ".join(where) if where else "")
            + " ORDER BY started_at DESC, run_id DESC LIMIT %s"
        )
        history = "the run history's list of runs"
        with self._storage_faults(history, {"store": "run_history"}):
            async with transaction(self.pool, self.settings.postgres) as conn:
                cursor = await conn.execute(sql.encode(), [*values, query.page_size + 1])
                rows = await cursor.fetchall()
        page = rows[: query.page_size]
        more = len(rows) > query.page_size
        token = encode_page_token(page[-1][4], page[-1][0]) if more and page else ""
        return [run_summary(r) for r in page], token

    async def collections(self) -> list[str]:
        await self._caught_up()
        with self._storage_faults("the run history's list of runs", {"store": "run_history"}):
            async with transaction(self.pool, self.settings.postgres) as conn:
                cursor = await conn.execute("SELECT DISTINCT collection FROM agent_runs")
                return [str(r[0]) for r in await cursor.fetchall()]
