"""Questions to the caller: the opt-in `ask_user` tool's channel and its two-phase timeout
(seed 002 §5).

A streamed run that allows `ask_user` is registered here under its run id for as long as its
stream lives. When the model asks, the run posts a `PendingQuestion`, streams it to the caller and
waits in two phases:

    posted ──acknowledge or answer──▶ acknowledged ──answer──▶ ANSWERED
      │ acknowledge window over              │ answer window over
      ▼                                      ▼
    NOT_ACKNOWLEDGED                       NOT_ANSWERED

A caller who has shown the question to someone acknowledges it at once; a caller who never does
(a program that cannot answer) costs the run only the short acknowledge window. The run's deadline
bounds both waits. Answers and acknowledgements arrive on other RPCs (`AnswerQuestion`,
`AcknowledgeQuestion`) and reach the run through the `QuestionRegistry` of this process; everything
happens on one event loop, so a question changes state in one step and never twice.

The channel is two protocols, so a second implementation can carry questions across replicas:
`QuestionBoard` (the live runs that take questions: open a run's channel, acknowledge, answer) and
`QuestionChannel` (one run's side: ask, wait, expire). `QuestionRegistry` / `LocalQuestionChannel`
are the first implementation, in this process's memory.

Who may answer: the run's *owner*, the name of the API key that started it (auth on); with auth off
there is no identity and anyone who knows the run id (128 random bits, only ever sent on the run's
own stream) may answer.
"""

from __future__ import annotations

import asyncio
import secrets
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from enum import Enum
from typing import Protocol

from services.agent.config import QuestionSettings
from services.agent.run import Deadline
from services.common.errors import (
    FailedPrecondition,
    FieldViolation,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    shown,
)
from services.common.names import agent_id_problem


class QuestionOutcome(Enum):
    ANSWERED = "answered"
    NOT_ACKNOWLEDGED = "not_acknowledged"
    """Nobody acknowledged the question within the acknowledge window."""
    NOT_ANSWERED = "not_answered"
    """Acknowledged, but no answer within the answer window."""


@dataclass(frozen=True)
class QuestionWindows:
    """The two windows of a run's questions, in seconds."""

    acknowledge_s: float
    answer_s: float | None
    """None: until the run's deadline."""


@dataclass(frozen=True)
class ClosedQuestion:
    """How a question ended."""

    question_id: str
    outcome: QuestionOutcome
    answer: str = ""
    """Empty unless ANSWERED."""
    waited_ms: int = 0


class QuestionChannel(Protocol):
    """The questions of one live run, as the run sees them: it asks, waits, and a question it
    stops waiting for expires. Opened by `QuestionBoard.open` for the life of the run's stream.

    The state of a question is decided exactly once, by whichever comes first: its answer
    (`QuestionBoard.answer`) or its expiry (`expire`). An implementation makes that one atomic
    step (one event loop here; one conditional UPDATE in a shared database), so an answer racing
    the expiry either lands or is refused with QUESTION_CLOSED, never both."""

    @property
    def run_id(self) -> str: ...

    @property
    def max_questions(self) -> int:
        """The most questions the run may ask (`questions.max_per_run`)."""
        ...

    @property
    def asked(self) -> int:
        """Questions asked so far."""
        ...

    def acknowledge_window_s(self) -> float:
        """The acknowledge window, capped by the run's deadline."""
        ...

    def answer_window_s(self) -> float:
        """The answer window, capped by the run's deadline; `inf`: no limit at all."""
        ...

    async def ask(self, text: str) -> str:
        """Post a new open question; returns its id. Its acknowledge window starts now; post it
        before the caller is told, so an answer racing the event still lands. A storage failure
        raises `Unavailable` (the run ends: it cannot reach its caller)."""
        ...

    async def wait(self, question_id: str) -> ClosedQuestion:
        """Wait for the answer in two phases (acknowledge window, then answer window), then
        close the question (`expire`) whatever happened. Raises `DeadlineExceeded` when the run's
        deadline has passed; a cancelled wait expires the question too."""
        ...

    async def expire(self, question_id: str, outcome: QuestionOutcome) -> ClosedQuestion:
        """Close the question with `outcome` (NOT_ACKNOWLEDGED / NOT_ANSWERED) unless it is
        already closed; returns how it did close (ANSWERED, when its answer won the race)."""
        ...


