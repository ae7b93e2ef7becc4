"""Domain errors ⇄ gRPC statuses, both directions, in one place at the edge.

Outbound, `to_rpc_status` turns a `QuarryError` into the `google.rpc.Status` a caller receives:
its code, an `ErrorInfo(reason, domain="quarry.dev", metadata)`, `BadRequest` field violations for
`InvalidArgument`, and `RetryInfo` on every UNAVAILABLE and RESOURCE_EXHAUSTED (the error's
`retry_after_s`, else `DEFAULT_RETRY_AFTER_S`). The error-mapping interceptor is its only user.

Every text of an outbound status is capped (`MAX_MESSAGE_BYTES` and the limits below it) so the
whole status stays well under gRPC's 16 KiB trailer limit: past it a caller would see
`RESOURCE_EXHAUSTED "received metadata size exceeds hard limit"` instead of the status. Messages
quote caller values through `errors.shown` already; the cap is the guard for the one that does not.

Inbound, `details_of_rpc_error` reads those details back from a failed call and `domain_error`
turns the call into the `QuarryError` of the same code, so code behind a client never sees grpc.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import grpc
from google.protobuf import duration_pb2
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status

from services.common import errors
from services.common.errors import FieldViolation, QuarryError

ERROR_DOMAIN = "quarry.dev"
DEFAULT_RETRY_AFTER_S = 1.0
"""The RetryInfo delay of a retryable status whose error named none."""
RETRYABLE_CODES = frozenset(grpc.StatusCode[name] for name in errors.RETRYABLE_CODES)
"""Codes a caller may retry (after the RetryInfo delay, when there is one)."""

MAX_MESSAGE_BYTES = 768
"""The status message, in UTF-8 bytes (percent-encoded on the wire: up to 2.3 KiB)."""
MAX_VIOLATIONS = 8
"""Field violations sent; past it the last one says how many more there were."""
MAX_FIELD_BYTES = 96
MAX_DESCRIPTION_BYTES = 192
MAX_METADATA_ENTRIES = 8
MAX_METADATA_BYTES = 96
"""Each ErrorInfo metadata key, and the reason."""
MAX_METADATA_VALUE_BYTES = 1_024
"""Each ErrorInfo metadata value (the gateway's `attempts` is JSON of about 100 bytes a try)."""
MAX_METADATA_TOTAL_BYTES = 2_048
"""All metadata values together; values past it are cut to what is left."""

_CODES: dict[type[QuarryError], grpc.StatusCode] = {
    cls: grpc.StatusCode[cls.code]
    for cls in (
        errors.InvalidArgument,
        errors.NotFound,
        errors.AlreadyExists,
        errors.PermissionDenied,
        errors.Unauthenticated,
        errors.FailedPrecondition,
        errors.ResourceExhausted,
        errors.Unavailable,
        errors.DeadlineExceeded,
        errors.Cancelled,
        errors.Unimplemented,
        errors.DataLoss,
        errors.Aborted,
        errors.OutOfRange,
        errors.Unknown,
        QuarryError,
    )
}
"""Each class's status code, named by the class itself (`QuarryError.code`)."""
_ERRORS: dict[grpc.StatusCode, type[QuarryError]] = {code: cls for cls, code in _CODES.items()}


def code_of(error: QuarryError) -> grpc.StatusCode:
    """The status code of `error` (of its nearest mapped class, so subclasses inherit it)."""
    for cls in type(error).__mro__:
        if cls in _CODES:
            return _CODES[cls]
    return grpc.StatusCode.INTERNAL


def is_retryable(code: grpc.StatusCode) -> bool:
    return code in RETRYABLE_CODES


def to_rpc_status(error: QuarryError) -> status_pb2.Status:
    """The `google.rpc.Status` (code, message, details) a caller receives for `error`."""
    code = code_of(error)
    status = status_pb2.Status(code=code.value[0], message=capped(error.message, MAX_MESSAGE_BYTES))
    metadata = _metadata(error.metadata)
    info = error_details_pb2.ErrorInfo(
        reason=capped(error.reason, MAX_METADATA_BYTES), domain=ERROR_DOMAIN, metadata=metadata
    )
    status.details.add().Pack(info)
    if isinstance(error, errors.InvalidArgument) and error.violations:
        status.details.add().Pack(_bad_request(error.violations))
    if isinstance(error, errors.Retryable):
        delay = duration_pb2.Duration()
        retry_after_s = error.retry_after_s
        if retry_after_s is None:
            retry_after_s = DEFAULT_RETRY_AFTER_S
        delay.FromMilliseconds(int(retry_after_s * 1000))
        status.details.add().Pack(error_details_pb2.RetryInfo(retry_delay=delay))
    return status


def capped(text: str, max_bytes: int) -> str:
    """`text` within `max_bytes` of UTF-8, cut at a character and marked (`… [cut: N bytes]`)."""
    data = text.encode()
    if len(data) <= max_bytes:
        return text
    marker = f"… [cut: {len(data)} bytes]"
    kept = data[: max_bytes - len(marker.encode())].decode(errors="ignore")
    return kept + marker


def _metadata(metadata: dict[str, str]) -> dict[str, str]:
    left = MAX_METADATA_TOTAL_BYTES
    kept: dict[str, str] = {}
    for key, value in list(metadata.items())[:MAX_METADATA_ENTRIES]:
        value = capped(value, max(min(MAX_METADATA_VALUE_BYTES, left), 64))
        kept[capped(key, MAX_METADATA_BYTES)] = value
        left -= len(value.encode())
    return kept


def _bad_request(violations: list[FieldViolation]) -> error_details_pb2.BadRequest:
    sent = violations[:MAX_VIOLATIONS]
    entries = [
        (capped(v.field, MAX_FIELD_BYTES), capped(v.description, MAX_DESCRIPTION_BYTES))
        for v in sent
    ]
    if len(violations) > len(sent):
        field, description = entries[-1]
        more = len(violations) - len(sent)
        entries[-1] = (
            field,
            capped(f"{description} (and {more} more violations)", MAX_DESCRIPTION_BYTES + 64),
        )
    return error_details_pb2.BadRequest(
        field_violations=[
            error_details_pb2.BadRequest.FieldViolation(field=f, description=d) for f, d in entries
        ]
    )


def to_grpc_status(error: QuarryError) -> grpc.Status:
    """`to_rpc_status` in the form `context.abort` and `abort_with_status` take."""
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

    @property
    def retryable(self) -> bool:
        return is_retryable(self.code)


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


def domain_error(error: grpc.aio.AioRpcError, service: str = "") -> QuarryError:
    """The domain exception for a failed call, keeping its code and details; its message starts
    with `service: ` when given (a dependency's failure says which dependency failed)."""
    details = details_of_rpc_error(error)
    text = details.message or details.code.name
    message = f"{service}: {text}" if service else text
    cls = _ERRORS.get(details.code, QuarryError)
    reason = details.reason or None
    if issubclass(cls, errors.InvalidArgument):
        return cls(message, violations=details.violations, reason=reason)
    if issubclass(cls, errors.Retryable):
        return cls(message, retry_after_s=details.retry_after_s, reason=reason)
    return cls(message, reason=reason, metadata=details.metadata)


def _status_bytes(trailing: object) -> bytes | None:
    if not trailing:
        return None
    for item in trailing:  # type: ignore[attr-defined]
        key, value = item
        if key == "grpc-status-details-bin" and isinstance(value, bytes):
            return value
    return None
