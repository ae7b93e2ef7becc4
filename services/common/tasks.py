"""Stopping a component's background tasks on close, within a bound.

A task that does not end when cancelled would otherwise hold the close, and with it a server's
shutdown or a test, for as long as the process lives. On Python 3.11 that happens without any bug
of ours: `asyncio.wait_for` returns the inner result and drops the cancellation when both arrive in
the same step (python/cpython#86296, fixed in 3.12), and psycopg_pool waits for a connection with
`wait_for`; a heartbeat loop whose cancellation was dropped that way sleeps and beats on for ever
(seen in CI: `tests/agent/test_history_postgres.py` stalled until CI's limit). So `stop_tasks`
cancels again, every `RECANCEL_S`, the tasks still running, waits at most `timeout_s`, and logs
each task still running then with where it is suspended, so the fault is found, not waited on.
Loops that run for ever should also check a closing flag of their own.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from typing import Any

log = logging.getLogger(__name__)

RECANCEL_S = 0.5
"""A task still running this long after its cancellation is cancelled again (a cancellation
dropped by `wait_for` leaves it running; one still cleaning up is interrupted, at shutdown)."""


async def stop_tasks(tasks: Iterable[asyncio.Task[object]], *, timeout_s: float, owner: str) -> int:
    """Cancel `tasks` and wait up to `timeout_s` for them to end; returns how many had not ended
    (each logged, as `owner`'s, with where it is suspended)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    tasks = list(tasks)
    for task in tasks:
        if task.done() and not task.cancelled():
            task.exception()  # retrieved: it ended before the close, as it ended
    still = {task for task in tasks if not task.done()}
    while still:
        for task in still:
            task.cancel()
        remaining = deadline - loop.time()
        if remaining <= 0:
            break
        ended, still = await asyncio.wait(still, timeout=min(RECANCEL_S, remaining))
        for task in ended:  # their outcome is retrieved: a failure on the way out is not news
            if not task.cancelled():
                task.exception()
    for task in still:
        log.error(
            "a background task did not stop when cancelled; closing without it",
            extra={"owner": owner, "task": task.get_name(), "at": awaiting(task)},
        )
    return len(still)


def awaiting(task: asyncio.Task[object]) -> str:
    """Where `task` is suspended, outermost first: the chain of coroutines (and async generators,
    context managers included) each awaiting the next, down to the innermost await."""
    where: list[str] = []
    node: Any = task.get_coro()
    for _ in range(64):
        frame = getattr(node, "cr_frame", None) or getattr(node, "ag_frame", None)
        if frame is None:
            if node is not None and not where:
                where.append(repr(node))
            break
        where.append(f"{frame.f_code.co_filename}:{frame.f_lineno} {frame.f_code.co_name}")
        node = getattr(node, "cr_await", None) or getattr(node, "ag_await", None)
    if node is not None and not hasattr(node, "cr_frame"):
        where.append(f"awaiting {type(node).__name__}")
    return " -> ".join(where)
