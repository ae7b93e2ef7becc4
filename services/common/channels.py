"""Client channels between services: traced, with sane limits."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Literal

import grpc

from services.common.keepalive import KEEPALIVE, KeepalivePolicy
from services.common.telemetry import Telemetry
from services.common.tls import ChannelTls

_MAX_MESSAGE_BYTES = 32 * 1024 * 1024


def open_channel(
    target: str,
    telemetry: Telemetry | None = None,
    *,
    keepalive: KeepalivePolicy = KEEPALIVE,
    interceptors: Sequence[Any] = (),
    tls: ChannelTls | None = None,
    load_balancing: Literal["pick_first", "round_robin"] = "pick_first",
) -> grpc.aio.Channel:
    """A grpc.aio channel to `target` (TLS when `tls.enabled`) that propagates the trace context,
    keeps an idle connection alive within what Quarry servers accept
    (`services.common.keepalive`) and runs `interceptors` (e.g. `services.common.auth.StaticKey`,
    which sends an API key) on every call. `round_robin` spreads calls over every address a
    `dns:///` target resolves to (a Kubernetes headless Service)."""
    chain = _one_kind_each([*(telemetry.client_interceptors() if telemetry else ()), *interceptors])
    options: list[tuple[str, Any]] = [
        ("grpc.max_send_message_length", _MAX_MESSAGE_BYTES),
        ("grpc.max_receive_message_length", _MAX_MESSAGE_BYTES),
        *keepalive.client_options(),
        ("grpc.service_config", json.dumps({"loadBalancingConfig": [{load_balancing: {}}]})),
    ]
    if tls is not None and tls.enabled:
        return grpc.aio.secure_channel(
            target, tls.credentials(), options=[*options, *tls.options()], interceptors=chain
        )
    return grpc.aio.insecure_channel(target, options=options, interceptors=chain)


class _UnaryStreamPart(grpc.aio.UnaryStreamClientInterceptor):  # type: ignore[type-arg]
    """The unary-stream half of an interceptor that implements several kinds."""

    def __init__(self, interceptor: Any) -> None:
        self._interceptor = interceptor

    async def intercept_unary_stream(
        self, continuation: Any, client_call_details: Any, request: Any
    ) -> Any:
        return await self._interceptor.intercept_unary_stream(
            continuation, client_call_details, request
        )


def _one_kind_each(interceptors: Sequence[Any]) -> list[Any]:
    """grpc.aio files an interceptor under its FIRST kind only (unary-unary before
    unary-stream), so one implementing both would never see a streaming call (an API key
    missing on `StreamRun`); such an interceptor is added once more as its unary-stream part."""
    chain: list[Any] = []
    for interceptor in interceptors:
        chain.append(interceptor)
        if isinstance(interceptor, grpc.aio.UnaryUnaryClientInterceptor) and isinstance(
            interceptor, grpc.aio.UnaryStreamClientInterceptor
        ):
            chain.append(_UnaryStreamPart(interceptor))
    return chain
