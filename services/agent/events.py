"""What a run reports while it happens: started, thinking, one event per tool call (searching,
calculating, ...; a question and how it closed), then done or error."""

from __future__ import annotations

from dataclasses import dataclass, field

from services.agent.filters import FilterGroup
from services.agent.questions import QuestionOutcome
from services.agent.records import AnsweredBy
from services.agent.run import Mode, RunResult
from services.agent.search import Strategy


@dataclass(frozen=True)
class Started:
    run_id: str
    collection: str
    mode: Mode
    route: str
    step: int = field(default=0, compare=False)
    """The step (model turn, from 1) the event belongs to; 0 before the first (metadata: not
    compared, so an event equals the same event of another step)."""


@dataclass(frozen=True)
class Thinking:
    """The model's own text before its tool calls."""

    iteration: int
    text: str
    answered_by: AnsweredBy | None = None
    """The provider and model that wrote the text."""
    step: int = field(default=0, compare=False)
    """The step (model turn, from 1) the event belongs to; 0 before the first (metadata: not
    compared, so an event equals the same event of another step)."""


@dataclass(frozen=True)
class Searching:
    """A search the model asked for, as executed."""

    iteration: int
    primary: str
    variations: tuple[str, ...]
    strategy: Strategy
    filter_groups: tuple[FilterGroup, ...]
    """The model's filter; the search tool applied it within the caller's: (caller) AND (model)."""
    result_count: int
    total_count: int
    duration_ms: int
    step: int = field(default=0, compare=False)
    """The step (model turn, from 1) the event belongs to; 0 before the first (metadata: not
    compared, so an event equals the same event of another step)."""


@dataclass(frozen=True)
class Reading:
    """A `read` call, as executed."""

    iteration: int
    """Searches done before the call."""
    result_id: str
    """The result whose document was read."""
    document_id: str
    first_chunk: int
    chunks_shown: int
    """Chunks shown to the model (within the budget)."""
    chunk_count: int
    """Chunks of the document the caller may see."""
    duration_ms: int
    step: int = field(default=0, compare=False)
    """The step (model turn, from 1) the event belongs to; 0 before the first (metadata: not
    compared, so an event equals the same event of another step)."""


@dataclass(frozen=True)
class Counting:
    """A `count` call, as executed."""

    iteration: int
    """Searches done before the call."""
    filter_groups: tuple[FilterGroup, ...]
    """The model's filter (applied within the caller's)."""
    group_by: tuple[str, ...]
    document_count: int
    exact: bool
    duration_ms: int
    step: int = field(default=0, compare=False)
    """The step (model turn, from 1) the event belongs to; 0 before the first (metadata: not
    compared, so an event equals the same event of another step)."""


@dataclass(frozen=True)
class Calculating:
    """A `calculate` call, as evaluated (or refused)."""

    iteration: int
    """Searches done before the call."""
    expression: str
    result: str
    """The value shown to the model; empty when `error` is set."""
    error: str = ""
    step: int = field(default=0, compare=False)
    """The step (model turn, from 1) the event belongs to; 0 before the first (metadata: not
    compared, so an event equals the same event of another step)."""


@dataclass(frozen=True)
class Question:
    """The model asks the caller (`ask_user`); the run waits in two phases for the answer."""

    iteration: int
    """Searches done before the question."""
    run_id: str
    question_id: str
    text: str
    acknowledge_within_ms: int
    answer_within_ms: int
    """After an acknowledgement; 0: until the run's deadline."""


@dataclass(frozen=True)
class QuestionClosed:
    """A question ended and the run goes on; the model got the answer or "no answer"."""

    question_id: str
    outcome: QuestionOutcome
    answer: str
    waited_ms: int


@dataclass(frozen=True)
class Done:
    result: RunResult
    step: int = field(default=0, compare=False)
    """The step (model turn, from 1) the event belongs to; 0 before the first (metadata: not
    compared, so an event equals the same event of another step)."""


@dataclass(frozen=True)
class Failed:
    """The run stopped on an error; `code` is the gRPC status code name."""

    code: str
    message: str
    retryable: bool
    retry_after_s: float | None = None
    """When to retry, if the failing service said (its RetryInfo)."""


AgentEvent = (
    Started
    | Thinking
    | Searching
    | Reading
    | Counting
    | Calculating
    | Question
    | QuestionClosed
    | Done
    | Failed
)
