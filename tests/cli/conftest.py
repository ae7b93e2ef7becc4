"""Fixtures of the tooling tests: the real embedder, for demo builds against a search tool."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from services.common.settings import ServerSettings
from services.search_tool.config import SearchToolSettings
from services.search_tool.embedding import Embedder, EmbeddingSettings, build_embedder
from services.search_tool.server import SearchToolServer, build_search_tool_server


@pytest.fixture(scope="session")
def embedder() -> Embedder:
    return build_embedder(EmbeddingSettings())


@pytest.fixture
async def search_tool(embedder: Embedder, tmp_path: Path) -> AsyncIterator[SearchToolServer]:
    """A real search tool on 127.0.0.1 port 0, in this test's event loop."""
    settings = SearchToolSettings(
        server=ServerSettings(port=0, grace_s=0.5), data_dir=tmp_path / "data", log_format="text"
    )
    server = build_search_tool_server(settings, embedder_factory=lambda: embedder)
    await server.start()
    yield server
    await server.stop(0)


@dataclass(frozen=True)
class Completed:
    """A finished `quarry` subprocess."""

    returncode: int
    stdout: str
    stderr: str


async def quarry(
    *args: str, timeout_s: float = 120.0, env: dict[str, str] | None = None
) -> Completed:
    """Run the `quarry` command in a subprocess without a terminal (stdin closed, pipes out);
    `env` is added to this process's environment."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "quarry_cli.cli",
        *args,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, **(env or {})},
    )
    out, err = await asyncio.wait_for(process.communicate(), timeout_s)
    assert process.returncode is not None
    return Completed(process.returncode, out.decode(), err.decode())
