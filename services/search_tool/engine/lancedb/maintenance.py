"""Index maintenance that converges by itself once a collection's writes quiesce.

Every write leaves rows outside BM25 and the scalar indexes (LanceDB scans them on each query) and
one more data fragment (each query pays for every fragment); the write path rebuilds only past
thresholds (`IndexPolicy`), so a collection fed only through `UpsertDocuments` used to stay
partly unindexed — KEYWORD 31–58 ms p50 instead of 18–22 ms once refreshed — and no client can ask
for a refresh. Here, once a collection has had no write for `quiet_s`, a background task runs
`LanceDBEngine.settle`: the bulk loaders' refresh (fold the rows into every index, compact), as
far as it is due for what was written (`IndexPolicy.settle_unindexed_factor`, `settle_fragments`:
a small write into a large collection waits for more, since each fold reads every row); a write
that lands meanwhile makes it run again once writes quiesce again. A collection opened with
unindexed rows (its writer stopped within `quiet_s` of its last write, or ran without
maintenance) is maintained as if just written. Neither searches nor writes wait for it (the
settle holds no write lock).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable

log = logging.getLogger(__name__)


class IndexMaintenance:
    """One background task per collection with unindexed writes; none once it has converged."""

    def __init__(self, refresh: Callable[[str], Awaitable[None]], *, quiet_s: float | None) -> None:
        self._refresh = refresh
        self._quiet_s = quiet_s
        self._last_write: dict[str, float] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}

    def wrote(self, name: str) -> None:
        """Note a write to `name`; maintenance runs once writes to it pause for `quiet_s`."""
        if self._quiet_s is None:
            return
        self._last_write[name] = time.monotonic()
        task = self._tasks.get(name)
        if task is None or task.done():
            self._tasks[name] = asyncio.create_task(self._converge(name), name=f"maintain {name}")

    def due(self, name: str) -> None:
        """`name` was found with unindexed rows (opened after a process that wrote it stopped
        before its maintenance ran): maintain it as after a write now."""
        self.wrote(name)

    async def settled(self, name: str) -> None:
        """Wait until the maintenance of `name` due for the writes so far has run."""
        task = self._tasks.get(name)
        if task is not None:
            await asyncio.shield(task)

    def pending(self, name: str) -> bool:
        """Whether maintenance of `name` is scheduled or running."""
        task = self._tasks.get(name)
        return task is not None and not task.done()

    async def drop(self, name: str) -> None:
        """Stop maintaining `name` (the collection is being dropped)."""
        task = self._tasks.pop(name, None)
        self._last_write.pop(name, None)
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def close(self) -> None:
        """Stop every task (unindexed rows stay searchable; the next write schedules again)."""
        for name in list(self._tasks):
            await self.drop(name)

    async def _converge(self, name: str) -> None:
        assert self._quiet_s is not None
        while True:
            since = time.monotonic() - self._last_write[name]
            if since < self._quiet_s:
                await asyncio.sleep(self._quiet_s - since)
                continue
            started = time.monotonic()
            try:
                await self._refresh(name)
            except Exception:
                log.exception("index maintenance failed", extra={"collection": name})
                return
            log.info(
                "indexes converged",
                extra={"collection": name, "seconds": round(time.monotonic() - started, 3)},
            )
            if self._last_write[name] < started:
                return
