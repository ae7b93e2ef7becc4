"""A service's server started in process for a test, and a stub to it over a plain channel."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import TypeVar

import grpc

from services.common.server import QuarryServer

Stub = TypeVar("Stub")


@asynccontextmanager
async def stub_of(
    server: QuarryServer, stub: Callable[[grpc.aio.Channel], Stub]
) -> AsyncIterator[Stub]:
    """`server` started, and `stub` (a generated `...Stub` class) on a channel to it; the server
    stops, without grace, when the block ends."""
    await server.start()
    try:
        async with grpc.aio.insecure_channel(server.address) as channel:
            yield stub(channel)
    finally:
        await server.stop(0)