class QuestionBoard(Protocol):
    """The live runs that take questions, reached by the `AnswerQuestion` and
    `AcknowledgeQuestion` RPCs. Errors (raised for the caller of those RPCs): `InvalidArgument`
    naming an empty id or a bad `text`; `NotFound` (`RUN_NOT_FOUND`, `QUESTION_NOT_FOUND`);
    `FailedPrecondition` (`QUESTION_CLOSED`, with the outcome); `PermissionDenied`
    (`NOT_THE_RUNS_CALLER`); `Unavailable` when the board's storage cannot be reached."""

    def default_windows(self) -> QuestionWindows:
        """The configured windows (a stream may ask for shorter ones)."""
        ...

    def open(
        self,
        *,
        owner: str | None,
        deadline: Deadline,
        windows: QuestionWindows | None = None,
        run_id: str = "",
    ) -> AbstractAsyncContextManager[QuestionChannel]:
        """Register a run (by `run_id`, a new id when empty) for the life of its stream;
        afterwards its id is unknown (NOT_FOUND) and its open questions are closed. `owner`: the
        API key name that started the run (None with auth off: anyone holding the id answers)."""
        ...

    async def acknowledge(self, run_id: str, question_id: str, *, caller: str | None) -> float:
        """The question is shown to someone; returns the answer window in seconds (`inf`: no
        limit). Idempotent on an open question."""
        ...

    async def answer(self, run_id: str, question_id: str, text: str, *, caller: str | None) -> None:
        """Answer an open question (which also acknowledges it); the waiting run gets it."""
        ...

    @property
    def live_runs(self) -> int:
        """Runs registered by this process."""
        ...

    async def until_idle(self) -> None:
        """Returns once no run of this process is registered."""
        ...


class PendingQuestion:
    """One question of a run, from posting until it is answered or expires."""

    def __init__(self, question_id: str, text: str) -> None:
        self.id = question_id
        self.text = text
        self.outcome: QuestionOutcome | None = None
        self.answer = ""
        self.acknowledged_signal = asyncio.Event()
        """Set by an acknowledgement or the answer."""
        self.answered_signal = asyncio.Event()

    @property
    def acknowledged(self) -> bool:
        return self.acknowledged_signal.is_set()

    def close(self, outcome: QuestionOutcome) -> None:
        if self.outcome is None:
            self.outcome = outcome


class LocalQuestionChannel:
    """A `QuestionChannel` in this process's memory (see `QuestionRegistry`)."""

    def __init__(
        self,
        run_id: str,
        owner: str | None,
        windows: QuestionWindows,
        deadline: Deadline,
        *,
        max_questions: int,
    ) -> None:
        self._run_id = run_id
        self.owner = owner
        """The API key name that started the run; None with auth off."""
        self.windows = windows
        self.deadline = deadline
        self._max_questions = max_questions
        self.questions: dict[str, PendingQuestion] = {}

    @property
    def run_id(self) -> str:
        return self._run_id

    @property
    def max_questions(self) -> int:
        return self._max_questions

    @property
    def asked(self) -> int:
        return len(self.questions)

    async def ask(self, text: str) -> str:
        question = PendingQuestion(secrets.token_hex(8), text)
        self.questions[question.id] = question
        return question.id

    def acknowledge_window_s(self) -> float:
        """The acknowledge window, capped by the run's deadline."""
        return _capped(self.windows.acknowledge_s, self.deadline)

    def answer_window_s(self) -> float:
        """The answer window, capped by the run's deadline; `inf`: no limit at all."""
        return _capped(self.windows.answer_s, self.deadline)

    async def wait(self, question_id: str) -> ClosedQuestion:
        question = self.questions[question_id]
        started = time.monotonic()
        try:
            if await _set_within(question.acknowledged_signal, self.acknowledge_window_s()):
                await _set_within(question.answered_signal, self.answer_window_s())
        finally:
            unanswered = (
                QuestionOutcome.NOT_ANSWERED
                if question.acknowledged
                else QuestionOutcome.NOT_ACKNOWLEDGED
            )
            closed = await self.expire(question_id, unanswered)
        waited_ms = int((time.monotonic() - started) * 1000)
        return ClosedQuestion(closed.question_id, closed.outcome, closed.answer, waited_ms)

    async def expire(self, question_id: str, outcome: QuestionOutcome) -> ClosedQuestion:
        question = self.questions[question_id]
        question.close(outcome)  # a no-op once closed: the first decision stands
        assert question.outcome is not None
        return ClosedQuestion(question.id, question.outcome, question.answer)

    def acknowledge(self, question_id: str) -> float:
        """Mark the question seen; the answer window (seconds, `inf`: no limit) now applies."""
        question = self._open(question_id)
        question.acknowledged_signal.set()
        return self.answer_window_s()

    def answer(self, question_id: str, text: str) -> None:
        question = self._open(question_id)
        question.answer = text
        question.close(QuestionOutcome.ANSWERED)
        question.acknowledged_signal.set()
        question.answered_signal.set()

    def _open(self, question_id: str) -> PendingQuestion:
        question = self.questions.get(question_id)
        if question is None:
            raise NotFound(
                f"run {self.run_id} asked no question {shown(question_id)}",
                reason="QUESTION_NOT_FOUND",
                metadata={"run_id": self.run_id, "question_id": question_id},
            )
        if question.outcome is not None:
            raise FailedPrecondition(
                f"question {question_id} is closed ({_CLOSED[question.outcome]}); "
                "the run went on without this answer"
                if question.outcome is not QuestionOutcome.ANSWERED
                else f"question {question_id} is already answered",
                reason="QUESTION_CLOSED",
                metadata={"question_id": question_id, "outcome": question.outcome.value},
            )
        return question


