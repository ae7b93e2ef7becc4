"""Questions to the caller across replicas: the second `QuestionBoard` (questions.py), over the
PostgreSQL the run history shares (`history.kind: postgres`).

A run that allows `ask_user` registers in `agent_question_runs` (its replica, owner, answer window
and deadline) for the life of its stream; each question is a row of `agent_questions`. The
`AnswerQuestion` / `AcknowledgeQuestion` RPCs may reach ANY replica:

    caller ──AnswerQuestion──▶ replica B: one transaction — check run and owner, UPDATE the
                                question WHERE it is still open, NOTIFY the run's replica
    replica A (holds the stream) ◀── LISTEN on its own channel ── wakes the waiting run

* **Exactly once.** A question is closed by ONE conditional UPDATE (`WHERE outcome IS NULL`):
  the answer, or the holder's expiry at the end of a window, whichever commits first; the other
  finds it closed (QUESTION_CLOSED for a late answer, ANSWERED for an expiry that lost).
* **No polling.** The holder waits on asyncio events set by notifications (one LISTEN connection
  per replica). A notification can be lost (the listening connection broke): at the end of each
  window the holder asks the database before it closes the question, and after the listener
  reconnects it re-reads every open question of its runs, so a lost wake-up costs time, never
  the answer.
* **The same windows and statuses** as in one process: acknowledge window, then answer window,
  both capped by the run's deadline; RUN_NOT_FOUND (ended, never allowed `ask_user`, or its
  replica died), QUESTION_NOT_FOUND, QUESTION_CLOSED, NOT_THE_RUNS_CALLER.
* A replica found gone by the heartbeat sweep (history_postgres.py) has its question runs
  removed: an answer for them is RUN_NOT_FOUND.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import secrets
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import psycopg
from psycopg import AsyncConnection

from services.agent.config import QuestionSettings
from services.agent.history_postgres import PostgresRunHistory
from services.agent.questions import (
    ClosedQuestion,
    QuestionOutcome,
    QuestionWindows,
    require_answer,
    require_ids,
)
from services.agent.run import Deadline
from services.common.errors import FailedPrecondition, NotFound, PermissionDenied
from services.common.postgres import resolve_dsn, transaction
from services.common.tasks import stop_tasks

log = logging.getLogger(__name__)

_CLOSED_TEXT = {
    QuestionOutcome.ANSWERED.value: "answered",
    QuestionOutcome.NOT_ACKNOWLEDGED.value: "not acknowledged in time",
    QuestionOutcome.NOT_ANSWERED.value: "not answered in time",
}


def notify_channel(replica: str) -> str:
    """The LISTEN channel of one replica (an identifier whatever the replica's name)."""
    return "quarry_agent_questions_" + hashlib.sha256(replica.encode()).hexdigest()[:16]


class _Signals:
    def __init__(self) -> None:
        self.acknowledged = asyncio.Event()
        self.answered = asyncio.Event()


class PostgresQuestionChannel:
    """One live run's questions (a `QuestionChannel`), held by the replica that streams it."""

    def __init__(
        self,
        board: PostgresQuestionBoard,
        run_id: str,
        windows: QuestionWindows,
        deadline: Deadline,
    ) -> None:
        self._board = board
        self._run_id = run_id
        self.windows = windows
        self.deadline = deadline
        self.signals: dict[str, _Signals] = {}

    @property
    def run_id(self) -> str:
        return self._run_id

    @property
    def max_questions(self) -> int:
        return self._board.settings.max_per_run

    @property
    def asked(self) -> int:
        return len(self.signals)

    def acknowledge_window_s(self) -> float:
        return _capped(self.windows.acknowledge_s, self.deadline)

    def answer_window_s(self) -> float:
        return _capped(self.windows.answer_s, self.deadline)

    async def ask(self, text: str) -> str:
        question_id = secrets.token_hex(8)
        self.signals[question_id] = _Signals()
        async with self._board.transaction() as conn:
            await conn.execute(
                "INSERT INTO agent_questions (run_id, question_id, text) VALUES (%s, %s, %s)",
                (self._run_id, question_id, text),
            )
        return question_id

    async def wait(self, question_id: str) -> ClosedQuestion:
        signals = self.signals[question_id]
        started = time.monotonic()
        closed: ClosedQuestion | None = None
        try:
            if not await _set_within(signals.acknowledged, self.acknowledge_window_s()):
                closed = await self._close_unacknowledged(question_id)
            if closed is None:
                await _set_within(signals.answered, self.answer_window_s())
        finally:
            if closed is None:
                closed = await self.expire(question_id, QuestionOutcome.NOT_ANSWERED)
        waited_ms = int((time.monotonic() - started) * 1000)
        return ClosedQuestion(closed.question_id, closed.outcome, closed.answer, waited_ms)

    async def _close_unacknowledged(self, question_id: str) -> ClosedQuestion | None:
        """Close as NOT_ACKNOWLEDGED unless it was acknowledged (a wake-up may have been lost):
        None when the answer window applies now."""
        async with self._board.transaction() as conn:
            cursor = await conn.execute(
                "UPDATE agent_questions SET outcome = %s WHERE run_id = %s AND question_id = %s"
                " AND outcome IS NULL AND NOT acknowledged",
                (QuestionOutcome.NOT_ACKNOWLEDGED.value, self._run_id, question_id),
            )
            if cursor.rowcount:
                return ClosedQuestion(question_id, QuestionOutcome.NOT_ACKNOWLEDGED)
            row = await _question(conn, self._run_id, question_id)
        if row is not None and row[0] is not None:
            return ClosedQuestion(question_id, QuestionOutcome(row[0]), row[1])
        self.signals[question_id].acknowledged.set()
        return None

    async def expire(self, question_id: str, outcome: QuestionOutcome) -> ClosedQuestion:
        try:
            async with self._board.transaction() as conn:
                await conn.execute(
                    "UPDATE agent_questions SET outcome = %s WHERE run_id = %s"
                    " AND question_id = %s AND outcome IS NULL",
                    (outcome.value, self._run_id, question_id),
                )
                row = await _question(conn, self._run_id, question_id)
        except Exception:  # the database went away: the run goes on without the answer
            log.warning("could not close a question", extra={"run_id": self._run_id})
            return ClosedQuestion(question_id, outcome)
        if row is None or row[0] is None:
            return ClosedQuestion(question_id, outcome)
        return ClosedQuestion(question_id, QuestionOutcome(row[0]), row[1])

    async def resync(self) -> None:
        """Set the signals from the database (after the listener reconnected)."""
        async with self._board.transaction() as conn:
            cursor = await conn.execute(
                "SELECT question_id, acknowledged, outcome FROM agent_questions WHERE run_id = %s",
                (self._run_id,),
            )
            rows = await cursor.fetchall()
        for question_id, acknowledged, outcome in rows:
            self.wake(str(question_id), answered=outcome == "answered", acknowledged=acknowledged)

    def wake(self, question_id: str, *, answered: bool, acknowledged: bool = True) -> None:
        signals = self.signals.get(question_id)
        if signals is None:
            return
        if acknowledged or answered:
            signals.acknowledged.set()
        if answered:
            signals.answered.set()


class PostgresQuestionBoard:
    """The live runs of every replica that take questions (a `QuestionBoard`)."""

    def __init__(self, history: PostgresRunHistory, settings: QuestionSettings) -> None:
        self.settings = settings
        self._history = history
        self.replica = history.replica
        self._local: dict[str, PostgresQuestionChannel] = {}
        self._idle = asyncio.Event()
        self._idle.set()
        self._listener: asyncio.Task[None] | None = None
        self._closing = False
        self.listening = asyncio.Event()
        """Set while this replica's LISTEN connection is up."""

    def start(self) -> None:
        """Start listening for this replica's wake-ups (inside the running loop)."""
        if self._listener is None:
            self._listener = asyncio.get_running_loop().create_task(
                self._listen(), name="question wake-ups"
            )

    async def close(self) -> None:
        self._closing = True
        if self._listener is not None:
            await stop_tasks([self._listener], timeout_s=5.0, owner="questions")
            self._listener = None

    def transaction(self) -> contextlib.AbstractAsyncContextManager[AsyncConnection[Any]]:
        return transaction(self._history.pool, self._history.settings.postgres)

    def default_windows(self) -> QuestionWindows:
        answer_s = self.settings.answer_timeout_s
        return QuestionWindows(self.settings.acknowledge_timeout_s, answer_s or None)

    @property
    def live_runs(self) -> int:
        return len(self._local)

    async def until_idle(self) -> None:
        await self._idle.wait()

    @contextlib.asynccontextmanager
    async def open(
        self,
        *,
        owner: str | None,
        deadline: Deadline,
        windows: QuestionWindows | None = None,
        run_id: str = "",
    ) -> AsyncIterator[PostgresQuestionChannel]:
        windows = windows or self.default_windows()
        channel = PostgresQuestionChannel(self, run_id or uuid.uuid4().hex, windows, deadline)
        remaining = deadline.remaining()
        async with self.transaction() as conn:
            await conn.execute(
                "INSERT INTO agent_question_runs (run_id, replica, owner, answer_window_s,"
                " deadline_at) VALUES (%s, %s, %s, %s, %s)",
                (
                    channel.run_id,
                    self.replica,
                    owner,
                    windows.answer_s,
                    None if remaining is None else time.time() + remaining,
                ),
            )
        self._local[channel.run_id] = channel
        self._idle.clear()
        try:
            yield channel
        finally:
            try:  # forgotten before idle: a caller who waited for idle finds the run gone
                await self._forget(channel.run_id)
            finally:
                del self._local[channel.run_id]
                if not self._local:
                    self._idle.set()

    async def _forget(self, run_id: str) -> None:
        try:
            async with self.transaction() as conn:
                await conn.execute("DELETE FROM agent_questions WHERE run_id = %s", (run_id,))
                await conn.execute("DELETE FROM agent_question_runs WHERE run_id = %s", (run_id,))
        except Exception:  # the heartbeat sweep removes it once this replica is gone
            log.warning("could not forget a run's questions", extra={"run_id": run_id})

    async def acknowledge(self, run_id: str, question_id: str, *, caller: str | None) -> float:
        require_ids(run_id, question_id)
        async with self.transaction() as conn:
            replica, window_s, deadline_at = await self._run(conn, run_id, caller)
            cursor = await conn.execute(
                "UPDATE agent_questions SET acknowledged = true WHERE run_id = %s"
                " AND question_id = %s AND outcome IS NULL",
                (run_id, question_id),
            )
            if not cursor.rowcount:
                await _refuse(conn, run_id, question_id)
            await conn.execute(
                "SELECT pg_notify(%s, %s)", (notify_channel(replica), f"ack {run_id} {question_id}")
            )
        left_s = None if deadline_at is None else deadline_at - time.time()
        limits = [max(0.0, s) for s in (window_s, left_s) if s is not None]
        return min(limits) if limits else float("inf")

    async def answer(self, run_id: str, question_id: str, text: str, *, caller: str | None) -> None:
        require_answer(run_id, question_id, text, max_chars=self.settings.max_answer_chars)
        async with self.transaction() as conn:
            replica, _, _ = await self._run(conn, run_id, caller)
            cursor = await conn.execute(
                "UPDATE agent_questions SET outcome = %s, answer = %s, acknowledged = true"
                " WHERE run_id = %s AND question_id = %s AND outcome IS NULL",
                (QuestionOutcome.ANSWERED.value, text, run_id, question_id),
            )
            if not cursor.rowcount:
                await _refuse(conn, run_id, question_id)
            await conn.execute(
                "SELECT pg_notify(%s, %s)",
                (notify_channel(replica), f"answer {run_id} {question_id}"),
            )

    async def _run(
        self, conn: AsyncConnection[Any], run_id: str, caller: str | None
    ) -> tuple[str, float | None, float | None]:
        cursor = await conn.execute(
            "SELECT replica, owner, answer_window_s, deadline_at FROM agent_question_runs"
            " WHERE run_id = %s",
            (run_id,),
        )
        row = await cursor.fetchone()
        if row is None:
            raise NotFound(
                f"no live run {run_id!r} that takes questions (it ended, did not allow ask_user,"
                " or the replica running it stopped)",
                reason="RUN_NOT_FOUND",
                metadata={"run_id": run_id},
            )
        if row[1] is not None and caller != row[1]:
            raise PermissionDenied(
                f"run {run_id} was started by another API key; only its caller may answer",
                reason="NOT_THE_RUNS_CALLER",
                metadata={"run_id": run_id},
            )
        return str(row[0]), row[2], row[3]

    async def _listen(self) -> None:
        """LISTEN on this replica's channel for ever, reconnecting (then re-reading the open
        questions, whose wake-ups may have been lost meanwhile)."""
        channel = notify_channel(self.replica)
        retry_s = self._history.settings.replica.heartbeat_interval_s
        while not self._closing:  # the flag, not only the cancellation (services/common/tasks.py)
            try:
                dsn = resolve_dsn(self._history.settings.postgres)
                async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
                    await conn.execute(f'LISTEN "{channel}"'.encode())
                    self.listening.set()
                    for held in list(self._local.values()):
                        await held.resync()
                    async for notice in conn.notifies():
                        self._dispatch(notice.payload)
            except asyncio.CancelledError:
                raise
            except Exception as error:
                log.warning("question wake-ups lost; listening again", extra={"error": str(error)})
            self.listening.clear()
            await asyncio.sleep(retry_s)

    def _dispatch(self, payload: str) -> None:
        kind, _, rest = payload.partition(" ")
        run_id, _, question_id = rest.partition(" ")
        held = self._local.get(run_id)
        if held is not None:
            held.wake(question_id, answered=kind == "answer")


async def _question(
    conn: AsyncConnection[Any], run_id: str, question_id: str
) -> tuple[str | None, str] | None:
    cursor = await conn.execute(
        "SELECT outcome, answer FROM agent_questions WHERE run_id = %s AND question_id = %s",
        (run_id, question_id),
    )
    row = await cursor.fetchone()
    return None if row is None else (row[0], str(row[1]))


async def _refuse(conn: AsyncConnection[Any], run_id: str, question_id: str) -> None:
    """The question is unknown or closed: say which."""
    row = await _question(conn, run_id, question_id)
    if row is None:
        raise NotFound(
            f"run {run_id} asked no question {question_id!r}",
            reason="QUESTION_NOT_FOUND",
            metadata={"run_id": run_id, "question_id": question_id},
        )
    outcome = str(row[0])
    raise FailedPrecondition(
        f"question {question_id} is already answered"
        if outcome == QuestionOutcome.ANSWERED.value
        else f"question {question_id} is closed ({_CLOSED_TEXT[outcome]}); "
        "the run went on without this answer",
        reason="QUESTION_CLOSED",
        metadata={"question_id": question_id, "outcome": outcome},
    )


def _capped(window_s: float | None, deadline: Deadline) -> float:
    remaining = deadline.remaining()
    limits = [s for s in (window_s, remaining) if s is not None]
    return min(limits) if limits else float("inf")


async def _set_within(event: asyncio.Event, seconds: float) -> bool:
    if event.is_set():
        return True
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(None if seconds == float("inf") else seconds):
            await event.wait()
    return event.is_set()
