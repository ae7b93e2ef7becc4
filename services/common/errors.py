"""The domain-exception hierarchy every service raises, and its one mapping to gRPC statuses.

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
    └── Cancelled                    CANCELLED

Every status carries an `ErrorInfo(reason, domain="quarry.dev", metadata)`. Messages are meant for
the caller: they never contain stack traces or secrets. Domain code raises these and never imports
grpc; `to_rpc_status` (used by the error-mapping interceptor) is the only place that turns them into
statuses, and `details_of` is the one place a client reads them back.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import grpc
from google.protobuf import duration_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

ERROR_DOMAIN = "quarry.dev"


@dataclass(frozen=True)
class FieldViolation:
    """One bad field of a request."""

    field: str
    """Path of the field, e.g. `filter.groups[0].conditions[1].operator`."""
    description: str
    """What is wrong with it, in words the caller can act on."""


class QuarryError(Exception):
    """Base of every error a Quarry service reports to its callers."""

    code: grpc.StatusCode = grpc.StatusCode.INTERNAL
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


class InvalidArgument(QuarryError):
    code = grpc.StatusCode.INVALID_ARGUMENT
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
    def for_field(cls, field_path: str, description: str) -> InvalidArgument:
        """The common case: one field is wrong."""
        return cls(
            f"{field_path}: {description}", violations=[FieldViolation(field_path, description)]
        )


class NotFound(QuarryError):
    code = grpc.StatusCode.NOT_FOUND
    default_reason = "NOT_FOUND"


class AlreadyExists(QuarryError):
    code = grpc.StatusCode.ALREADY_EXISTS
    default_reason = "ALREADY_EXISTS"


class PermissionDenied(QuarryError):
    code = grpc.StatusCode.PERMISSION_DENIED
    default_reason = "PERMISSION_DENIED"


class Unauthenticated(QuarryError):
    code = grpc.StatusCode.UNAUTHENTICATED
    default_reason = "UNAUTHENTICATED"


class FailedPrecondition(QuarryError):
    code = grpc.StatusCode.FAILED_PRECONDITION
    default_reason = "FAILED_PRECONDITION"


class _Retryable(QuarryError):
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


class ResourceExhausted(_Retryable):
    code = grpc.StatusCode.RESOURCE_EXHAUSTED
    default_reason = "RESOURCE_EXHAUSTED"


class Unavailable(_Retryable):
    code = grpc.StatusCode.UNAVAILABLE
    default_reason = "UNAVAILABLE"


class DeadlineExceeded(QuarryError):
    code = grpc.StatusCode.DEADLINE_EXCEEDED
    default_reason = "DEADLINE_EXCEEDED"


class Cancelled(QuarryError):
    code = grpc.StatusCode.CANCELLED
    default_reason = "CANCELLED"


def to_rpc_status(error: QuarryError) -> status_pb2.Status:
    """The `google.rpc.Status` (code, message, details) a caller receives for `error`."""
    status = status_pb2.Status(code=_CODE_NUMBERS[error.code], message=error.message)
    info = error_details_pb2.ErrorInfo(
        reason=error.reason, domain=ERROR_DOMAIN, metadata=error.metadata
    )
    status.details.add().Pack(info)
    if isinstance(error, InvalidArgument) and error.violations:
        bad_request = error_details_pb2.BadRequest(
            field_violations=[
                error_details_pb2.BadRequest.FieldViolation(
                    field=v.field, description=v.description
                )
                for v in error.violations
            ]
        )
        status.details.add().Pack(bad_request)
    if isinstance(error, _Retryable) and error.retry_after_s is not None:
        delay = duration_pb2.Duration()
        delay.FromMilliseconds(int(error.retry_after_s * 1000))
        status.details.add().Pack(error_details_pb2.RetryInfo(retry_delay=delay))
    return status


def to_grpc_status(error: QuarryError) -> grpc.Status:
    """`to_rpc_status` in the form `context.abort_with_status` takes."""
    return rpc_status.to_status(to_rpc_status(error))


@dataclass
class StatusDetails:
    """The rich details a client can read back from a failed call."""

    code: grpc.StatusCode
    message: str
    reason: str = ""
    metadata: dict[str, str] = field(default_factory=dict)
    violations: list[FieldViolation] = field(default_factory=list)
    retry_after_s: float | None = None


def details_of(code: grpc.StatusCode, message: str, trailing: object) -> StatusDetails:
    """Read ErrorInfo, BadRequest and RetryInfo from a call's trailing metadata."""
    result = StatusDetails(code=code, message=message)
    raw = _status_bytes(trailing)
    if raw is None:
        return result
    status = status_pb2.Status.FromString(raw)
    for detail in status.details:
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
            result.reason, result.metadata = info.reason, dict(info.metadata)
        elif detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
            bad = error_details_pb2.BadRequest()
            detail.Unpack(bad)
            result.violations = [
                FieldViolation(v.field, v.description) for v in bad.field_violations
            ]
        elif detail.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
            retry = error_details_pb2.RetryInfo()
            detail.Unpack(retry)
            result.retry_after_s = retry.retry_delay.ToMilliseconds() / 1000
    return result


def details_of_rpc_error(error: grpc.aio.AioRpcError) -> StatusDetails:
    """`details_of` for the exception a grpc.aio call raises."""
    return details_of(error.code(), error.details() or "", error.trailing_metadata())


def _status_bytes(trailing: object) -> bytes | None:
    if not trailing:
        return None
    for item in trailing:  # type: ignore[attr-defined]
        key, value = item
        if key == "grpc-status-details-bin" and isinstance(value, bytes):
            return value
    return None


_CODE_NUMBERS: dict[grpc.StatusCode, int] = {
    grpc.StatusCode.INVALID_ARGUMENT: code_pb2.INVALID_ARGUMENT,
    grpc.StatusCode.NOT_FOUND: code_pb2.NOT_FOUND,
    grpc.StatusCode.ALREADY_EXISTS: code_pb2.ALREADY_EXISTS,
    grpc.StatusCode.PERMISSION_DENIED: code_pb2.PERMISSION_DENIED,
    grpc.StatusCode.UNAUTHENTICATED: code_pb2.UNAUTHENTICATED,
    grpc.StatusCode.FAILED_PRECONDITION: code_pb2.FAILED_PRECONDITION,
    grpc.StatusCode.RESOURCE_EXHAUSTED: code_pb2.RESOURCE_EXHAUSTED,
    grpc.StatusCode.UNAVAILABLE: code_pb2.UNAVAILABLE,
    grpc.StatusCode.DEADLINE_EXCEEDED: code_pb2.DEADLINE_EXCEEDED,
    grpc.StatusCode.CANCELLED: code_pb2.CANCELLED,
    grpc.StatusCode.INTERNAL: code_pb2.INTERNAL,
}
