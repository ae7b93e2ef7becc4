"""Stopping a component's background tasks on close, within a bound.

A task that does not end when cancelled (it swallowed the cancellation, or it waits on something
cancellation cannot reach) would otherwise hold the close, and with it a server's shutdown or a
test, for as long as the process lives. `stop_tasks` cancels, waits at most `timeout_s`, and logs
each task still running with the line it is stuck on, so the fault is found, not waited on.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable

log = logging.getLogger(__name__)


async def stop_tasks(tasks: Iterable[asyncio.Task[object]], *, timeout_s: float, owner: str) -> int:
    """Cancel `tasks` and wait up to `timeout_s` for them to end; returns how many had not ended
    (each logged with its stack, as `owner`'s)."""
    pending = [task for task in tasks if not task.done()]
    for task in pending:
        task.cancel()
    if not pending:
        return 0
    ended, still = await asyncio.wait(pending, timeout=timeout_s)
    for task in ended:  # their outcome is retrieved: a failure on the way out is not news
        if not task.cancelled():
            task.exception()
    for task in still:
        frames = task.get_stack(limit=8)
        where = " <- ".join(
            f"{frame.f_code.co_filename}:{frame.f_lineno} {frame.f_code.co_name}"
            for frame in reversed(frames)
        )
        log.error(
            "a background task did not stop when cancelled; closing without it",
            extra={"owner": owner, "task": task.get_name(), "at": where},
        )
    return len(still)