_CLOSED = {
    QuestionOutcome.ANSWERED: "answered",
    QuestionOutcome.NOT_ACKNOWLEDGED: "not acknowledged in time",
    QuestionOutcome.NOT_ANSWERED: "not answered in time",
}


class QuestionRegistry:
    """A `QuestionBoard` in this process's memory: the live runs of this agent process that may
    ask questions, by run id."""

    def __init__(self, settings: QuestionSettings | None = None) -> None:
        self.settings = settings or QuestionSettings()
        self._runs: dict[str, LocalQuestionChannel] = {}
        self._idle = asyncio.Event()
        self._idle.set()

    @asynccontextmanager
    async def open(
        self,
        *,
        owner: str | None,
        deadline: Deadline,
        windows: QuestionWindows | None = None,
        run_id: str = "",
    ) -> AsyncIterator[LocalQuestionChannel]:
        """Register a run for the life of its stream; afterwards its id is unknown here."""
        channel = LocalQuestionChannel(
            run_id or uuid.uuid4().hex,
            owner,
            windows or self.default_windows(),
            deadline,
            max_questions=self.settings.max_per_run,
        )
        self._runs[channel.run_id] = channel
        self._idle.clear()
        try:
            yield channel
        finally:
            del self._runs[channel.run_id]
            if not self._runs:
                self._idle.set()

    def default_windows(self) -> QuestionWindows:
        answer_s = self.settings.answer_timeout_s
        return QuestionWindows(self.settings.acknowledge_timeout_s, answer_s or None)

    @property
    def live_runs(self) -> int:
        return len(self._runs)

    async def until_idle(self) -> None:
        """Returns once no run is registered (e.g. after a cancelled stream let go)."""
        await self._idle.wait()

    async def acknowledge(self, run_id: str, question_id: str, *, caller: str | None) -> float:
        """The question is shown to someone; returns the answer window (`inf`: no limit)."""
        require_ids(run_id, question_id)
        return self._run(run_id, caller).acknowledge(question_id)

    async def answer(self, run_id: str, question_id: str, text: str, *, caller: str | None) -> None:
        require_answer(run_id, question_id, text, max_chars=self.settings.max_answer_chars)
        self._run(run_id, caller).answer(question_id, text)

    def _run(self, run_id: str, caller: str | None) -> LocalQuestionChannel:
        channel = self._runs.get(run_id)
        if channel is None:
            raise NotFound(
                f"no live run {shown(run_id)} that takes questions on this agent replica (it "
                "ended, did not allow ask_user, or runs on another replica: answer on the channel "
                "that carries the run's stream)",
                reason="RUN_NOT_FOUND",
                metadata={"run_id": run_id},
            )
        if channel.owner is not None and caller != channel.owner:
            raise PermissionDenied(
                f"run {run_id} was started by another API key; only its caller may answer",
                reason="NOT_THE_RUNS_CALLER",
                metadata={"run_id": run_id},
            )
        return channel


def _id_violations(run_id: str, question_id: str) -> list[FieldViolation]:
    """Each id that breaks the one id rule (`services.common.names.agent_id_problem`)."""
    checked = (
        (name, agent_id_problem(value))
        for name, value in (("run_id", run_id), ("question_id", question_id))
    )
    return [FieldViolation(name, problem) for name, problem in checked if problem is not None]


def require_ids(run_id: str, question_id: str) -> None:
    """INVALID_ARGUMENT naming each id that breaks the id rule (every `QuestionBoard` checks
    the same)."""
    violations = _id_violations(run_id, question_id)
    if violations:
        raise InvalidArgument.for_violations(violations)


def require_answer(run_id: str, question_id: str, text: str, *, max_chars: int) -> None:
    """INVALID_ARGUMENT naming each id that breaks the id rule and an empty or too long
    `text`."""
    violations = _id_violations(run_id, question_id)
    if not text.strip():
        violations.append(FieldViolation("text", "must not be empty"))
    elif len(text) > max_chars:
        violations.append(
            FieldViolation("text", f"is {len(text)} characters; max_answer_chars is {max_chars}")
        )
    if violations:
        raise InvalidArgument.for_violations(violations)


def _capped(window_s: float | None, deadline: Deadline) -> float:
    """`window_s` or the time left before the deadline, whichever is shorter; `inf` for none."""
    remaining = deadline.remaining()
    limits = [s for s in (window_s, remaining) if s is not None]
    return min(limits) if limits else float("inf")


async def _set_within(event: asyncio.Event, seconds: float) -> bool:
    """Whether `event` is set within `seconds` (`inf`: waits as long as it takes)."""
    if event.is_set():
        return True
    try:
        async with asyncio.timeout(None if seconds == float("inf") else seconds):
            await event.wait()
    except TimeoutError:
        return event.is_set()
    return True
