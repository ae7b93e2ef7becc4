"""What a run reports while it happens: started, thinking, one event per tool call (each tool's
own, a `ToolEvent` defined in its module: searching, calculating, ...), then done or error."""

from __future__ import annotations

from dataclasses import dataclass

from services.agent.records import AnsweredBy
from services.agent.run import Mode, RunResult, StepEvent
from services.agent.tools.base import ToolEvent


@dataclass(frozen=True)
class Started(StepEvent):
    run_id: str
    collection: str
    mode: Mode
    route: str


@dataclass(frozen=True)
class Thinking(StepEvent):
    """The model's own text before its tool calls."""

    iteration: int
    text: str
    answered_by: AnsweredBy | None = None
    """The provider and model that wrote the text."""


@dataclass(frozen=True)
class Done(StepEvent):
    result: RunResult


@dataclass(frozen=True)
class Failed:
    """The run stopped on an error; `code` is the gRPC status code name."""

    code: str
    message: str
    retryable: bool
    retry_after_s: float | None = None
    """When to retry, if the failing service said (its RetryInfo)."""


AgentEvent = Started | Thinking | ToolEvent | Done | Failed
