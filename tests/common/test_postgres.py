"""`services.common.postgres`: the DSN and TLS settings, the pool, migrations under an advisory
lock, statement deadlines and error classification, most of it live against a real PostgreSQL."""

from __future__ import annotations

import asyncio
from pathlib import Path

import psycopg
import psycopg.errors
import pytest
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import PoolTimeout

from services.common.admission import OVERLOADED
from services.common.errors import (
    DeadlineExceeded,
    FailedPrecondition,
    InvalidArgument,
    ResourceExhausted,
    Unavailable,
)
from services.common.postgres import (
    DATABASE_UNAVAILABLE,
    MIGRATIONS_TABLE,
    DatabaseHealth,
    Migration,
    PostgresSettings,
    classify,
    migrate,
    open_pool,
    redacted,
    resolve_dsn,
    transaction,
)
from tests.postgres_server import PostgresServer

DSN = "postgresql://quarry:s3cret@db.internal:5432/quarry"


def test_dsn_comes_from_the_named_environment_variable() -> None:
    settings = PostgresSettings(dsn_env="MY_DB")
    params = conninfo_to_dict(resolve_dsn(settings, {"MY_DB": DSN}))
    assert (params["host"], params["dbname"], params["password"]) == (
        "db.internal",
        "quarry",
        "s3cret",
    )
    assert params["application_name"] == "quarry"
    assert params["connect_timeout"] == "5"


def test_dsn_file_a_mounted_secret_wins_over_the_environment(tmp_path: Path) -> None:
    secret = tmp_path / "dsn"
    secret.write_text("host=from-file dbname=x user=u\n")
    settings = PostgresSettings(dsn_file=secret)
    params = conninfo_to_dict(resolve_dsn(settings, {"QUARRY_POSTGRES_DSN": DSN}))
    assert params["host"] == "from-file"


def test_missing_dsn_is_a_failed_precondition_naming_where_it_looked(tmp_path: Path) -> None:
    with pytest.raises(FailedPrecondition, match="QUARRY_POSTGRES_DSN") as caught:
        resolve_dsn(PostgresSettings(), {})
    assert caught.value.reason == "DATABASE_DSN_MISSING"
    with pytest.raises(FailedPrecondition, match="cannot read"):
        resolve_dsn(PostgresSettings(dsn_file=tmp_path / "absent"), {})


def test_malformed_dsn_is_rejected_without_echoing_it() -> None:
    with pytest.raises(FailedPrecondition) as caught:
        resolve_dsn(PostgresSettings(), {"QUARRY_POSTGRES_DSN": "host=x password=hunter2 =oops"})
    assert caught.value.reason == "DATABASE_DSN_INVALID"
    assert "hunter2" not in caught.value.message


