"""A search tool in its own process (spawned by exec: never fork after LanceDB is open)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path

import pytest


class SubprocessServer:
    """`python -m services.search_tool` on a data directory; knows its address once it serves."""

    def __init__(self, process: asyncio.subprocess.Process, drain: asyncio.Task[None]) -> None:
        self.process = process
        self._drain = drain
        self.address = ""

    @classmethod
    async def start(cls, data_dir: Path, env: dict[str, str] | None = None) -> SubprocessServer:
        """Start it and wait until it logs that the search tool is serving."""
        environment = {**os.environ, "QUARRY_SEARCH_TOOL_LOG_FORMAT": "json", **(env or {})}
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "services.search_tool",
            "--port",
            "0",
            "--data-dir",
            str(data_dir),
            stderr=asyncio.subprocess.PIPE,
            env=environment,
        )
        assert process.stderr is not None
        address = await asyncio.wait_for(_serving_address(process.stderr), timeout=60)
        server = cls(process, asyncio.create_task(_discard(process.stderr)))
        server.address = address
        return server

    async def kill(self) -> None:
        """SIGKILL: no draining, no cleanup."""
        if self.process.returncode is None:
            self.process.send_signal(signal.SIGKILL)
        await self.process.wait()
        await self._drain

    async def terminate(self) -> int:
        """SIGTERM, then wait for the exit code."""
        if self.process.returncode is None:
            self.process.send_signal(signal.SIGTERM)
        code = await self.process.wait()
        await self._drain
        return code


async def _serving_address(stderr: asyncio.StreamReader) -> str:
    while line := await stderr.readline():
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            continue
        if (
            entry.get("message") == "serving"
            and entry.get("logger") == "services.search_tool.server"
        ):
            return str(entry["address"])
    pytest.fail("the search tool exited before serving")


async def _discard(stderr: asyncio.StreamReader) -> None:
    while await stderr.readline():
        pass
