"""`python -m quarry_cli.vespa_deploy` (the vespa deploy Job) against a fake config server.

The fake speaks the two endpoints of Vespa's deploy API v2 the tool uses (`/state/v1/health`,
`/application/v2/tenant/default/prepareandactivate`, answers shaped as Vespa's), on 127.0.0.1
port 0 in a thread; each test runs the tool's real `main` with its arguments and reads the exit
status and what the fake received.
"""

from __future__ import annotations

import io
import socket
import threading
import zipfile
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from quarry_cli.vespa_deploy import (
    EXIT_DEPLOYED,
    EXIT_NOT_UP,
    EXIT_REJECTED,
    installed_package,
    main,
)

ROOT = Path(__file__).resolve().parents[2]
CHECKED_IN = ROOT / "services" / "search_tool" / "vespa" / "app"
STARTUP_TIMEOUT_S = 30.0
FAST = ["--poll-s", "0.01"]


@dataclass
class FakeConfigServer:
    """Health answers 503 `down_for` times, then up; deploys answer from `answers` in turn."""

    down_for: int = 0
    answers: list[tuple[int, dict[str, Any]]] = field(default_factory=list)
    health_checks: int = 0
    deployed: list[tuple[str, bytes]] = field(default_factory=list)

    async def health(self, request: Request) -> JSONResponse:
        self.health_checks += 1
        if self.health_checks <= self.down_for:
            return JSONResponse({"status": {"code": "initializing"}}, status_code=503)
        return JSONResponse({"status": {"code": "up"}})

    async def prepare_and_activate(self, request: Request) -> JSONResponse:
        self.deployed.append((request.headers.get("content-type", ""), await request.body()))
        if self.answers:
            status, body = self.answers.pop(0)
            return JSONResponse(body, status_code=status)
        session = len(self.deployed) + 1
        return JSONResponse(
            {
                "session-id": str(session),
                "message": f"Session {session} for tenant 'default' prepared and activated.",
            }
        )


def _unused_address() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{probe.getsockname()[1]}"


@pytest.fixture
def fake() -> FakeConfigServer:
    return FakeConfigServer()


@pytest.fixture
def config_server(fake: FakeConfigServer) -> Iterator[str]:
    started = threading.Event()

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        started.set()
        yield

    app = Starlette(
        routes=[
            Route("/state/v1/health", fake.health),
            Route(
                "/application/v2/tenant/default/prepareandactivate",
                fake.prepare_and_activate,
                methods=["POST"],
            ),
        ],
        lifespan=lifespan,
    )
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    assert started.wait(STARTUP_TIMEOUT_S), "the fake config server did not start"
    yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    server.should_exit = True
    thread.join(STARTUP_TIMEOUT_S)
    sock.close()


def _files(zipped: bytes) -> dict[str, bytes]:
    with zipfile.ZipFile(io.BytesIO(zipped)) as archive:
        return {name: archive.read(name) for name in archive.namelist()}


def test_it_waits_for_the_config_server_then_activates_quarrys_package(
    config_server: str, fake: FakeConfigServer, capsys: pytest.CaptureFixture[str]
) -> None:
    fake.down_for = 2
    assert main(["--config-server", config_server, *FAST]) == EXIT_DEPLOYED
    assert fake.health_checks == 3
    ((content_type, zipped),) = fake.deployed
    assert content_type == "application/zip"
    expected = {
        p.relative_to(CHECKED_IN).as_posix(): p.read_bytes()
        for p in CHECKED_IN.rglob("*")
        if p.is_file()
    }
    assert _files(zipped) == expected
    assert {"services.xml", "schemas/chunk.sd", "schemas/collection.sd"} <= set(expected)
    out = capsys.readouterr()
    assert "session 2" in out.out
    assert "waiting for the config server" in out.err


def test_running_it_again_deploys_the_same_package_again(
    config_server: str, fake: FakeConfigServer
) -> None:
    for _ in range(2):
        assert main(["--config-server", config_server, *FAST]) == EXIT_DEPLOYED
    first, second = fake.deployed
    assert _files(first[1]) == _files(second[1])


def test_a_rejected_package_fails_at_once_with_vespas_message(
    config_server: str, fake: FakeConfigServer, capsys: pytest.CaptureFixture[str]
) -> None:
    fake.answers = [
        (
            400,
            {
                "error-code": "INVALID_APPLICATION_PACKAGE",
                "message": "Invalid application: schema 'chunk': unknown field 'vector'",
            },
        )
    ]
    assert main(["--config-server", config_server, "--wait-s", "60", *FAST]) == EXIT_REJECTED
    assert len(fake.deployed) == 1, "a rejected package is not retried"
    error = capsys.readouterr().err
    assert "INVALID_APPLICATION_PACKAGE" in error
    assert "unknown field 'vector'" in error


def test_a_config_server_error_is_retried_until_the_deploy_succeeds(
    config_server: str, fake: FakeConfigServer, capsys: pytest.CaptureFixture[str]
) -> None:
    fake.answers = [(503, {"error-code": "INTERNAL_SERVER_ERROR", "message": "busy"})]
    assert main(["--config-server", config_server, "--wait-s", "60", *FAST]) == EXIT_DEPLOYED
    assert len(fake.deployed) == 2
    assert "busy" in capsys.readouterr().err


def test_a_config_server_that_never_comes_up_fails_the_run_naming_it(
    config_server: str, fake: FakeConfigServer, capsys: pytest.CaptureFixture[str]
) -> None:
    fake.down_for = 1_000
    assert main(["--config-server", config_server, "--wait-s", "0", *FAST]) == EXIT_NOT_UP
    assert not fake.deployed
    error = capsys.readouterr().err
    assert f"the config server at {config_server} is not up" in error
    assert "initializing" in error


def test_an_unreachable_config_server_fails_the_run(capsys: pytest.CaptureFixture[str]) -> None:
    address = _unused_address()
    assert main(["--config-server", address, "--wait-s", "0", *FAST]) == EXIT_NOT_UP
    assert "ConnectError" in capsys.readouterr().err


def test_a_directory_that_is_not_a_package_is_refused_before_any_call(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    address = _unused_address()
    assert main(["--config-server", address, "--package", str(tmp_path)]) == EXIT_REJECTED
    assert "no services.xml" in capsys.readouterr().err


def test_the_installed_package_is_the_checked_in_one() -> None:
    assert installed_package().resolve() == CHECKED_IN.resolve()
