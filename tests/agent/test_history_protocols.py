"""The contracts of the run history (`RunHistory`) and the questions channel (`QuestionBoard`,
`QuestionChannel`) as their first implementations keep them: a storage failure never fails a run
and a read that cannot be answered is UNAVAILABLE; a question is closed exactly once."""

from __future__ import annotations

import logging
import sqlite3
import time
from pathlib import Path

import pytest
from quarry.agent.v1 import agent_pb2

from services.agent.config import HistorySettings, QuestionSettings
from services.agent.history import RunStore
from services.agent.questions import (
    QuestionBoard,
    QuestionChannel,
    QuestionOutcome,
    QuestionRegistry,
    QuestionWindows,
)
from services.agent.run import Deadline
from services.agent.run_history import RunHistory, RunQuery
from services.common.errors import FailedPrecondition, NotFound, Unavailable


def _record(run_id: str) -> agent_pb2.RunRecord:
    record = agent_pb2.RunRecord(
        run_id=run_id,
        collection="docs",
        status=agent_pb2.RUN_STATUS_RUNNING,
        request=agent_pb2.RunRequest(query="q", collection="docs"),
    )
    record.started_at.FromNanoseconds(time.time_ns())
    return record


def _break(path: Path) -> None:
    """Storage gone bad under the store: its tables vanish."""
    db = sqlite3.connect(path)
    db.executescript("DROP TABLE runs; DROP TABLE run_steps; DROP TABLE run_events;")
    db.close()


async def test_a_final_write_that_fails_is_logged_and_does_not_fail_the_run(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "runs.sqlite3"
    store: RunHistory = RunStore(HistorySettings(path=path))
    store.open()
    record = _record("r1")
    store.begin(record)
    _break(path)
    record.status = agent_pb2.RUN_STATUS_COMPLETED
    with caplog.at_level(logging.ERROR):
        await store.finish(record, 0, [agent_pb2.StreamRunResponse()], [])  # does not raise
    assert "run history write failed" in caplog.text
    await store.close()


async def test_a_history_that_cannot_be_read_answers_unavailable(tmp_path: Path) -> None:
    path = tmp_path / "runs.sqlite3"
    store: RunHistory = RunStore(HistorySettings(path=path))
    store.open()
    _break(path)
    with pytest.raises(Unavailable, match="run history cannot be read"):
        await store.get("r1")
    with pytest.raises(Unavailable):
        await store.list_runs(RunQuery())
    with pytest.raises(Unavailable):
        await store.collections()
    await store.close()


async def test_mark_interrupted_marks_only_runs_still_running(tmp_path: Path) -> None:
    store: RunHistory = RunStore(HistorySettings(path=tmp_path / "runs.sqlite3"))
    store.open()
    store.begin(_record("running"))
    done = _record("done")
    store.begin(done)
    done.status = agent_pb2.RUN_STATUS_COMPLETED
    await store.finish(done, 0, [], [])
    assert await store.mark_interrupted() == 1
    running = await store.get("running")
    finished = await store.get("done")
    assert running is not None
    assert running.status == agent_pb2.RUN_STATUS_INTERRUPTED
    assert finished is not None
    assert finished.status == agent_pb2.RUN_STATUS_COMPLETED
    await store.close()


def _board() -> QuestionBoard:
    return QuestionRegistry(QuestionSettings())


async def test_an_answer_after_the_question_expired_is_refused_as_closed() -> None:
    board = _board()
    windows = QuestionWindows(acknowledge_s=0.01, answer_s=None)
    async with board.open(owner=None, deadline=Deadline(None), windows=windows) as channel:
        question_id = await channel.ask("which version?")
        closed = await channel.wait(question_id)
        assert closed.outcome is QuestionOutcome.NOT_ACKNOWLEDGED
        with pytest.raises(FailedPrecondition) as refused:
            await board.answer(channel.run_id, question_id, "3.12", caller=None)
        assert refused.value.reason == "QUESTION_CLOSED"


async def test_an_expiry_after_the_answer_keeps_the_answer() -> None:
    board = _board()
    async with board.open(owner=None, deadline=Deadline(None)) as channel:
        question_id = await channel.ask("which version?")
        await board.answer(channel.run_id, question_id, "3.12", caller=None)
        closed = await channel.expire(question_id, QuestionOutcome.NOT_ANSWERED)
        assert (closed.outcome, closed.answer) == (QuestionOutcome.ANSWERED, "3.12")
        waited = await channel.wait(question_id)
        assert (waited.outcome, waited.answer) == (QuestionOutcome.ANSWERED, "3.12")


async def test_a_channel_counts_its_questions_and_is_unknown_once_its_run_ends() -> None:
    board = _board()
    async with board.open(owner="alice", deadline=Deadline(None), run_id="run-1") as channel:
        assert isinstance(channel.max_questions, int)
        typed: QuestionChannel = channel
        await typed.ask("one?")
        second = await typed.ask("two?")
        assert typed.asked == 2
        assert board.live_runs == 1
    await board.until_idle()
    assert board.live_runs == 0
    with pytest.raises(NotFound) as unknown:
        await board.answer("run-1", second, "late", caller="alice")
    assert unknown.value.reason == "RUN_NOT_FOUND"
