"""Questions across replicas, what only the shared board does: an answer taken by another
replica wakes the holder through NOTIFY (long before any window ends: no polling), a lost
wake-up still delivers the answer when the window ends, an answer racing the expiry is taken
exactly once, and the runs of a replica that died are RUN_NOT_FOUND. The windows and statuses
in one process run against this board too (tests/agent/test_questions.py)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from services.agent.config import HistorySettings, QuestionSettings, ReplicaSettings
from services.agent.history_postgres import PostgresRunHistory
from services.agent.questions import QuestionOutcome, QuestionWindows
from services.agent.questions_postgres import PostgresQuestionBoard
from services.agent.run import Deadline
from services.common.errors import FailedPrecondition, NotFound, Unavailable
from services.common.postgres import PostgresSettings
from tests.postgres_server import PostgresServer

DSN_ENV = "QUARRY_TEST_AGENT_QUESTIONS_DSN"
Replica = Callable[[str], Awaitable[tuple[PostgresQuestionBoard, PostgresRunHistory]]]


@pytest.fixture
async def replica(postgres_dsn: str, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Replica]:
    monkeypatch.setenv(DSN_ENV, postgres_dsn)
    opened: list[tuple[PostgresQuestionBoard, PostgresRunHistory]] = []

    async def open_replica(name: str) -> tuple[PostgresQuestionBoard, PostgresRunHistory]:
        history = PostgresRunHistory(
            HistorySettings(
                kind="postgres",
                postgres=PostgresSettings(dsn_env=DSN_ENV),
                replica=ReplicaSettings(name=name, heartbeat_interval_s=0.2, lease_s=1.0),
            )
        )
        history.open()
        assert await history.wait_ready(30)
        board = PostgresQuestionBoard(history, QuestionSettings())
        board.start()
        async with asyncio.timeout(30):
            await board.listening.wait()
        opened.append((board, history))
        return board, history

    yield open_replica
    for board, history in opened:
        await board.close()
        await history.close()


def _windows(acknowledge_s: float, answer_s: float = 60) -> QuestionWindows:
    return QuestionWindows(acknowledge_s, answer_s)


async def test_an_answer_taken_by_another_replica_wakes_the_holder_at_once(
    replica: Replica,
) -> None:
    (a, _), (b, _) = await replica("agent-a"), await replica("agent-b")
    async with a.open(owner=None, deadline=Deadline(120), windows=_windows(60)) as channel:
        question_id = await channel.ask("Which version?")
        waiting = asyncio.create_task(channel.wait(question_id))
        started = time.monotonic()
        await b.answer(channel.run_id, question_id, "3.12", caller=None)
        closed = await asyncio.wait_for(waiting, 10)
    assert (closed.outcome, closed.answer) == (QuestionOutcome.ANSWERED, "3.12")
    assert time.monotonic() - started < 5, "woken by NOTIFY, not by the 60 s window"


async def test_a_lost_wake_up_still_delivers_the_answer_when_the_window_ends(
    replica: Replica,
) -> None:
    (a, _), (b, _) = await replica("agent-a"), await replica("agent-b")
    await a.close()  # A no longer listens: B's NOTIFY reaches nobody
    async with a.open(owner=None, deadline=Deadline(120), windows=_windows(0.5)) as channel:
        question_id = await channel.ask("Which version?")
        waiting = asyncio.create_task(channel.wait(question_id))
        await b.answer(channel.run_id, question_id, "3.12", caller=None)
        closed = await asyncio.wait_for(waiting, 10)
    assert (closed.outcome, closed.answer) == (QuestionOutcome.ANSWERED, "3.12")


async def test_an_answer_racing_the_expiry_is_taken_exactly_once(replica: Replica) -> None:
    (a, _), (b, _) = await replica("agent-a"), await replica("agent-b")
    for attempt in range(12):
        window_s = 0.05 + 0.01 * attempt
        async with a.open(owner=None, deadline=Deadline(60), windows=_windows(window_s)) as channel:
            question_id = await channel.ask("Which version?")
            waiting = asyncio.create_task(channel.wait(question_id))
            await asyncio.sleep(window_s)  # answer right at the end of the acknowledge window
            refused: FailedPrecondition | None = None
            try:
                await b.answer(channel.run_id, question_id, "3.12", caller=None)
            except FailedPrecondition as error:
                refused = error
            closed = await asyncio.wait_for(waiting, 10)
        taken = refused is None
        assert refused is None or refused.reason == "QUESTION_CLOSED"
        assert (closed.outcome is QuestionOutcome.ANSWERED) is taken, (attempt, closed, taken)
        assert closed.answer == ("3.12" if taken else "")


async def test_the_question_runs_of_a_replica_that_died_are_not_found(replica: Replica) -> None:
    (a, a_history), (b, b_history) = await replica("agent-a"), await replica("agent-b")
    async with a.open(owner=None, deadline=Deadline(120), windows=_windows(60)) as channel:
        question_id = await channel.ask("Which version?")
        await a.close()
        await a_history.close()  # A's heartbeat stops while its run waits
        gone: NotFound | None = None
        async with asyncio.timeout(10):
            while gone is None:  # the lease passes on no event of ours
                await asyncio.sleep(0.2)
                await b_history.mark_interrupted()
                try:
                    await b.acknowledge(channel.run_id, question_id, caller=None)
                except NotFound as error:
                    gone = error
        assert gone.reason == "RUN_NOT_FOUND"


async def test_with_the_database_down_a_run_cannot_open_its_questions_and_is_told_unavailable(
    replica: Replica, postgres_server: PostgresServer
) -> None:
    (a, _) = await replica("agent-a")
    postgres_server.stop()
    try:
        with pytest.raises(Unavailable):
            async with a.open(owner=None, deadline=Deadline(30), windows=_windows(1)):
                pass
    finally:
        postgres_server.start()
    assert a.live_runs == 0
