"""A cancelled or expired run stops at once: no further model or search calls."""

from __future__ import annotations

import asyncio

import pytest

from services.agent.loop import AgentLoop
from services.agent.run import Deadline, Mode, RunRequest
from services.agent.testing import ScriptedModel, answer_call, search_call, turn
from services.common.errors import DeadlineExceeded
from tests.agent.conftest import collect
from tests.agent.fake_search import FakeSearch


async def test_cancelling_during_a_search_makes_no_further_calls(search: FakeSearch) -> None:
    search.gate = asyncio.Event()
    model = ScriptedModel([turn("", search_call("tempfile")), turn("", answer_call("late"))])
    loop = AgentLoop(model, search)
    request = RunRequest(collection="python-docs", query="q", mode=Mode.THINKING)
    task = asyncio.create_task(collect(loop.stream(request)))
    await search.called.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert search.cancelled.is_set()
    assert len(model.requests) == 1
    assert len(search.requests) == 1


async def test_cancelling_during_a_model_call_makes_no_further_calls(search: FakeSearch) -> None:
    model = ScriptedModel([turn("", search_call("tempfile"))], gate=asyncio.Event())
    loop = AgentLoop(model, search)
    task = asyncio.create_task(
        collect(loop.stream(RunRequest(collection="python-docs", query="q")))
    )
    await model.called.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert model.cancelled.is_set()
    assert (len(model.requests), len(search.requests)) == (1, 0)


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


async def test_remaining_time_is_passed_downstream_and_expiry_stops_the_run(
    search: FakeSearch,
) -> None:
    clock = _Clock()
    deadline = Deadline(30.0, clock=clock)

    class _SlowModel(ScriptedModel):
        async def generate(self, request, *, remaining_s):  # type: ignore[no-untyped-def]
            response = await super().generate(request, remaining_s=remaining_s)
            clock.now += 31.0
            return response

    model = _SlowModel([turn("", search_call("tempfile")), turn("", answer_call("x"))])
    loop = AgentLoop(model, search)
    request = RunRequest(collection="python-docs", query="q", mode=Mode.THINKING)
    with pytest.raises(DeadlineExceeded):
        await collect(loop.stream(request, deadline=deadline))
    assert model.remaining_s == [pytest.approx(30.0)]
    assert search.requests == []