def test_tls_settings_are_folded_into_the_dsn(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    settings = PostgresSettings(sslmode="verify-full", ca_file=ca)
    params = conninfo_to_dict(resolve_dsn(settings, {"QUARRY_POSTGRES_DSN": DSN}))
    assert params["sslmode"] == "verify-full"
    assert params["sslrootcert"] == str(ca)


def test_the_dsns_own_application_name_and_timeout_are_kept() -> None:
    dsn = DSN + "?application_name=mine&connect_timeout=9"
    params = conninfo_to_dict(resolve_dsn(PostgresSettings(), {"QUARRY_POSTGRES_DSN": dsn}))
    assert (params["application_name"], params["connect_timeout"]) == ("mine", "9")


def test_redacted_dsn_has_no_password() -> None:
    shown = redacted(DSN)
    assert "s3cret" not in shown
    assert "db.internal" in shown


def test_driver_errors_are_classified_into_domain_errors() -> None:
    down = classify(psycopg.OperationalError("connection refused"))
    assert isinstance(down, Unavailable)
    assert down.reason == DATABASE_UNAVAILABLE
    assert down.retry_after_s == 1.0
    assert isinstance(classify(psycopg.errors.QueryCanceled("timeout")), DeadlineExceeded)
    assert isinstance(classify(psycopg.errors.InvalidTextRepresentation("bad")), InvalidArgument)
    assert isinstance(classify(psycopg.errors.UniqueViolation("dup")), InvalidArgument)
    conflict = classify(psycopg.errors.DeadlockDetected("deadlock"))
    assert isinstance(conflict, Unavailable)
    assert conflict.reason == "DATABASE_CONFLICT"
    # a bug of ours is not dressed up as the caller's problem
    assert classify(psycopg.errors.UndefinedTable("no such table")) is None
    assert classify(ValueError("x")) is None
    # a pool timeout without a pool to look at: nothing could be connected
    assert isinstance(classify(PoolTimeout("timed out")), Unavailable)


def _settings(**overrides: object) -> PostgresSettings:
    return PostgresSettings.model_validate(
        {"pool_min_size": 0, "pool_max_size": 4, "pool_timeout_s": 1.0, **overrides}
    )


async def test_migrations_apply_once_however_many_replicas_start_together(
    postgres_dsn: str,
) -> None:
    migrations = [
        Migration(1, "table", ["CREATE TABLE things (id int PRIMARY KEY, note text)"]),
        Migration(2, "a row", ["INSERT INTO things VALUES (1, 'once')"]),
    ]
    settings = _settings(pool_max_size=8)
    pool = await open_pool(settings, dsn=postgres_dsn)
    try:

        async def replica() -> list[int]:
            async with pool.connection() as conn:
                return await migrate(conn, "test", migrations)

        applied = await asyncio.gather(*(replica() for _ in range(6)))
        assert sorted(v for versions in applied for v in versions) == [1, 2]
        async with pool.connection() as conn:
            rows = await (await conn.execute("SELECT count(*) FROM things")).fetchone()
            recorded = await (
                await conn.execute(f"SELECT component, version FROM {MIGRATIONS_TABLE}")
            ).fetchall()
            assert rows == (1,)
            assert sorted(recorded) == [("test", 1), ("test", 2)]
            # a later start applies only what is new
            more = [*migrations, Migration(3, "column", ["ALTER TABLE things ADD COLUMN n int"])]
            assert await migrate(conn, "test", more) == [3]
            assert await migrate(conn, "test", more) == []
    finally:
        await pool.close()


async def test_a_changed_applied_migration_is_refused(postgres_dsn: str) -> None:
    async with await psycopg.AsyncConnection.connect(postgres_dsn, autocommit=True) as conn:
        await migrate(conn, "test", [Migration(1, "t", ["CREATE TABLE t (id int)"])])
        with pytest.raises(FailedPrecondition, match="applied with other statements"):
            await migrate(conn, "test", [Migration(1, "t", ["CREATE TABLE t (id bigint)"])])
        # components are independent: another one starts at its own version 1
        assert await migrate(conn, "other", [Migration(1, "u", ["CREATE TABLE u (id int)"])]) == [1]


async def test_a_failing_migration_leaves_nothing_behind(postgres_dsn: str) -> None:
    bad = [Migration(1, "half", ["CREATE TABLE half (id int)", "SELECT no_such_function()"])]
    async with await psycopg.AsyncConnection.connect(postgres_dsn, autocommit=True) as conn:
        with pytest.raises(psycopg.errors.UndefinedFunction):
            await migrate(conn, "test", bad)
        exists = await (await conn.execute("SELECT to_regclass('half')")).fetchone()
        assert exists == (None,)
        good = [Migration(1, "half", ["CREATE TABLE half (id int)"])]
        assert await migrate(conn, "test", good) == [1]


async def test_a_statement_past_the_request_deadline_is_deadline_exceeded(
    postgres_dsn: str,
) -> None:
    settings = _settings()
    pool = await open_pool(settings, dsn=postgres_dsn)
    try:
        with pytest.raises(DeadlineExceeded):
            async with transaction(pool, settings, timeout_s=0.2) as conn:
                await conn.execute("SELECT pg_sleep(5)")
        # the connection went back healthy: the next transaction works
        async with transaction(pool, settings, timeout_s=5) as conn:
            assert await (await conn.execute("SELECT 1")).fetchone() == (1,)
        with pytest.raises(DeadlineExceeded, match="deadline passed"):
            async with transaction(pool, settings, timeout_s=0):
                pass
    finally:
        await pool.close()


async def test_a_full_pool_is_resource_exhausted_through_admission(postgres_dsn: str) -> None:
    settings = _settings(pool_max_size=1, pool_timeout_s=0.3)
    pool = await open_pool(settings, dsn=postgres_dsn)
    try:
        async with transaction(pool, settings) as held:
            await held.execute("SELECT 1")
            with pytest.raises(ResourceExhausted) as caught:
                async with transaction(pool, settings):
                    pass
        assert caught.value.reason == OVERLOADED
        assert caught.value.metadata["setting"] == "postgres.pool_max_size"
        assert caught.value.retry_after_s == settings.retry_after_s
    finally:
        await pool.close()


async def test_bad_data_is_invalid_argument(postgres_dsn: str) -> None:
    settings = _settings()
    pool = await open_pool(settings, dsn=postgres_dsn)
    try:
        with pytest.raises(InvalidArgument, match="rejected the data"):
            async with transaction(pool, settings) as conn:
                await conn.execute("SELECT %s::int", ("not a number",))
    finally:
        await pool.close()


async def test_sslmode_reaches_libpq(postgres_server: PostgresServer) -> None:
    """The embedded server has no TLS: `sslmode=require` must make the connection fail saying so,
    which proves the setting is applied (and `disable` connects)."""
    env = {"QUARRY_POSTGRES_DSN": postgres_server.dsn()}
    with pytest.raises(psycopg.OperationalError, match="SSL"):
        await psycopg.AsyncConnection.connect(resolve_dsn(PostgresSettings(sslmode="require"), env))
    conn = await psycopg.AsyncConnection.connect(
        resolve_dsn(PostgresSettings(sslmode="disable"), env)
    )
    await conn.close()


async def test_database_down_is_unavailable_and_health_recovers_by_itself(
    postgres_server: PostgresServer, postgres_dsn: str
) -> None:
    settings = _settings(pool_timeout_s=0.5, connect_timeout_s=1)
    pool = await open_pool(settings, dsn=postgres_dsn)
    changes: list[bool] = []
    flipped = asyncio.Event()

    async def on_change(up: bool) -> None:
        changes.append(up)
        flipped.set()

    health = DatabaseHealth(pool, on_change, interval_s=0.2, probe_timeout_s=0.5)
    try:
        assert await health.probe() is True
        postgres_server.stop(immediate=True)
        with pytest.raises(Unavailable) as caught:
            async with transaction(pool, settings) as conn:
                await conn.execute("SELECT 1")
        assert caught.value.reason == DATABASE_UNAVAILABLE
        assert caught.value.retry_after_s == settings.retry_after_s
        health.start()
        health.failed(caught.value)
        flipped.clear()
        await asyncio.wait_for(flipped.wait(), 10)
        assert changes == [True, False]
        postgres_server.start()
        flipped.clear()
        await asyncio.wait_for(flipped.wait(), 15)
        assert changes == [True, False, True]
        async with transaction(pool, settings) as conn:
            assert await (await conn.execute("SELECT 1")).fetchone() == (1,)
    finally:
        await health.close()
        await pool.close()
        if not postgres_server.running:
            postgres_server.start()
