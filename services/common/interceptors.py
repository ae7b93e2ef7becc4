"""Server interceptor that maps domain exceptions to statuses: the one error mapper.

Servicers raise `QuarryError`s (or let them propagate from domain code); this turns them into a
status with ErrorInfo / BadRequest / RetryInfo details. Anything else becomes a bare INTERNAL with
no stack trace on the wire (the trace is logged). Request bytes that are not a valid message (a
truncated message, invalid UTF-8 in a string field) are the caller's error: INVALID_ARGUMENT naming
`request`, for every service, instead of grpc's UNKNOWN "Unexpected DecodeError".
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
from google.protobuf.message import DecodeError

from services.common.errors import InvalidArgument, QuarryError
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
                request_deserializer=_tolerant(handler.request_deserializer),
                response_serializer=handler.response_serializer,
            )
        if handler.unary_stream is not None:
            return grpc.unary_stream_rpc_method_handler(
                _wrap_stream(handler.unary_stream, method),
                request_deserializer=_tolerant(handler.request_deserializer),
                response_serializer=handler.response_serializer,
            )
        return handler


class _Undecodable:
    """What a request that failed to parse becomes, so the handler can refuse it with a status
    (a deserializer cannot: it has no context to abort)."""

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def refusal(self) -> InvalidArgument:
        return InvalidArgument.for_field(
            "request", f"the request bytes are not a valid message ({self.reason})"
        )


def _tolerant(deserialize: Callable[[bytes], Any] | None) -> Callable[[bytes], Any] | None:
    if deserialize is None:
        return None

    def parse(data: bytes) -> Any:
        try:
            return deserialize(data)
        except DecodeError as error:
            return _Undecodable(str(error) or "cannot decode")

    return parse


def _wrap_unary(
    inner: Any, method: str
) -> Callable[[Any, grpc.aio.ServicerContext[Any, Any]], Any]:
    async def unary(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        try:
            if isinstance(request, _Undecodable):
                raise request.refusal()
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
            if isinstance(request, _Undecodable):
                raise request.refusal()
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
