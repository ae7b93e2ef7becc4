"""Server interceptor that maps domain exceptions to statuses: the one error mapper.

Servicers raise `QuarryError`s (or let them propagate from domain code); this turns them into a
status with ErrorInfo / BadRequest / RetryInfo details. Anything else becomes a bare INTERNAL with
no stack trace on the wire (the trace is logged).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc

from services.common.errors import QuarryError
from services.common.status import code_of, to_grpc_status

log = logging.getLogger(__name__)


class ErrorMappingInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[type-arg]
    async def intercept_service(
        self,
        continuation: Callable[
            [grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler[Any, Any]]
        ],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any]:
        handler = await continuation(handler_call_details)
        if handler is None:
            return handler
        method = handler_call_details.method
        if handler.unary_unary is not None:
            return grpc.unary_unary_rpc_method_handler(
                _wrap_unary(handler.unary_unary, method),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        if handler.unary_stream is not None:
            return grpc.unary_stream_rpc_method_handler(
                _wrap_stream(handler.unary_stream, method),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        return handler


def _wrap_unary(
    inner: Any, method: str
) -> Callable[[Any, grpc.aio.ServicerContext[Any, Any]], Any]:
    async def unary(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        try:
            return await inner(request, context)
        except Exception as error:
            await _abort(context, error, method)

    return unary


def _wrap_stream(
    inner: Any, method: str
) -> Callable[[Any, grpc.aio.ServicerContext[Any, Any]], Any]:
    if not inspect.isasyncgenfunction(inner) and not inspect.isasyncgenfunction(
        getattr(inner, "__func__", None)
    ):
        return _wrap_writer(inner, method)

    async def stream(
        request: Any, context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[Any]:
        try:
            async for item in inner(request, context):
                yield item
        except Exception as error:
            await _abort(context, error, method)

    return stream


def _wrap_writer(
    inner: Any, method: str
) -> Callable[[Any, grpc.aio.ServicerContext[Any, Any]], AsyncIterator[Any]]:
    """A streaming handler that sends with `context.write` (grpc_health's Watch), presented as
    an async generator: the tracing interceptor iterates every streaming handler."""

    async def stream(
        request: Any, context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[Any]:
        try:
            await inner(request, context)
        except Exception as error:
            await _abort(context, error, method)
        nothing: tuple[Any, ...] = ()
        for item in nothing:
            yield item

    return stream


async def _abort(
    context: grpc.aio.ServicerContext[Any, Any], error: Exception, method: str
) -> None:
    if isinstance(error, grpc.aio.AbortError | asyncio.CancelledError):
        raise error
    if isinstance(error, QuarryError):
        log.info(
            "request failed",
            extra={"method": method, "code": code_of(error).name, "reason": error.reason},
        )
        status = to_grpc_status(error)
        await context.abort(status.code, status.details, status.trailing_metadata)
    log.error("unexpected error", extra={"method": method}, exc_info=error)
    await context.abort(grpc.StatusCode.INTERNAL, "internal error")
