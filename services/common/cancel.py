"""Cancelling a client call cancels the RPC itself, whatever interceptors sit in front of it.

grpc.aio runs a channel's client interceptors in one task and hands the call to the caller only
when they return. An interceptor that awaits the call's outcome before returning (OpenTelemetry's
awaits `call.code()` to finish its span) is where a cancelled caller is cancelled: the
`CancelledError` unwinds the interceptor, grpc has no call to cancel yet, and the RPC it started
runs on to completion downstream — a model call still generating (and billed), a search still
searching, after the caller has gone.

`CancelsInFlightCall` wraps such an interceptor: it remembers the call the chain below it
started and cancels it when the interceptor is cancelled. `open_channel` wraps each client
interceptor of a channel that intercepts unary-unary calls only (an interceptor of several call
kinds, like the API-key ones, returns the call at once and is left as it is).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

import grpc


class CancelsInFlightCall(grpc.aio.UnaryUnaryClientInterceptor):  # type: ignore[type-arg]
    """`inner`, except that its cancellation cancels the RPC it had started."""

    def __init__(self, inner: grpc.aio.UnaryUnaryClientInterceptor[Any, Any]) -> None:
        self.inner = inner

    async def intercept_unary_unary(
        self,
        continuation: Callable[[grpc.aio.ClientCallDetails, Any], Any],
        client_call_details: grpc.aio.ClientCallDetails,
        request: Any,
    ) -> Any:
        started: list[grpc.aio.Call] = []

        async def remembered(details: grpc.aio.ClientCallDetails, message: Any) -> Any:
            call = await continuation(details, message)
            started.append(call)
            return call

        try:
            return await self.inner.intercept_unary_unary(
                remembered,  # type: ignore[arg-type]  # grpc awaits what a continuation returns
                client_call_details,
                request,
            )
        except asyncio.CancelledError:
            for call in started:
                call.cancel()
            raise


_OTHER_KINDS = (
    grpc.aio.UnaryStreamClientInterceptor,
    grpc.aio.StreamUnaryClientInterceptor,
    grpc.aio.StreamStreamClientInterceptor,
)


def cancelling(interceptors: Sequence[Any]) -> list[Any]:
    """`interceptors`, each one of unary-unary calls only wrapped in `CancelsInFlightCall`."""
    return [
        CancelsInFlightCall(i)
        if isinstance(i, grpc.aio.UnaryUnaryClientInterceptor)
        and not isinstance(i, (*_OTHER_KINDS, CancelsInFlightCall))
        else i
        for i in interceptors
    ]
