"""Client channels between services: traced, with sane limits."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Literal

import grpc

from services.common.cancel import cancelling
from services.common.keepalive import KEEPALIVE, KeepalivePolicy
from services.common.telemetry import Telemetry
from services.common.tls import ChannelTls

_MAX_MESSAGE_BYTES = 32 * 1024 * 1024
RECONNECT_OPTIONS: list[tuple[str, int]] = [
    ("grpc.initial_reconnect_backoff_ms", 500),
    ("grpc.max_reconnect_backoff_ms", 2_000),
]
"""A peer that went away is tried again every 0.5-2 s: gRPC's default backoff grows to two
minutes, so a service restarted after a longer outage was reached 70-90 s after it came back."""


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
    reconnects within seconds of its peer coming back (`RECONNECT_OPTIONS`), keeps an idle
    connection alive within what Quarry servers accept
    (`services.common.keepalive`), cancels the RPC when its caller is cancelled
    (`services.common.cancel`) and runs `interceptors` (e.g. `services.common.auth.StaticKey`,
    which sends an API key) on every call. `round_robin` spreads calls over every address a
    `dns:///` target resolves to (a Kubernetes headless Service)."""
    chain: list[Any] = filed_per_kind(
        cancelling([*(telemetry.client_interceptors() if telemetry else ()), *interceptors])
    )
    options: list[tuple[str, Any]] = [
        ("grpc.max_send_message_length", _MAX_MESSAGE_BYTES),
        ("grpc.max_receive_message_length", _MAX_MESSAGE_BYTES),
        *keepalive.client_options(),
        *RECONNECT_OPTIONS,
        ("grpc.service_config", json.dumps({"loadBalancingConfig": [{load_balancing: {}}]})),
    ]
    if tls is not None and tls.enabled:
        return grpc.aio.secure_channel(
            target, tls.credentials(), options=[*options, *tls.options()], interceptors=chain
        )
    return grpc.aio.insecure_channel(target, options=options, interceptors=chain)


class _UnaryStreamPart(grpc.aio.UnaryStreamClientInterceptor):  # type: ignore[type-arg]
    """The unary-stream side of an interceptor that implements several kinds."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    async def intercept_unary_stream(
        self, continuation: Any, client_call_details: Any, request: Any
    ) -> Any:
        return await self._inner.intercept_unary_stream(continuation, client_call_details, request)


def filed_per_kind(interceptors: Sequence[Any]) -> list[Any]:
    """grpc.aio files each client interceptor under the FIRST kind it implements only, so one
    that is both unary-unary and unary-stream (e.g. `StaticKey`) would never see a stream: it is
    given to the channel a second time, as its unary-stream part."""
    filed: list[Any] = []
    for interceptor in interceptors:
        filed.append(interceptor)
        if isinstance(interceptor, grpc.aio.UnaryUnaryClientInterceptor) and isinstance(
            interceptor, grpc.aio.UnaryStreamClientInterceptor
        ):
            filed.append(_UnaryStreamPart(interceptor))
    return filed
