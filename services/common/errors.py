"""The domain-exception hierarchy every service raises. Plain Python: no grpc, no protobuf.

    QuarryError                      INTERNAL
    ├── InvalidArgument              INVALID_ARGUMENT + BadRequest field violations
    ├── NotFound                     NOT_FOUND
    ├── AlreadyExists                ALREADY_EXISTS
    ├── PermissionDenied             PERMISSION_DENIED
    ├── Unauthenticated              UNAUTHENTICATED
    ├── FailedPrecondition           FAILED_PRECONDITION
    ├── ResourceExhausted            RESOURCE_EXHAUSTED + RetryInfo
    ├── Unavailable                  UNAVAILABLE + RetryInfo
    ├── DeadlineExceeded             DEADLINE_EXCEEDED
    ├── Cancelled                    CANCELLED
    ├── Unimplemented                UNIMPLEMENTED
    └── DataLoss                     DATA_LOSS

The status codes on the right are applied at the edge, in both directions, by
`services.common.status` (the error-mapping interceptor and every client that reads a status back);
domain code raises these and never imports grpc. Messages are meant for the caller: they never
contain stack traces or secrets, and quote a caller's value only through `shown`, a short marked
prefix, so an error about a 100 KB value stays small enough to reach the caller (gRPC refuses
trailers over 16 KiB; `services.common.status` also caps whatever reaches it).

It is also the one tree a caller of Quarry catches: the public clients (`services.agent.client`,
`services.search_tool.client`) turn every failed call into the error of its status code, so
`except QuarryError` (or one of its classes) handles every failure of either. Each error says its
status code by name (`code`, plain text: no grpc here) and whether a retry may succeed
(`retryable`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

CONTEXT_WINDOW_EXCEEDED = "CONTEXT_WINDOW_EXCEEDED"
"""`ErrorInfo.reason` of an INVALID_ARGUMENT whose request does not fit the model's context window:
the gateway sends it, the agent compacts on it (one name for both)."""
RETRYABLE_CODES = frozenset({"UNAVAILABLE", "DEADLINE_EXCEEDED", "RESOURCE_EXHAUSTED"})
"""Status codes a caller may retry (after the RetryInfo delay, when there is one)."""
MAX_SHOWN_CHARS = 48
"""The longest prefix of a caller's value an error message quotes."""


def shown(value: object, *, limit: int = MAX_SHOWN_CHARS) -> str:
    """`value` as an error message quotes it: its repr, or past `limit` characters a prefix
    marked as cut, with the full length (`'aaaa…' (100000 characters)`)."""
    text = value if isinstance(value, str) else str(value)
    if len(text) <= limit:
        return repr(text)
    return f"{text[:limit]!r}… ({len(text)} characters)"


@dataclass(frozen=True)
class FieldViolation:
    """One bad field of a request."""

    field: str
    """Path of the field, e.g. `filter.groups[0].conditions[1].operator`."""
    description: str
    """What is wrong with it, in words the caller can act on."""


class QuarryError(Exception):
    """Base of every error a Quarry service reports to its callers."""

    code: ClassVar[str] = "INTERNAL"
    """The gRPC status code's name the edge applies (`services.common.status`)."""
    default_reason: str = "INTERNAL"

    def __init__(
        self,
        message: str,
        *,
        reason: str | None = None,
        metadata: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.reason = reason or self.default_reason
        self.metadata = dict(metadata or {})

    @property
    def retryable(self) -> bool:
        """A retry may succeed (UNAVAILABLE, DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED)."""
        return self.code in RETRYABLE_CODES


class InvalidArgument(QuarryError):
    code = "INVALID_ARGUMENT"
    default_reason = "INVALID_ARGUMENT"

    def __init__(
        self,
        message: str,
        *,
        violations: list[FieldViolation] | None = None,
        reason: str | None = None,
        metadata: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message, reason=reason, metadata=metadata)
        self.violations = list(violations or [])

    @classmethod
    def for_violations(
        cls, violations: list[FieldViolation], *, shown: int | None = None
    ) -> InvalidArgument:
        """Every bad field at once; the message names the first `shown` (all when None)."""
        message = "; ".join(f"{v.field}: {v.description}" for v in violations[:shown])
        return cls(message, violations=violations)

    @classmethod
    def for_field(cls, field_path: str, description: str) -> InvalidArgument:
        """The common case: one field is wrong."""
        return cls(
            f"{field_path}: {description}", violations=[FieldViolation(field_path, description)]
        )


class NotFound(QuarryError):
    code = "NOT_FOUND"
    default_reason = "NOT_FOUND"


class AlreadyExists(QuarryError):
    code = "ALREADY_EXISTS"
    default_reason = "ALREADY_EXISTS"


class PermissionDenied(QuarryError):
    code = "PERMISSION_DENIED"
    default_reason = "PERMISSION_DENIED"


class Unauthenticated(QuarryError):
    code = "UNAUTHENTICATED"
    default_reason = "UNAUTHENTICATED"


class FailedPrecondition(QuarryError):
    code = "FAILED_PRECONDITION"
    default_reason = "FAILED_PRECONDITION"


class Retryable(QuarryError):
    """An error the caller may retry after `retry_after_s` (RetryInfo on the wire)."""

    def __init__(
        self,
        message: str,
        *,
        retry_after_s: float | None = None,
        reason: str | None = None,
        metadata: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message, reason=reason, metadata=metadata)
        self.retry_after_s = retry_after_s


class ResourceExhausted(Retryable):
    code = "RESOURCE_EXHAUSTED"
    default_reason = "RESOURCE_EXHAUSTED"


class Unavailable(Retryable):
    code = "UNAVAILABLE"
    default_reason = "UNAVAILABLE"


class DeadlineExceeded(QuarryError):
    code = "DEADLINE_EXCEEDED"
    default_reason = "DEADLINE_EXCEEDED"


class Cancelled(QuarryError):
    code = "CANCELLED"
    default_reason = "CANCELLED"


class Unimplemented(QuarryError):
    """The service called has no such method: a caller pointed at the wrong service or port."""

    code = "UNIMPLEMENTED"
    default_reason = "UNIMPLEMENTED"


class DataLoss(QuarryError):
    """Stored data is damaged: the message and metadata name what (a collection, a run)."""

    code = "DATA_LOSS"
    default_reason = "DATA_LOSS"


class Aborted(QuarryError):
    """A dependency gave up on a call part-way (a conflict or a concurrency abort): retried at a
    higher level, if at all, as gRPC's status guidance says."""

    code = "ABORTED"
    default_reason = "ABORTED"


class OutOfRange(QuarryError):
    code = "OUT_OF_RANGE"
    default_reason = "OUT_OF_RANGE"


class Unknown(QuarryError):
    """A dependency answered UNKNOWN (no status of its own, e.g. a proxy's or a crashed handler's):
    kept as UNKNOWN so the caller sees what the dependency said, not an INTERNAL of ours."""

    code = "UNKNOWN"
    default_reason = "UNKNOWN"
