"""How provider failures are told apart: classified once (`classify.py`), acted on by the chain.

    ProviderError
    ├── RetryableProviderError     429, 5xx, 529, timeouts, connection errors, truncated streams
    │   └── RateLimited            429 (honours Retry-After)
    ├── FatalProviderError         401/403/404, other 400s: bad request or bad credentials
    └── ContextWindowExceeded      does not fit: never retried, never a breaker failure

    InvalidConversation            the caller's conversation is malformed (before any provider)

Messages are safe to show: API keys never appear in them.
"""

from __future__ import annotations


class ProviderError(Exception):
    """A failure of one attempt against one provider."""

    def __init__(
        self, message: str, *, status: int | None = None, retry_after_s: float | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        """HTTP status, when there was one."""
        self.retry_after_s = retry_after_s
        """Server-requested delay before retrying (Retry-After), when given."""


class RetryableProviderError(ProviderError):
    """Worth retrying, then falling back; counts against the breaker."""


class RateLimited(RetryableProviderError):
    """HTTP 429."""


class FatalProviderError(ProviderError):
    """Not worth retrying against this provider; counts against the breaker unless caused by the
    caller's request (`caller_error`)."""

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        retry_after_s: float | None = None,
        caller_error: bool = False,
    ) -> None:
        super().__init__(message, status=status, retry_after_s=retry_after_s)
        self.caller_error = caller_error


class ContextWindowExceeded(ProviderError):
    """The request does not fit the model's context window."""


class InvalidConversation(ValueError):
    """The request cannot be sent to any provider as it stands (e.g. a tool result without its
    call); the servicer reports it as INVALID_ARGUMENT naming `field`. Not a provider failure."""

    def __init__(self, field: str, description: str) -> None:
        super().__init__(f"{field}: {description}")
        self.field = field
        """Path of the offending request field, e.g. `messages[3].tool_call_id`."""
        self.description = description
