"""Vector-index builds in the background, remembered across restarts.

A vector index over a large collection takes seconds to build, and LanceDB's compaction leaves it
degraded (see `indexes.refresh_indexes`), so writes schedule the build here and return: writes and
searches go on meanwhile, on the old index or a flat scan. A build asked for while one runs runs
once more after it. A marker file under the data directory says a build is owed; a process that
stops before it finishes leaves the marker, and the next one to open the collection builds again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

from services.search_tool.engine.lancedb.indexes import build_vector_index, vector_index_rows

log = logging.getLogger(__name__)

VectorIndexBuilder = Callable[[Any, int], Awaitable[None]]
"""Builds the vector index of a table over a number of rows (`indexes.build_vector_index`)."""


class VectorIndexBuilds:
    """The vector index of each open collection: the rows it covers and its background builds."""

    def __init__(
        self, *, marker_dir: Path | None, builder: VectorIndexBuilder = build_vector_index
    ) -> None:
        self._markers = marker_dir
        """Where a pending build is remembered across restarts (None: nowhere)."""
        self._builder = builder
        self._covered: dict[str, int | None] = {}
        self._running: dict[str, asyncio.Task[None]] = {}
        self._again: set[str] = set()
        self._locks: defaultdict[str, asyncio.Lock] = defaultdict(asyncio.Lock)
        self._claims: defaultdict[str, int] = defaultdict(int)

    @contextlib.asynccontextmanager
    async def index_work(self, name: str) -> AsyncIterator[None]:
        """Exclusive index work on a collection: a vector-index build, a refresh, the write
        path's threshold rebuilds (two of them would race on the same indexes)."""
        self._claims[name] += 1
        try:
            async with self._locks[name]:
                yield
        finally:
            self._claims[name] -= 1

    def index_work_claimed(self, name: str) -> bool:
        """Whether index work on `name` runs or waits to run (a write must not queue behind it:
        a lock that was just released may still have waiters)."""
        return self._claims[name] > 0

    def covered_rows(self, name: str) -> int | None:
        """Rows the collection's vector index covers; None: it has none."""
        return self._covered.get(name)

    def set_covered_rows(self, name: str, rows: int | None) -> None:
        self._covered[name] = rows

    async def opened(self, name: str, table: Any) -> None:
        """Learn what a freshly opened table's index covers; resume a build a process left."""
        self._covered[name] = await vector_index_rows(table)
        marker = self._marker(name)
        if marker is not None and marker.exists():
            self.schedule(name, table)

    def schedule(self, name: str, table: Any) -> None:
        """Build the index in the background (once more after a build that runs now)."""
        self._remember(name)
        if name in self._running:
            self._again.add(name)
            return
        self._running[name] = asyncio.create_task(self._build(name, table))

    async def settled(self, name: str) -> None:
        """Wait for a background build of `name`, if one runs."""
        while (task := self._running.get(name)) is not None:
            await asyncio.wait({task})

    def built(self, name: str) -> None:
        """The index was brought up to date in the foreground: no build is owed any more."""
        self._forget(name)

    async def drop(self, name: str) -> None:
        """Stop a build of a collection being dropped, and forget everything about it."""
        task = self._running.get(name)
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        self._forget(name)
        self._covered.pop(name, None)

    async def close(self) -> None:
        """Stop every build in flight; their markers stay, so they run again after a restart."""
        for task in list(self._running.values()):
            task.cancel()
        await asyncio.gather(*self._running.values(), return_exceptions=True)

    async def _build(self, name: str, table: Any) -> None:
        try:
            async with self.index_work(name):
                while True:
                    self._again.discard(name)
                    rows = int(await table.count_rows())
                    await self._builder(table, rows)
                    self._covered[name] = await vector_index_rows(table)
                    if name not in self._again:
                        break
            self._forget(name)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("vector index build failed", extra={"collection": name})
        finally:
            self._running.pop(name, None)

    def _marker(self, name: str) -> Path | None:
        return None if self._markers is None else self._markers / f"{name}.vector-rebuild"

    def _remember(self, name: str) -> None:
        marker = self._marker(name)
        if marker is not None:
            marker.parent.mkdir(parents=True, exist_ok=True)
            marker.touch()

    def _forget(self, name: str) -> None:
        marker = self._marker(name)
        if marker is not None:
            marker.unlink(missing_ok=True)
