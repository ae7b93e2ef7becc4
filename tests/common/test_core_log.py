"""gRPC core's own log lines stay out of a service's JSON log.

The scenario that put them there: a peer answers the agent's connection with GOAWAY
`ENHANCE_YOUR_CALM` / `too_many_pings` (a server whose keepalive policy the agent's pings break),
and gRPC core prints an `E…chttp2_transport.cc…` line, not JSON, on the agent's stderr. Here the
peer is a few bytes of HTTP/2 that send that GOAWAY to every connection, and the agent is a real
`python -m services.agent` process."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import struct
import sys
from collections.abc import AsyncIterator

import pytest

from services.agent.client import AgentClient, RunOptions
from services.common.errors import QuarryError

pytestmark = pytest.mark.slow

_PREFACE = len(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
_ENHANCE_YOUR_CALM = 0xB


def _frame(kind: int, payload: bytes) -> bytes:
    return struct.pack(">I", len(payload))[1:] + bytes([kind, 0]) + struct.pack(">I", 0) + payload


_SETTINGS = _frame(0x4, b"")
_GOAWAY = _frame(0x7, struct.pack(">II", 0, _ENHANCE_YOUR_CALM) + b"too_many_pings")


async def _calm_down(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        await reader.readexactly(_PREFACE)
        writer.write(_SETTINGS + _GOAWAY)
        await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


@pytest.fixture
async def too_many_pings() -> AsyncIterator[str]:
    """An address whose every connection is answered with GOAWAY `too_many_pings`."""
    server = await asyncio.start_server(_calm_down, "127.0.0.1", 0)
    yield f"127.0.0.1:{server.sockets[0].getsockname()[1]}"
    server.close()


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def _agent_stderr(search_tool: str, verbosity: str | None) -> list[str]:
    """Start an agent whose search tool is `search_tool`, ask it one question, stop it; its
    stderr lines. `verbosity`: GRPC_VERBOSITY for the agent (None: not set)."""
    env = {k: v for k, v in os.environ.items() if k != "GRPC_VERBOSITY"}
    if verbosity is not None:
        env["GRPC_VERBOSITY"] = verbosity
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "services.agent", "--port", "0",
        "--search-tool", search_tool, "--llm-gateway", f"127.0.0.1:{_closed_port()}",
        stdin=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )  # fmt: skip
    assert process.stderr is not None
    lines: list[str] = []
    try:
        address = ""
        while not address:
            line = (await asyncio.wait_for(process.stderr.readline(), 60)).decode()
            assert line, f"the agent exited before serving: {lines}"
            lines.append(line)
            if '"message": "serving"' in line:
                address = json.loads(line)["address"]
        async with AgentClient(address) as agent:
            with pytest.raises(QuarryError):
                await agent.run("q", RunOptions(collection="python-docs", timeout_s=2.0))
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
        _, rest = await asyncio.wait_for(process.communicate(), 60)
    return lines + rest.decode().splitlines(keepends=True)


def _not_json(lines: list[str]) -> list[str]:
    raw = []
    for line in lines:
        try:
            json.loads(line)
        except json.JSONDecodeError:
            raw.append(line)
    return raw


async def test_a_goaway_too_many_pings_leaves_the_agents_stderr_json_only(
    too_many_pings: str,
) -> None:
    lines = await _agent_stderr(too_many_pings, verbosity=None)
    assert _not_json(lines) == []
    assert any('"message": "serving"' in line for line in lines)


async def test_grpc_verbosity_from_the_environment_brings_core_lines_back_to_debug(
    too_many_pings: str,
) -> None:
    """The same scenario with GRPC_VERBOSITY=ERROR set by an operator: core's raw line is
    printed (so the scenario does provoke it, and the operator's setting wins)."""
    lines = await _agent_stderr(too_many_pings, verbosity="ERROR")
    assert any("too_many_pings" in line for line in _not_json(lines))
