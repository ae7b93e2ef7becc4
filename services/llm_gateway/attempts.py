"""What happened on the way to an answer: the attempts of a routed request, and how it can fail.

ChainError                   every outcome the caller sees as an error carries the attempts
├── RouteNotFound            NOT_FOUND
├── RequestTooLarge          INVALID_ARGUMENT + CONTEXT_WINDOW_EXCEEDED
├── RequestRejected          INVALID_ARGUMENT: a provider rejected the request itself
├── AllProvidersFailed       UNAVAILABLE, or RESOURCE_EXHAUSTED when rate limited everywhere
├── StreamInterrupted        UNAVAILABLE: the stream broke after deltas reached the caller
└── DeadlineReached          DEADLINE_EXCEEDED: the caller's deadline left no room to try
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from services.common.errors import shown
from services.llm_gateway.model import ChatResponse


class AttemptOutcome(Enum):
    SUCCESS = "success"
    RETRYABLE_ERROR = "retryable_error"
    FATAL_ERROR = "fatal_error"
    CONTEXT_WINDOW_EXCEEDED = "context_window_exceeded"
    SKIPPED_BREAKER_OPEN = "skipped_breaker_open"
    SKIPPED_CONTEXT_WINDOW = "skipped_context_window"
    CANCELLED = "cancelled"


@dataclass(frozen=True)
class Attempt:
    """One try against one provider (or a provider skipped)."""

    provider: str
    """Provider entry name."""
    model: str
    outcome: AttemptOutcome
    error: str = ""
    """Error class and message, secrets removed."""
    latency_ms: float = 0.0
    try_number: int = 0
    """1 for the first try against this provider; 0 when it was skipped."""
    rate_limited: bool = False
    """The provider answered 429."""
    retry_after_s: float | None = None
    """Retry-After the provider sent, when it did."""


@dataclass
class RoutedResponse:
    """A provider's answer and how the chain got it."""

    response: ChatResponse
    provider: str
    """Entry name of the provider that answered."""
    attempts: list[Attempt] = field(default_factory=list)


class ChainError(Exception):
    """A routed request failed; `attempts` says what was tried."""

    reason = "ALL_PROVIDERS_FAILED"
    """ErrorInfo reason when the failure is reported as UNAVAILABLE."""

    def __init__(self, message: str, attempts: list[Attempt] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.attempts = list(attempts or [])


class RouteNotFound(ChainError):
    def __init__(self, route: str, known: list[str]) -> None:
        super().__init__(f"route {shown(route)} is not configured (routes: {', '.join(known)})")
        self.route = route


class RequestTooLarge(ChainError):
    """The conversation does not fit the context window: compact it and ask again."""

    def __init__(
        self,
        message: str,
        attempts: list[Attempt],
        *,
        provider: str,
        model: str,
        context_window_tokens: int,
    ) -> None:
        super().__init__(message, attempts)
        self.provider = provider
        self.model = model
        self.context_window_tokens = context_window_tokens


class RequestRejected(ChainError):
    """A provider rejected the request itself (a caller mistake); no fallback would accept it."""


class AllProvidersFailed(ChainError):
    """Every provider of the route failed or was skipped."""

    @property
    def rate_limited_everywhere(self) -> bool:
        tried = [a for a in self.attempts if a.try_number > 0]
        return bool(tried) and all(a.rate_limited for a in tried)

    @property
    def retry_after_s(self) -> float | None:
        """The smallest Retry-After seen: the earliest moment one provider accepts again."""
        delays = [a.retry_after_s for a in self.attempts if a.retry_after_s is not None]
        return min(delays) if delays else None


class StreamInterrupted(ChainError):
    """The stream broke after deltas reached the caller; falling back would duplicate them."""

    reason = "STREAM_INTERRUPTED"


class DeadlineReached(ChainError):
    """The caller's deadline left no time for (another) attempt."""
