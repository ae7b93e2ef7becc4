"""What a run reports while it happens: started, thinking, one event per tool call (each tool's
own, a `ToolEvent` defined in its module: searching, calculating, ...), then done or error."""

from __future__ import annotations

from dataclasses import dataclass, field

from services.agent.records import AnsweredBy
from services.agent.run import Mode, RunResult
from services.agent.tools.base import ToolEvent


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


AgentEvent = Started | Thinking | ToolEvent | Done | Failed
