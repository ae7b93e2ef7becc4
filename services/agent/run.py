"""What goes into a run and what comes out of it, in domain terms."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum

from services.agent.filters import CallerFilter
from services.agent.records import AnsweredBy, StepRecord
from services.agent.search import SearchHit
from services.common.errors import DeadlineExceeded

MAX_LIMIT = 200
"""The most results a run returns (`RunRequest.limit`)."""


@dataclass(frozen=True, kw_only=True)
class StepEvent:
    """The base of every event a run reports (the loop's and each tool's): the step it belongs
    to, a keyword field so each event's own fields keep their positions."""

    step: int = field(default=0, compare=False)
    """The step (model turn, from 1) the event belongs to; 0 before the first (metadata: not
    compared, so an event equals the same event of another step)."""


class Mode(Enum):
    FAST = "fast"
    """One search, then the answer."""
    THINKING = "thinking"
    """The model decides how often to search, up to a safety cap."""


class StopReason(Enum):
    ANSWERED = "answered"
    FORCED_ANSWER = "forced_answer"
    BUDGET_EXHAUSTED = "budget_exhausted"
    FALLBACK_ANSWER = "fallback_answer"


@dataclass(frozen=True)
class Turn:
    """An earlier question and its answer in the same conversation."""

    question: str
    answer: str


@dataclass(frozen=True)
class RunRequest:
    collection: str
    query: str
    caller_filter: CallerFilter = field(default_factory=CallerFilter)
    """The caller's filter, as sent. The agent forwards it to every search and never reads it:
    the search tool validates it and applies it as (caller) AND (model)."""
    mode: Mode = Mode.FAST
    limit: int = 10
    """Results returned, 1..`MAX_LIMIT`."""
    history: tuple[Turn, ...] = ()
    max_iterations: int = 0
    """0 means the mode's cap; never above it."""
    max_tokens: int = 0
    """Total input + output tokens across model calls; 0 means unlimited."""
    route: str = ""
    """LLM gateway route; empty means the agent's configured route."""
    allowed_tools: frozenset[str] = frozenset()
    """Tools the run may use besides `submit_answer`; empty means all."""
    temperature: float | None = None
    """Sampling temperature for providers that support it; None: the provider's default."""
    seed: int | None = None
    """Sampling seed for providers that support it; None: none."""


@dataclass(frozen=True)
class Citation:
    result_id: str
    title: str = ""
    url: str = ""
    web: bool = False
    """The cited result is a web page (`web_search`), not a chunk of the collection."""


@dataclass(frozen=True)
class FinalAnswer:
    text: str
    citations: tuple[Citation, ...] = ()
    confidence: float | None = None
    """The model's own estimate (0-1) that the results fully answer the question."""
    unanswered: tuple[str, ...] = ()
    """Parts of the question the model says the results do not answer."""


@dataclass
class RunUsage:
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    model_calls: int = 0
    searches: int = 0
    tool_calls: dict[str, int] = field(default_factory=dict)
    """Calls of each tool that ran (refused or invalid calls excluded)."""
    cost_usd: float | None = None
    """What the model calls cost in US dollars; None when the gateway priced none of them."""


@dataclass(frozen=True)
class RunResult:
    run_id: str
    answer: FinalAnswer
    results: tuple[SearchHit, ...]
    """Cited results first, then the others seen (best score first), up to the limit."""
    stop_reason: StopReason
    usage: RunUsage = field(default_factory=RunUsage)
    iterations: int = 0
    """Search iterations performed."""
    answered_by: AnsweredBy | None = None
    """The last model turn's provider and model, with the reasons of every fallback of the run;
    None when no model call was made."""
    steps: tuple[StepRecord, ...] = ()
    """One record per model turn, in order."""
    duration_ms: int = 0
    """Wall time of the run."""
    context_window_tokens: int = 0
    """The window the run planned with."""


class Deadline:
    """When the caller stops waiting; every downstream call gets the time that is left."""

    def __init__(
        self, seconds: float | None, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._clock = clock
        self._expires_at = None if seconds is None else clock() + seconds

    def remaining(self) -> float | None:
        """Seconds left (raises once none are), or None without a deadline."""
        if self._expires_at is None:
            return None
        left = self._expires_at - self._clock()
        if left <= 0:
            raise DeadlineExceeded("the caller's deadline expired")
        return left
