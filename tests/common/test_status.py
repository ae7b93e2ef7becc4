"""Domain errors stay plain Python; `services.common.status` maps them at the edge."""

from __future__ import annotations

import base64
import subprocess
import sys

import grpc
import pytest

from services.common import errors
from services.common.status import (
    DEFAULT_RETRY_AFTER_S,
    MAX_MESSAGE_BYTES,
    MAX_VIOLATIONS,
    details_of,
    domain_error,
    to_grpc_status,
    to_rpc_status,
)


def test_importing_the_domain_errors_does_not_import_grpc() -> None:
    probe = (
        "import sys, services.common.errors; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('grpc', 'google')))"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"


class _ModelDown(errors.Unavailable):
    """A service's own subclass, as services declare them."""


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (errors.InvalidArgument("bad", reason="BAD_QUERY"), grpc.StatusCode.INVALID_ARGUMENT),
        (errors.NotFound("gone"), grpc.StatusCode.NOT_FOUND),
        (_ModelDown("down"), grpc.StatusCode.UNAVAILABLE),
        (errors.QuarryError("broken"), grpc.StatusCode.INTERNAL),
    ],
)
def test_a_domain_error_keeps_its_code_message_and_reason_on_the_wire(
    error: errors.QuarryError, code: grpc.StatusCode
) -> None:
    status = to_grpc_status(error)
    details = details_of(status.code, status.details, status.trailing_metadata)
    assert (details.code, details.message, details.reason) == (code, error.message, error.reason)


@pytest.mark.parametrize("code", [c for c in grpc.StatusCode if c is not grpc.StatusCode.OK])
def test_a_dependency_status_of_any_code_is_raised_with_that_same_code(
    code: grpc.StatusCode,
) -> None:
    """A client (the agent's, the search tool's) re-raises a failed call as a domain error: the
    caller sees the dependency's code, never INTERNAL in place of ABORTED, OUT_OF_RANGE or
    UNKNOWN, and the same code again when the error is passed on."""
    failed = grpc.aio.AioRpcError(
        code, grpc.aio.Metadata(), grpc.aio.Metadata(), "it said no", debug_error_string=""
    )
    error = domain_error(failed, "search-tool")
    assert error.code == code.name
    assert error.message == "search-tool: it said no"
    assert to_grpc_status(error).code == code


@pytest.mark.parametrize("cls", [errors.Unavailable, errors.ResourceExhausted])
def test_every_retryable_status_carries_a_retry_delay_even_when_the_error_named_none(
    cls: type[errors.Retryable],
) -> None:
    status = to_grpc_status(cls("busy"))
    details = details_of(status.code, status.details, status.trailing_metadata)
    assert details.retry_after_s == pytest.approx(DEFAULT_RETRY_AFTER_S)
    assert details.retryable


def test_a_status_about_huge_values_stays_far_below_the_trailer_limit() -> None:
    """Errors echoing 100 KB values made gRPC drop the status."""
    huge = "é" * 100_000
    error = errors.InvalidArgument(
        f"title: {huge}",
        violations=[errors.FieldViolation(f"documents[{n}].{huge}", huge) for n in range(50)],
        metadata={f"k{n}{huge}": huge for n in range(40)},
    )
    status = to_rpc_status(error)
    details_on_the_wire = len(base64.b64encode(status.SerializeToString()))
    message_on_the_wire = 3 * len(status.message.encode())  # percent-encoded, worst case
    assert details_on_the_wire + message_on_the_wire < 12 * 1024  # gRPC refuses 16 KiB
    assert len(status.message.encode()) <= MAX_MESSAGE_BYTES
    assert status.message.startswith("title: éé")
    assert "[cut: 200007 bytes]" in status.message
    details = details_of(
        grpc.StatusCode.INVALID_ARGUMENT,
        status.message,
        [("grpc-status-details-bin", status.SerializeToString())],
    )
    assert len(details.violations) == MAX_VIOLATIONS
    assert details.violations[0].field.startswith("documents[0].")
    assert "(and 42 more violations)" in details.violations[-1].description


def test_shown_quotes_short_values_whole_and_long_ones_as_a_marked_prefix() -> None:
    assert errors.shown("abc") == "'abc'"
    assert (
        errors.shown("x" * 100_000) == repr("x" * errors.MAX_SHOWN_CHARS) + "… (100000 characters)"
    )
    assert errors.shown(12) == "'12'"
