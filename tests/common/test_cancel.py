"""`cancelling` wraps only the interceptors that can swallow a caller's cancellation."""

from __future__ import annotations

from opentelemetry.instrumentation.grpc import aio_client_interceptors

from services.common.auth import StaticKey
from services.common.cancel import CancelsInFlightCall, cancelling


def test_tracing_unary_interceptor_is_wrapped_and_multi_kind_ones_keep_every_kind() -> None:
    tracing = aio_client_interceptors()  # type: ignore[no-untyped-call]
    key = StaticKey("k")
    chain = cancelling([*tracing, key])
    assert isinstance(chain[0], CancelsInFlightCall)
    assert chain[0].inner is tracing[0]
    assert chain[1:] == [*tracing[1:], key]
    assert cancelling(chain) == chain
