"""Closing a component stops its background tasks within a bound, even one that will not stop."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

import pytest

from services.common.tasks import stop_tasks


async def test_tasks_that_end_when_cancelled_are_all_stopped_and_none_reported() -> None:
    sleeping = asyncio.create_task(asyncio.sleep(3600))
    failing_on_exit = asyncio.create_task(_raises_when_cancelled())
    await asyncio.sleep(0)
    assert await stop_tasks([sleeping, failing_on_exit], timeout_s=5, owner="test") == 0
    assert sleeping.cancelled()
    assert failing_on_exit.done()


async def test_a_task_whose_cancellation_was_dropped_once_is_cancelled_again_and_stops() -> None:
    """What Python 3.11's `asyncio.wait_for` does when its inner future completes as the cancel
    arrives (python/cpython#86296): the cancellation is lost and the loop goes on to sleep."""
    beats = 0

    async def heartbeat_loop() -> None:
        nonlocal beats
        while True:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                if beats == 0:  # dropped, as wait_for drops it
                    beats += 1
                    continue
                raise

    task = asyncio.create_task(heartbeat_loop())
    await asyncio.sleep(0)
    started = time.monotonic()
    assert await stop_tasks([task], timeout_s=30, owner="test") == 0
    assert task.cancelled()
    assert beats == 1
    assert time.monotonic() - started < 5.0, "stopped by the second cancellation, not the bound"


async def test_a_task_that_swallows_its_cancellation_does_not_hold_the_close_and_is_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    release = asyncio.Event()
    stubborn = asyncio.create_task(_ignores_cancellation(release), name="stubborn")
    await asyncio.sleep(0)
    started = time.monotonic()
    with caplog.at_level(logging.ERROR, logger="services.common.tasks"):
        assert await stop_tasks([stubborn], timeout_s=0.3, owner="run history") == 1
    assert time.monotonic() - started < 2.0
    record = next(r for r in caplog.records if "did not stop" in r.getMessage())
    assert record.owner == "run history"  # type: ignore[attr-defined]
    assert record.task == "stubborn"  # type: ignore[attr-defined]
    assert "test_stop_tasks.py" in record.at  # type: ignore[attr-defined]
    assert "_ignores_cancellation" in record.at  # type: ignore[attr-defined]
    assert "awaiting" in record.at  # type: ignore[attr-defined]
    release.set()
    await stubborn


async def _raises_when_cancelled() -> None:
    try:
        await asyncio.sleep(3600)
    except asyncio.CancelledError:
        raise RuntimeError("failed on the way out") from None


async def _ignores_cancellation(release: asyncio.Event) -> None:
    while not release.is_set():
        with contextlib.suppress(asyncio.CancelledError):
            await release.wait()
