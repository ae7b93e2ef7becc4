"""PostgreSQL plumbing every service shares: where the database is, how to reach it, its schema
versions, and what its errors mean to a caller.

    PostgresSettings      the YAML part: pool sizes, TLS (`sslmode`, CA file), timeouts, and WHERE
                          the DSN comes from (an environment variable or a mounted Secret file);
                          the DSN itself never sits in a config file
    resolve_dsn()         the DSN with the TLS and timeout settings folded in
    open_pool()           an `AsyncConnectionPool` that opens without waiting for the database
                          (a service starts, reports NOT_SERVING, and serves once it is reachable)
    transaction()         one pooled transaction whose statements are bounded by a deadline
    snapshot()            a read-only one in pipeline mode: one snapshot, statements sent together
    Migration, migrate()  numbered migrations, each applied once per component under
                          `pg_advisory_lock`, however many replicas start together
    classify()            a driver or pool error as a domain error (`services.common.errors`):
                          unreachable/down -> Unavailable, pool exhausted -> ResourceExhausted,
                          statement timeout -> DeadlineExceeded, bad data -> InvalidArgument
    DatabaseHealth        watches reachability and tells the server when to flip readiness

Both the search tool (`engine.kind: postgres`) and the agent's run history use this module; it knows
nothing of either's tables.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import hashlib
import logging
import math
import os
import time
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, NoReturn

import psycopg
import psycopg.errors
from psycopg import AsyncConnection, AsyncCursor, sql
from psycopg.abc import Params
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.pq import TransactionStatus
from psycopg.rows import TupleRow
from psycopg_pool import AsyncConnectionPool, PoolClosed, PoolTimeout, TooManyRequests
from pydantic import BaseModel, ConfigDict, Field

from services.common.admission import overloaded
from services.common.errors import (
    DeadlineExceeded,
    FailedPrecondition,
    InvalidArgument,
    QuarryError,
    Unavailable,
)
from services.common.tasks import stop_tasks

log = logging.getLogger(__name__)

DEFAULT_DSN_ENV = "QUARRY_POSTGRES_DSN"
"""The environment variable the DSN is read from unless `dsn_env` names another."""
DATABASE_UNAVAILABLE = "DATABASE_UNAVAILABLE"
"""ErrorInfo reason of a call that failed because the database is down or unreachable."""
MIGRATIONS_TABLE = "quarry_schema_migrations"
"""Where `migrate` records the versions applied, per component."""

SslMode = Literal["disable", "allow", "prefer", "require", "verify-ca", "verify-full"]
Pool = AsyncConnectionPool[AsyncConnection[TupleRow]]


class PostgresSettings(BaseModel):
    """How a service reaches its PostgreSQL. The DSN (with its password) comes from the
    environment variable `dsn_env` or, when `dsn_file` is set, from that file (a mounted Kubernetes
    Secret); both may hold a URI (`postgresql://user@host:5432/db`) or `key=value` pairs."""

    model_config = ConfigDict(extra="forbid")

    dsn_env: str = DEFAULT_DSN_ENV
    """Environment variable holding the DSN."""
    dsn_file: Path | None = None
    """File holding the DSN (a mounted Secret); wins over `dsn_env` when set."""
    sslmode: SslMode | None = None
    """libpq `sslmode`; None keeps the DSN's own (libpq's default is `prefer`). Use `verify-full`
    with `ca_file` against a database across a network you do not own."""
    ca_file: Path | None = None
    """PEM CA bundle the server certificate must chain to (libpq `sslrootcert`)."""
    pool_min_size: int = Field(default=1, ge=0)
    """Connections kept open while idle."""
    pool_max_size: int = Field(default=10, ge=1)
    """Most connections open at once; a caller beyond them waits `pool_timeout_s`."""
    pool_timeout_s: float = Field(default=2.0, gt=0)
    """How long a caller waits for a free connection before RESOURCE_EXHAUSTED (all in use) or
    UNAVAILABLE (the database cannot be reached)."""
    connect_timeout_s: int = Field(default=5, ge=1)
    """libpq `connect_timeout`: how long one connection attempt may take."""
    statement_timeout_s: float = Field(default=30.0, gt=0)
    """Longest one statement may run when the request has no shorter deadline."""
    retry_after_s: float = Field(default=1.0, gt=0)
    """The RetryInfo delay of a call refused because the database is down or the pool full."""
    application_name: str = "quarry"
    """Shown in `pg_stat_activity`."""


def resolve_dsn(settings: PostgresSettings, environ: Mapping[str, str] | None = None) -> str:
    """The DSN from the Secret file or the environment, with `sslmode`, `sslrootcert`,
    `connect_timeout` and `application_name` from the settings (the DSN's own values win for the
    last two). Raises `FailedPrecondition` naming where it looked when there is none."""
    env = os.environ if environ is None else environ
    if settings.dsn_file is not None:
        try:
            dsn = settings.dsn_file.read_text(encoding="utf-8").strip()
        except OSError as error:
            raise FailedPrecondition(
                f"cannot read the PostgreSQL DSN file {settings.dsn_file}: {error.strerror}",
                reason="DATABASE_DSN_MISSING",
            ) from None
        where = f"file {settings.dsn_file}"
    else:
        dsn = env.get(settings.dsn_env, "").strip()
        where = f"environment variable {settings.dsn_env}"
    if not dsn:
        raise FailedPrecondition(
            f"no PostgreSQL DSN: set the {where}", reason="DATABASE_DSN_MISSING"
        )
    try:
        given = conninfo_to_dict(dsn)
    except psycopg.ProgrammingError as error:
        raise FailedPrecondition(
            f"the PostgreSQL DSN in the {where} is malformed: {_first_line(error)}",
            reason="DATABASE_DSN_INVALID",
        ) from None
    extra: dict[str, Any] = {}
    if settings.sslmode is not None:
        extra["sslmode"] = settings.sslmode
    if settings.ca_file is not None:
        extra["sslrootcert"] = str(settings.ca_file)
    if "connect_timeout" not in given:
        extra["connect_timeout"] = settings.connect_timeout_s
    if "application_name" not in given:
        extra["application_name"] = settings.application_name
    return make_conninfo(dsn, **extra)


def redacted(dsn: str) -> str:
    """The DSN without its password, for logs and error messages."""
    try:
        params = conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return "<malformed DSN>"
    params.pop("password", None)
    return make_conninfo("", **params)


async def open_pool(
    settings: PostgresSettings,
    *,
    dsn: str | None = None,
    name: str = "quarry",
    configure: Callable[[AsyncConnection[TupleRow]], Awaitable[None]] | None = None,
) -> Pool:
    """An open pool that does not wait for the database: connections are made in the background
    and on demand, and a connection that died with a restarted server is replaced when it is next
    taken (each is checked first, unless it came back healthy less than `RECENT_USE_S` ago: a
    round trip saved per checkout under steady traffic). `dsn` overrides `resolve_dsn(settings)`."""
    pool: Pool = AsyncConnectionPool(
        dsn if dsn is not None else resolve_dsn(settings),
        min_size=settings.pool_min_size,
        max_size=settings.pool_max_size,
        timeout=settings.pool_timeout_s,
        kwargs={"autocommit": True},
        configure=configure,
        check=_check_unless_just_used,
        reset=_note_returned,
        reconnect_timeout=max(settings.connect_timeout_s * 2.0, 10.0),
        name=name,
        open=False,
    )
    await pool.open(wait=False)
    return pool


RECENT_USE_S = 1.0
"""A pooled connection returned healthy this recently is handed out to a `snapshot` (a read)
without a check: a server restarted within that second fails the read instead (UNAVAILABLE; the
caller may ask again, as the search engine does once). Once a statement found the database
unavailable, every connection is checked again before its next use. Writes (`transaction`) are
always checked."""
_returned_at: weakref.WeakKeyDictionary[AsyncConnection[Any], float] = weakref.WeakKeyDictionary()


async def _note_returned(conn: AsyncConnection[Any]) -> None:
    _returned_at[conn] = time.monotonic()


_reading = contextvars.ContextVar("quarry_postgres_snapshot_checkout", default=False)
"""Set while `snapshot` takes a connection: only those checkouts may skip the check (a read can be
asked again; a write that met a dead connection could not tell whether it committed)."""


async def _check_unless_just_used(conn: AsyncConnection[Any]) -> None:
    returned = _returned_at.get(conn)
    recent = returned is not None and time.monotonic() - returned < RECENT_USE_S
    if recent and _reading.get():
        return
    await AsyncConnectionPool.check_connection(conn)


@contextlib.asynccontextmanager
async def transaction(
    pool: Pool,
    settings: PostgresSettings,
    *,
    timeout_s: float | None = None,
) -> AsyncIterator[AsyncConnection[TupleRow]]:
    """One transaction on a pooled connection. Every statement in it is bounded by the shorter of
    `timeout_s` (the request's remaining deadline) and `settings.statement_timeout_s`; errors come
    out classified (`classify`)."""
    limit_ms = _statement_limit_ms(settings, timeout_s)
    try:
        async with pool.connection() as conn, conn.transaction():
            await conn.execute("SELECT set_config('statement_timeout', %s, true)", (limit_ms,))
            yield conn
    except QuarryError:
        raise
    except Exception as error:
        _raise_classified(error, pool, settings)


def _raise_classified(error: Exception, pool: Pool, settings: PostgresSettings) -> NoReturn:
    """`error` as `classify` names it (itself when it is not the database's); a database found
    unavailable makes every pooled connection checked again before use."""
    classified = classify(error, pool=pool, settings=settings)
    if classified is None:
        raise error
    if is_unavailable(classified):
        _returned_at.clear()  # the server went away: check every connection before use
    raise classified from error


class Snapshot:
    """The connection of a `snapshot` transaction: statements are queued, results read later."""

    def __init__(self, conn: AsyncConnection[TupleRow]) -> None:
        self._conn = conn
        self._ended = False

    async def execute(
        self,
        query: str | sql.SQL | sql.Composed,
        params: Params | None = None,
        *,
        prepare: bool | None = None,
    ) -> AsyncCursor[TupleRow]:
        """Queue a statement; its cursor's fetch waits for its result (and every one before).
        `prepare` as psycopg's (None: prepared once it has run a few times; False: never, for a
        statement whose best plan depends on its parameters' sizes)."""
        if self._ended:
            raise RuntimeError("the snapshot has ended: no statement may follow")
        return await self._conn.execute(query, params, prepare=prepare)

    async def end(self) -> None:
        """Queue the transaction's end behind the statements sent so far, so that it travels
        with the round trip that reads their results (instead of one of its own at the end)."""
        if not self._ended:
            self._ended = True
            await self._conn.execute("COMMIT")


@contextlib.asynccontextmanager
async def snapshot(
    pool: Pool,
    settings: PostgresSettings,
    *,
    timeout_s: float | None = None,
) -> AsyncIterator[Snapshot]:
    """One read-only transaction on a pooled connection, in pipeline mode, bounded and classified
    like `transaction`.

    Every statement reads the same snapshot (REPEATABLE READ: statistics read first agree with the
    rows read last, whatever commits meanwhile; a read-only transaction never fails to serialise).
    Statements are sent without waiting for the previous one's result: the client waits only when
    it reads a result, so statements queued together cost one round trip (the transaction's begin,
    isolation and timeout travel with the first of them, its end with the last read when the
    caller queues it with `Snapshot.end`). A statement that writes fails."""
    limit_ms = _statement_limit_ms(settings, timeout_s)
    _reading.set(True)
    try:
        async with pool.connection() as conn:
            _reading.set(False)
            try:
                async with conn.pipeline():
                    await conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY")
                    await conn.execute(
                        "SELECT set_config('statement_timeout', %s, true)", (limit_ms,)
                    )
                    current = Snapshot(conn)
                    yield current
                    await current.end()
            except BaseException:
                if not conn.broken and conn.info.transaction_status in _OPEN:
                    with contextlib.suppress(psycopg.Error):
                        await conn.execute("ROLLBACK")
                raise
    except QuarryError:
        raise
    except Exception as error:
        _raise_classified(error, pool, settings)
    finally:
        _reading.set(False)


_OPEN = (TransactionStatus.INTRANS, TransactionStatus.INERROR)


def _statement_limit_ms(settings: PostgresSettings, timeout_s: float | None) -> str:
    """`statement_timeout` for a transaction: the shorter of the request's remaining deadline and
    the configured limit, in whole milliseconds (at least 1)."""
    limit_s = settings.statement_timeout_s if timeout_s is None else timeout_s
    limit_s = min(limit_s, settings.statement_timeout_s)
    if limit_s <= 0:
        raise DeadlineExceeded("the request's deadline passed before the database was asked")
    return str(max(1, math.ceil(limit_s * 1000)))


def classify(
    error: BaseException, *, pool: Pool | None = None, settings: PostgresSettings | None = None
) -> QuarryError | None:
    """The domain error a driver or pool error means to a caller; None for an error that is a bug
    of ours (a syntax error, an undefined table), which should surface as INTERNAL.

    A pool timeout is ambiguous: every connection busy (RESOURCE_EXHAUSTED) or none can be made
    (UNAVAILABLE); the pool's size tells them apart."""
    retry_s = settings.retry_after_s if settings is not None else 1.0
    if isinstance(error, PoolTimeout | TooManyRequests):
        if pool is not None and _pool_is_full(pool):
            return overloaded(
                "the database connection pool",
                pool.max_size,
                "postgres.pool_max_size",
                retry_s,
            )
        return _unavailable("no connection to the database could be made", retry_s)
    if isinstance(error, PoolClosed):
        return Unavailable("the database pool is closed (shutting down)", retry_after_s=retry_s)
    if isinstance(error, psycopg.errors.QueryCanceled):
        return DeadlineExceeded("the database statement ran out of time", reason="DATABASE_TIMEOUT")
    if isinstance(error, psycopg.errors.SerializationFailure | psycopg.errors.DeadlockDetected):
        return Unavailable(
            "a concurrent write conflicted; retry",
            retry_after_s=min(retry_s, 0.1),
            reason="DATABASE_CONFLICT",
        )
    if isinstance(error, psycopg.errors.InsufficientResources):
        return Unavailable(
            f"the database is out of resources: {_first_line(error)}",
            retry_after_s=retry_s,
            reason="DATABASE_RESOURCES",
        )
    if is_unavailable(error):
        return _unavailable(f"the database is unavailable: {_first_line(error)}", retry_s)
    if isinstance(error, psycopg.DataError | psycopg.IntegrityError):
        return InvalidArgument(f"the database rejected the data: {_first_line(error)}")
    return None


_SERVER_GOING_AWAY = (
    psycopg.errors.AdminShutdown,
    psycopg.errors.CrashShutdown,
    psycopg.errors.CannotConnectNow,
    psycopg.errors.ReadOnlySqlTransaction,  # a failover left the connection on a standby
)


def is_unavailable(error: BaseException) -> bool:
    """Whether `error` (raw or classified) says the database cannot be reached: a connection that
    failed or broke (no SQLSTATE, or class 08), or a server shutting down or read-only."""
    if isinstance(error, Unavailable):
        return error.reason == DATABASE_UNAVAILABLE
    if isinstance(error, _SERVER_GOING_AWAY):
        return True
    if isinstance(error, psycopg.OperationalError):
        state = error.sqlstate
        return state is None or state.startswith("08")
    return False


def _unavailable(message: str, retry_s: float) -> Unavailable:
    return Unavailable(message, retry_after_s=retry_s, reason=DATABASE_UNAVAILABLE)


def _pool_is_full(pool: Pool) -> bool:
    stats = pool.get_stats()
    return stats.get("pool_size", 0) >= pool.max_size and stats.get("pool_available", 0) == 0


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return text[0][:300] if text else type(error).__name__


@dataclass(frozen=True)
class Migration:
    """One schema change, applied once, in order, inside a transaction."""

    version: int
    """Its number: migrations apply in ascending order, each once."""
    name: str
    """What it does, in a few words (recorded beside the version)."""
    statements: Sequence[str]
    """SQL run in one transaction (DDL is transactional in PostgreSQL)."""

    @property
    def checksum(self) -> str:
        """Fingerprint of the statements: a recorded migration must not change later."""
        digest = hashlib.sha256("\n;\n".join(self.statements).encode("utf-8"))
        return digest.hexdigest()[:16]


MIGRATION_LOCK_KEY = int.from_bytes(
    hashlib.sha256(b"quarry.schema_migrations").digest()[:8], "big", signed=True
)
"""The advisory-lock key `migrate` holds: one for every component, so two services migrating
one database at once also never race to create the migrations table."""


async def migrate(
    conn: AsyncConnection[Any], component: str, migrations: Sequence[Migration]
) -> list[int]:
    """Apply the migrations of `component` not applied yet; returns the versions this call
    applied. Holds a session advisory lock meanwhile (one for every component), so replicas
    starting together apply each migration once: the first applies, the others wait, then find
    them done.
    A recorded migration whose statements have changed since raises `FailedPrecondition`.
    `conn` must be in autocommit mode (a pooled connection from `open_pool` is)."""
    versions = [m.version for m in migrations]
    if versions != sorted(set(versions)):
        raise ValueError(f"migration versions must be unique and ascending: {versions}")
    key = MIGRATION_LOCK_KEY
    await conn.execute("SELECT pg_advisory_lock(%s)", (key,))
    try:
        await conn.execute(
            sql.SQL(
                "CREATE TABLE IF NOT EXISTS {} (component text NOT NULL, version integer NOT NULL,"
                " name text NOT NULL, checksum text NOT NULL,"
                " applied_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (component, version))"
            ).format(sql.Identifier(MIGRATIONS_TABLE))
        )
        cursor = await conn.execute(
            sql.SQL("SELECT version, checksum FROM {} WHERE component = %s").format(
                sql.Identifier(MIGRATIONS_TABLE)
            ),
            (component,),
        )
        done = {int(row[0]): str(row[1]) for row in await cursor.fetchall()}
        applied: list[int] = []
        for migration in migrations:
            recorded = done.get(migration.version)
            if recorded is not None:
                if recorded != migration.checksum:
                    raise FailedPrecondition(
                        f"{component} migration {migration.version} ({migration.name}) was "
                        "applied with other statements; write a new migration instead",
                        reason="MIGRATION_CHANGED",
                    )
                continue
            async with conn.transaction():
                for statement in migration.statements:
                    await conn.execute(statement.encode("utf-8"))
                await conn.execute(
                    sql.SQL(
                        "INSERT INTO {} (component, version, name, checksum)"
                        " VALUES (%s, %s, %s, %s)"
                    ).format(sql.Identifier(MIGRATIONS_TABLE)),
                    (component, migration.version, migration.name, migration.checksum),
                )
            applied.append(migration.version)
            log.info(
                "migration applied",
                extra={"component": component, "version": migration.version},
            )
        return applied
    finally:
        if not conn.closed:
            await conn.execute("SELECT pg_advisory_unlock(%s)", (key,))


class DatabaseHealth:
    """Whether the database answers, watched in the background: `on_change(True|False)` is called
    when that flips (the server sets readiness SERVING / NOT_SERVING with it). Calls that fail
    with an unavailable database report it at once through `failed()`, so readiness flips without
    waiting for the next probe; the probe then brings it back once the database answers."""

    def __init__(
        self,
        pool: Pool,
        on_change: Callable[[bool], Awaitable[None]],
        *,
        interval_s: float = 2.0,
        probe_timeout_s: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._pool = pool
        self._on_change = on_change
        self._interval_s = interval_s
        self._probe_timeout_s = probe_timeout_s
        self._clock = clock
        self._up: bool | None = None
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        self.last_change = clock()

    @property
    def up(self) -> bool:
        """Whether the database answered the last probe (False before the first)."""
        return bool(self._up)

    async def probe(self) -> bool:
        """Ask the database once and report a change; returns whether it answered."""
        try:
            async with asyncio.timeout(self._probe_timeout_s):
                async with self._pool.connection(timeout=self._probe_timeout_s) as conn:
                    await conn.execute("SELECT 1")
            up = True
        except Exception as error:
            if not (is_unavailable(error) or isinstance(error, PoolTimeout | TimeoutError)):
                log.warning("database probe failed", extra={"error": _first_line(error)})
            up = False
        await self._set(up)
        return up

    def failed(self, error: BaseException) -> None:
        """A call saw `error`: when it says the database is unreachable, probe now."""
        if is_unavailable(error):
            self._wake.set()

    def start(self) -> None:
        """Start probing every `interval_s` (and at once after `failed`)."""
        if self._task is None:
            self._task = asyncio.create_task(self._watch(), name="database health")

    async def close(self) -> None:
        self._closed = True
        if self._task is not None:
            await stop_tasks([self._task], timeout_s=self._probe_timeout_s * 2, owner="database")
            self._task = None

    async def _watch(self) -> None:
        while not self._closed:  # the flag, not only the cancellation (services/common/tasks.py)
            await self.probe()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._interval_s):
                    await self._wake.wait()
            self._wake.clear()

    async def _set(self, up: bool) -> None:
        if up == self._up:
            return
        self._up = up
        self.last_change = self._clock()
        if up:
            log.info("database reachable")
        else:
            log.warning("database unreachable")
        await self._on_change(up)
